"""Labels of gradient sources, unique within one report.

A gradient's label is its dict key in every report (``gradients``, ``ulp_by_tensor``), so two sources
with one label would leave one gradient out without a word. TF names every unnamed ``tf.Variable``
``Variable:0``, and two layers built outside a model can share a path; the second such source gets
``#2``, the third ``#3``, in the order the tape watched them.
"""

from __future__ import annotations

from typing import Iterable


def variable_labels(variables: Iterable, taken: Iterable[str] = ()) -> list[str]:
    """``"var:PATH"`` (a Keras variable's ``path``, else TF's ``name``) per variable, each unique.

    Args:
        variables: the trainable variables, in gradient order.
        taken: labels already used in the same report (the ``arg:NAME`` sources before them).

    Returns:
        One label per variable; a repeat gets ``#2``, ``#3`` … after it.

    Example:

    >>> import tensorflow as tf  # doctest: +SKIP
    >>> variable_labels([tf.Variable(1.0), tf.Variable(2.0)])  # doctest: +SKIP
    ['var:Variable:0', 'var:Variable:0#2']
    """
    seen = set(taken)
    out = []
    for v in variables:
        base = f"var:{getattr(v, 'path', None) or v.name}"
        label, n = base, 1
        while label in seen:
            n += 1
            label = f"{base}#{n}"
        seen.add(label)
        out.append(label)
    return out
