"""The renderer registry: `renders` ties a report class to the function that draws its HTML fragment.

A lab package registers its record's renderer where the class is defined
(``renders(TraceReport)(trace_notebook_fragment)``): this package imports no
lab package, so the import graph keeps running downward. `fragment` finds
the renderer by the class and its bases (``type(obj).__mro__``), never by a
name: a subclass inherits its base's renderer unless it registers its own, and
a class with none registered shows its ``to_text()``.
"""

from __future__ import annotations

from typing import Any, Callable

__all__ = ["fragment", "renderer_for", "renders"]

Renderer = Callable[[Any], str]

# report class -> the function that returns the body of its fragment (HTML, no wrapper div).
_RENDERERS: dict[type, Renderer] = {}


def renders(*classes: type) -> Callable[[Renderer], Renderer]:
    """Registers the decorated function as the HTML renderer of ``classes`` (and their subclasses).

    Args:
        *classes: report classes (at least one).

    Returns:
        A decorator that records the function and returns it unchanged.

    Raises:
        TypeError: no class, or something that is not a class.

    Example:
        >>> @renders(TraceReport)
        ... def trace_html(report):
        ...     return trace_fragment(report, op_list=False)
    """
    if not classes or not all(isinstance(c, type) for c in classes):
        raise TypeError(f"renders() takes one or more classes, got {classes!r}")

    def register(fn: Renderer) -> Renderer:
        for cls in classes:
            _RENDERERS[cls] = fn
        return fn

    return register


def renderer_for(cls: type) -> Renderer | None:
    """The renderer registered for ``cls`` or its nearest base that has one, else None."""
    for base in cls.__mro__:
        fn = _RENDERERS.get(base)
        if fn is not None:
            return fn
    return None


def fragment(obj: Any) -> str:
    """The HTML fragment of any tflab report, for ``_repr_html_`` and the pages (inline CSS and JS, no network).

    Args:
        obj: a report object.

    Returns:
        A ``<div class="tflab">`` holding its registered renderer's body (`renders`),
        or its ``to_text()`` when none is registered, and the CSS it needs.
    """
    from tflab.report.html.base import style, text_fragment

    render = renderer_for(type(obj)) or text_fragment
    return f'<div class="tflab">{style()}{render(obj)}</div>'
