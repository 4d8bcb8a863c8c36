"""The eager reference every diagnose fix is checked against: the user's ORIGINAL function run
eagerly, before any change, on each input tflab runs the fix on, its outputs copied to NumPy at
once (a returned tf.Variable that a later call moves cannot change the reference).

Where diagnose made the inputs itself (a `tf.TensorSpec` becomes seeded random values), a single
draw takes one path through a tensor ``if``: ``if tf.reduce_sum(x) > 100`` on standard normal
values never takes its main branch, so a fix that breaks that branch would look checked. When it
is cheap (small inputs, a function with an ``if``/``while``), the same draw negated and scaled by
1000 is tried too, and kept when it runs lines of the function the first draw did not (measured
with a line tracer on the eager run). What is still not covered is said: "the main branch of the
if at line 5 never ran on these inputs". The ULP bound a fix that changes a dtype on purpose is
held to is `dtype_bound`.
"""

from __future__ import annotations

import ast
import dataclasses
import sys
from typing import Any, Callable

# Extra draws are made only for inputs at most this many elements in all (the eager run and
# each candidate's run are repeated once per extra draw).
CHEAP_ELEMENTS = 1 << 16
# The draws tried beyond tflab's seeded one, as (factor, label).
_VARIANTS = ((-1.0, "negated"), (1000.0, "×1000"), (-1000.0, "×-1000"))

# Mantissa bits (without the implicit bit) of the float dtypes a fix may cast between.
_MANT = {"float16": 10, "bfloat16": 7, "float32": 23, "float64": 52}


@dataclasses.dataclass
class EagerReference:
    """The original function's eager outputs on each input a fix is run on.

    Attributes:
        status: "ran", "raised" or "not run".
        why: for "raised"/"not run", the phrase a fix line prints instead of a comparison.
        inputs: the ``(args, kwargs)`` of each input, materialized (tensors, Python values).
        labels: what each input is ("tflab's seeded input", "tflab's seeded input ×1000").
        outputs: eager's outputs per input, as NumPy copies taken right after each run.
        uncovered: phrases for the tensor ``if`` branches no input ran.
        covered: phrases for the ``if`` statements whose two branches both ran (said when an
            extra draw was needed for that).
    """

    status: str
    why: str = ""
    inputs: list = dataclasses.field(default_factory=list)
    labels: list = dataclasses.field(default_factory=list)
    outputs: list = dataclasses.field(default_factory=list)
    uncovered: list = dataclasses.field(default_factory=list)
    covered: list = dataclasses.field(default_factory=list)

    @property
    def inputs_text(self) -> str:
        """"inputs: tflab's seeded input, it ×1000", for a fix line ("" for the one draw)."""
        if len(self.labels) <= 1:
            return ""
        return "inputs: " + self.labels[0] + "".join(f", it {lb.split()[-1]}" for lb in self.labels[1:])


def snapshot(value: Any) -> Any:
    """``value`` with every tensor or tf.Variable replaced by a NumPy copy of its value now."""
    import numpy as np
    import tensorflow as tf

    def conv(v):
        if hasattr(v, "numpy"):
            return np.array(v.numpy(), copy=True)
        if isinstance(v, np.ndarray):
            return v.copy()
        return v

    return tf.nest.map_structure(conv, value)


def _lines_run(filename: str, call: Callable[[], Any]) -> tuple[Any, set]:
    """``call()``'s result and the lines of ``filename`` that ran during it (a line tracer)."""
    lines: set = set()

    def local(frame, event, arg):
        if event == "line":
            lines.add(frame.f_lineno)
        return local

    def tracer(frame, event, arg):
        return local if frame.f_code.co_filename == filename else None

    old = sys.gettrace()
    sys.settrace(tracer)
    try:
        out = call()
    finally:
        sys.settrace(old)
    return out, lines


def _variants(args: tuple, kwargs: dict, specs: Any) -> list[tuple[str, tuple, dict]]:
    """The extra draws: each float/int tensor made from a spec, times each factor of `_VARIANTS`."""
    import tensorflow as tf

    flat_specs = tf.nest.flatten((specs[0], specs[1]))
    flat_vals = tf.nest.flatten((args, kwargs))
    if len(flat_specs) != len(flat_vals):
        return []
    made = [isinstance(s, tf.TensorSpec) and (s.dtype.is_floating or (s.dtype.is_integer and not s.dtype.is_unsigned))
            for s in flat_specs]
    if not any(made):
        return []
    out = []
    for factor, label in _VARIANTS:
        vals = [tf.cast(tf.cast(v, tf.float64) * factor, v.dtype) if m else v for v, m in zip(flat_vals, made)]
        a, k = tf.nest.pack_sequence_as((args, kwargs), vals)
        out.append((label, a, k))
    return out


def _branch_lines(fdef: ast.AST, start: int) -> list[tuple[int, str, set]]:
    """(file line of the if, "main"/"else", that branch's file lines) for each ``if`` in ``fdef``
    (``start``: the file line of the source's first line)."""
    out = []
    for node in ast.walk(fdef):
        if not isinstance(node, ast.If):
            continue
        for name, body in (("main", node.body), ("else", node.orelse)):
            lines = {n.lineno + start - 1 for b in body for n in ast.walk(b) if isinstance(n, ast.stmt)}
            if lines:
                out.append((node.lineno + start - 1, name, lines))
    return out


def eager_reference(python_fn: Callable, lead: tuple, args: tuple, kwargs: dict,
                    materialize: Callable[[Any], Any], seeded: Callable) -> EagerReference:
    """The original function's eager outputs on tflab's input, and on the extra draws when cheap.

    Args:
        python_fn: the user's Python function (not a tf.function), run eagerly.
        lead: leading arguments (a bound method's ``self=None`` placeholder), passed first.
        args, kwargs: what diagnose traced with (TensorSpecs, tensors, Python values).
        materialize: turns the specs into tflab's seeded values (`context.materialize_specs`).
        seeded: a context manager seeding Python's and NumPy's random state (`context.seeded`):
            each eager run is made under it, as each candidate is, so a Keras layer the function
            builds draws the same weights in both.

    Returns:
        An `EagerReference`.
    """
    import inspect

    import numpy as np
    import tensorflow as tf

    from tflab._user.source_map import error_line

    base_args, base_kwargs = materialize(args), materialize(kwargs)
    inner = inspect.unwrap(getattr(python_fn, "__func__", python_fn))
    code = getattr(inner, "__code__", None)
    filename = code.co_filename if code is not None else ""

    def run(a, k):
        with seeded():
            return _lines_run(filename, lambda: snapshot(python_fn(*lead, *a, **k)))

    try:
        out, covered = run(base_args, base_kwargs)
    except Exception as e:  # noqa: BLE001 - the user's code may raise anything eagerly
        return EagerReference("raised", f"your function raises eagerly too ({error_line(e)}), so there is "
                                        "no eager output to compare with")
    ref = EagerReference("ran", inputs=[(base_args, base_kwargs)], outputs=[out],
                         labels=["tflab's seeded input" if _has_spec(args, kwargs) else "your input"])
    try:
        lines, start = inspect.getsourcelines(inner)
        import textwrap

        fdef = ast.parse(textwrap.dedent("".join(lines))).body[0]
    except (OSError, TypeError, SyntaxError, IndexError):
        return ref
    branches = _branch_lines(fdef, start)
    loops = any(isinstance(n, ast.While) for n in ast.walk(fdef))
    size = sum(int(np.prod(v.shape.as_list())) for v in tf.nest.flatten((base_args, base_kwargs))
               if isinstance(v, tf.Tensor))
    if (branches or loops) and size <= CHEAP_ELEMENTS:
        for label, a, k in _variants(base_args, base_kwargs, (args, kwargs)):
            try:
                o, more = run(a, k)
            except Exception:  # noqa: BLE001 - a draw the function refuses is not kept
                continue
            if more - covered:
                ref.inputs.append((a, k))
                ref.outputs.append(o)
                ref.labels.append(f"tflab's seeded input {label}")
                covered |= more
    ran_both: dict = {}
    for line, name, body in branches:
        if line in covered and not (body & covered):
            ref.uncovered.append(f"the {name} branch of the if at line {line} never ran on these inputs, "
                                 "so it was not checked")
        elif body & covered:
            ran_both[line] = ran_both.get(line, 0) + 1
    if len(ref.inputs) > 1:
        ref.covered = [f"both branches of the if at line {line} ran" for line, n in sorted(ran_both.items()) if n == 2]
    return ref


def _has_spec(args: tuple, kwargs: dict) -> bool:
    import tensorflow as tf

    return any(isinstance(v, tf.TensorSpec) for v in tf.nest.flatten((args, kwargs)))


def dtype_bound(ref_dtype: Any, fix_dtype: Any) -> tuple[float, str]:
    """The ULP bound (in ``ref_dtype``'s ULP) a fix that turns ``ref_dtype`` into ``fix_dtype``
    on purpose is held to, and why.

    A cast that can hold every value exactly (an integer or a float into a wider float, a bool
    into an integer) gets 0: the fix must give eager's values bit for bit. A float rounded to a
    narrower float moves a value by up to half an ULP of the narrower dtype, which is
    2^(m_ref - m_fix - 1) ULP of the reference's. A float into an integer gets 0: it keeps a value
    only when that value is whole, and a fix that turns 0.5 into 0 has changed the answer.

    Args:
        ref_dtype, fix_dtype: NumPy or TF dtypes (or their names).

    Returns:
        ``(bound, why)``; ``why`` is "" when the dtypes are the same.
    """
    r, f = _name(ref_dtype), _name(fix_dtype)
    if r == f:
        return 0.0, ""
    if r in _MANT and f in _MANT and _MANT[f] < _MANT[r]:
        b = float(2 ** (_MANT[r] - _MANT[f] - 1))
        return b, f"{r} → {f}: rounding moves a value by up to half a {f} ULP ({b:g} ULP of {r})"
    if f in _MANT and r not in _MANT:
        return 0.0, f"{r} → {f}: exact for |value| <= 2^{_MANT[f] + 1}"
    if f in _MANT:
        return 0.0, f"{r} → {f}: exact"
    return 0.0, f"{r} → {f}: every value eager gave must be kept"


def _name(dt: Any) -> str:
    name = getattr(dt, "name", None) or str(dt)
    return "bool" if name == "bool_" else name


# The order in which a dtype-unifying fix tries the dtypes: the one that can hold the other's
# values first (bool < integers by width < floats by mantissa).
_RANK = {"bool": 0, "uint8": 1, "int8": 1, "uint16": 2, "int16": 2, "uint32": 3, "int32": 3, "uint64": 4,
         "int64": 4, "bfloat16": 5, "float16": 6, "float32": 7, "float64": 8}


def widest_first(dtypes: list[str]) -> list[str]:
    """``dtypes`` (names) ordered so the one that keeps the others' values comes first.

    Example:
        >>> widest_first(["int32", "float32"])
        ['float32', 'int32']
    """
    return sorted(dict.fromkeys(dtypes), key=lambda d: -_RANK.get(d, -1))
