"""Reports: the one base record and every way it is shown.

Modules: `base` (`Report`: `function_name`, `config`, `to_text`/`to_dict`/repr),
`text` (plain-text tables and times), `jsonable` (JSON of any record),
`layout` (FuncGraph layout: Graphviz dot or networkx), `html` (the HTML
fragment of every report, found through `html.dispatch`'s registry, where each
lab package registers its records' renderers with ``renders``, and the
self-contained page), `pages` (the ``--html`` pages and TensorBoard output of
the verbs). Nothing here imports a lab package (this is the base layer).
Import the module you need; the package root imports none of them.
"""
