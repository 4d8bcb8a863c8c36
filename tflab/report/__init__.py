"""Reports: the one base record and every way it is shown.

Modules: `base` (`Report`: `function_name`, `config`, `to_text`/`to_dict`/repr),
`text` (plain-text tables and times), `jsonable` (JSON of any record),
`layout` (FuncGraph layout: Graphviz dot or networkx), `html` (the HTML
fragment of every report and the self-contained page), `pages` (the
``--html`` pages and TensorBoard output of the verbs). Import the module you
need; the package root imports none of them.
"""
