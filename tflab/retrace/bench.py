"""A recorded call rebuilt from its TraceTypes, and the bench that traces a fix candidate on every one.

`Recorded` is one call signature the probe or the log recorded (its
FunctionType as `Node` trees); `value_of` and `call_args` rebuild the call's
arguments (a ``tf.TensorSpec`` per tensor, the literal per Python value, the
live object per object); `history_signature` is the one input_signature that
covers the whole call history; `Bench` traces a fresh ``tf.function`` of the
user's Python function with a candidate change on every recorded call and
counts its traces (TF's ``experimental_get_tracing_count()``), memoized per
candidate. `tflab.retrace.check` plans the fixes on top of it and re-exports
these names.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import inspect
import re
import weakref
from typing import Any, Callable, Mapping, NamedTuple, Sequence

from tflab import fix as fx
from tflab.retrace.nodes import Node, fmt_shape


# Structure changes whose "as at the earlier trace" form changes the data the call passes (so a
# cache hit is not a fix that can be checked by counting traces): what it drops.
DATA_CHANGING = {"keys": "the keys", "length": "the items", "none": "the value"}


class NotRebuilt(Exception):
    """A recorded call cannot be rebuilt from its TraceTypes (a freed object, a NamedTuple…)."""


class Recorded(NamedTuple):
    """One recorded call signature: the trace it made and its FunctionType tree.

    Attributes:
        trace: the 1-based index of the trace the call made.
        call: the 1-based call number (0: not made by a call, e.g. get_concrete_function).
        nodes: ``{parameter: Node}`` of the FunctionType TF looked up.
        ok: the trace succeeded (a failed trace's call is checked only by its own fixes).
    """

    trace: int
    call: int
    nodes: Mapping[str, Node]
    ok: bool = True

    @property
    def name(self) -> str:
        return f"call {self.call}" if self.call else f"the call of trace #{self.trace}"


# ---------------------------------------------------------------------------
# Rebuilding a call from its TraceTypes
# ---------------------------------------------------------------------------


def live_object(node: Node) -> Any:
    ref = node.value[2] if isinstance(node.value, tuple) and len(node.value) == 3 else None
    return ref() if ref is not None else None


def value_of(node: Node) -> Any:
    """The argument to bind for one recorded TraceType: a TypeSpec, the literal, or the live object."""
    import tensorflow as tf

    if node.kind == "tensor":
        return tf.TensorSpec(node.shape, tf.as_dtype(node.dtype))
    if node.kind == "ragged":
        extra = dict(node.children)
        rr = extra.get("ragged_rank")
        rsd = extra.get("row_splits_dtype")
        return tf.RaggedTensorSpec(node.shape, tf.as_dtype(node.dtype), rr.value if rr else -1,
                                   tf.as_dtype(rsd.value) if rsd else tf.int64)
    if node.kind == "sparse":
        return tf.SparseTensorSpec(node.shape, tf.as_dtype(node.dtype))
    if node.kind == "literal":
        return node.value
    if node.kind == "object":
        obj = live_object(node)
        if obj is None:
            raise NotRebuilt(f"the {node.label} passed then has been garbage-collected")
        return obj
    if node.kind == "seq":
        vals = [value_of(c) for _, c in node.children]
        return vals if node.name == "List" else tuple(vals)
    if node.kind == "map" and node.name == "Dict":
        try:
            return {ast.literal_eval(k): value_of(c) for k, c in node.children}
        except (ValueError, SyntaxError):
            raise NotRebuilt("a dict key that is not a Python literal") from None
    raise NotRebuilt(f"tflab cannot rebuild a {node.name or node.kind} argument from its TraceType")


def call_args(body: Callable, nodes: Mapping[str, Node], given: Mapping[str, Any] | None = None
               ) -> tuple[list, dict]:
    try:
        params = inspect.signature(body).parameters
    except (TypeError, ValueError):
        params = {}
    var_kw = any(p.kind == p.VAR_KEYWORD for p in params.values())
    args, kwargs = [], {}
    given = given or {}
    for name, node in nodes.items():
        v = given[name] if name in given else value_of(node)
        if name not in given and node.kind == "object" and keras_optimizer(v):
            v = fresh_optimizer(v)  # tracing apply_gradients builds an optimizer: never the user's
        p = params.get(name)
        if p is not None and p.kind == p.KEYWORD_ONLY or (p is None and var_kw and not re.search(r"_\d+$", name)):
            kwargs[name] = v
        else:
            args.append(v)
    return args, kwargs


# ---------------------------------------------------------------------------
# Spec text and the signature from the whole history
# ---------------------------------------------------------------------------


def spec_text(spec: Any) -> str:
    """``tf.TensorSpec([None, 3], tf.float32)`` / ``tf.TensorSpec(None, tf.int32)`` (unknown rank) for a spec nest."""
    import tensorflow as tf

    if isinstance(spec, dict):
        return "{" + ", ".join(f"{k!r}: {spec_text(v)}" for k, v in spec.items()) + "}"
    if isinstance(spec, (list, tuple)):
        inner = ", ".join(spec_text(v) for v in spec)
        return f"[{inner}]" if isinstance(spec, list) else f"({inner}{',' if len(spec) == 1 else ''})"
    if isinstance(spec, (tf.TensorSpec, tf.RaggedTensorSpec, tf.SparseTensorSpec)):
        rank = spec.shape.rank
        shape = "None" if rank is None else "[" + ", ".join("None" if d is None else str(d)
                                                              for d in spec.shape.as_list()) + "]"
        cls = type(spec).__name__
        if isinstance(spec, tf.RaggedTensorSpec):
            return f"tf.{cls}({shape}, tf.{spec.dtype.name}, {spec.ragged_rank}, tf.{spec.row_splits_dtype.name})"
        return f"tf.{cls}({shape}, tf.{spec.dtype.name})"
    return repr(spec)


LITERAL_DTYPES = {bool: ("bool",), int: ("int32", "float32"), float: ("float32",), str: ("string",)}


class SignatureError(Exception):
    """The recorded calls cannot share one input_signature (the reason says why)."""


def _fold(a: Node, b: Node, path: str) -> Node:
    if a.kind != b.kind or (a.kind in ("seq", "map") and a.name != b.name):
        raise SignatureError(f"{path} is {a.label} in one call and {b.label} in another: an input_signature "
                             "fixes the kind of every input")
    if a.kind in ("tensor", "ragged", "sparse"):
        if a.dtype != b.dtype:
            raise SignatureError(f"{path}: dtype {a.dtype} and {b.dtype}: cast it to one dtype first")
        if a.shape is None or b.shape is None or len(a.shape) != len(b.shape):
            return a._replace(shape=None, label=f"{a.dtype}{fmt_shape(None)}")
        dims = tuple(x if x == y else None for x, y in zip(a.shape, b.shape))
        return a._replace(shape=dims, label=f"{a.dtype}{fmt_shape(dims)}")
    if a.kind == "literal":
        ta, tb = type(a.value), type(b.value)
        if a.value is None or b.value is None or (ta is not tb and {ta, tb} != {int, float}):
            raise SignatureError(f"{path}: Python {a.label} and {b.label}: an input_signature holds tensors")
        return a if ta is tb and a.value == b.value else a._replace(value=float(a.value) if float in (ta, tb) else a.value,
                                                                     label="varies")
    if a.kind in ("seq", "map"):
        ka, kb = [k for k, _ in a.children], [k for k, _ in b.children]
        if ka != kb:
            raise SignatureError(f"{path}: its {'length' if a.kind == 'seq' else 'keys'} changes "
                                 f"({len(ka)} -> {len(kb)} items): an input_signature fixes the structure")
        return a._replace(children=tuple((k, _fold(ca, cb, f"{path}[{k}]"))
                                         for (k, ca), (_, cb) in zip(a.children, b.children)))
    if a.kind == "object":
        raise SignatureError(f"{path} is a Python object ({b.label}): an input_signature holds tensors only")
    raise SignatureError(f"{path}: tflab cannot write a spec for {a.label}")


def _spec_of(node: Node, path: str, int_as: str) -> Any:
    import tensorflow as tf

    if node.kind == "tensor":
        return tf.TensorSpec(node.shape, tf.as_dtype(node.dtype))
    if node.kind in ("ragged", "sparse"):
        return value_of(node)
    if node.kind == "literal":
        t = type(node.value)
        if t not in LITERAL_DTYPES:
            raise SignatureError(f"{path}: a Python {t.__name__} cannot be given a TensorSpec")
        dt = int_as if t is int else LITERAL_DTYPES[t][0]
        return tf.TensorSpec([], tf.as_dtype(dt))
    if node.kind == "seq":
        vals = [_spec_of(c, f"{path}[{k}]", int_as) for k, c in node.children]
        return vals if node.name == "List" else tuple(vals)
    if node.kind == "map" and node.name == "Dict":
        return {ast.literal_eval(k): _spec_of(c, f"{path}[{k}]", int_as) for k, c in node.children}
    raise SignatureError(f"{path}: tflab cannot write a spec for {node.label}")


def history_signature(calls: Sequence[Mapping[str, Node]], int_as: str = "int32") -> list:
    """The input_signature that admits every call: None at a dim that varies, unknown rank when the rank does.

    Raises:
        SignatureError: the calls cannot share one (a dtype that varies, a
            changing structure, a Python object); the message names the parameter.
    """
    if not calls:
        raise SignatureError("no recorded call")
    names = list(calls[0])
    folded = dict(calls[0])
    for c in calls[1:]:
        if list(c) != names:
            raise SignatureError("the calls pass different parameters")
        folded = {n: _fold(folded[n], c[n], n) for n in names}
    return [_spec_of(folded[n], n, int_as) for n in names]


def has_int_literal(calls: Sequence[Mapping[str, Node]]) -> bool:
    def walk(n: Node) -> bool:
        return (n.kind == "literal" and type(n.value) is int) or any(walk(c) for _, c in n.children)

    return any(walk(n) for c in calls for n in c.values())


# ---------------------------------------------------------------------------
# The bench: fresh tf.functions of the user's body on the recorded calls
# ---------------------------------------------------------------------------


class Outcome(NamedTuple):
    traces: int
    error: str | None = None        # a trace raised (first line)
    rejected: str | None = None     # TF refused to bind a call: which, and TF's reason


def first_line(text: str) -> str:
    lines = [s.strip() for s in str(text).splitlines() if s.strip()]
    # AutoGraph's "in user code:" wrapper: the error is the last line
    line = lines[-1] if lines and lines[0].startswith("in user code") else (lines[0] if lines else "")
    return line if len(line) <= 180 else line[:177] + "..."


def error_text(e: BaseException) -> str:
    line = first_line(str(e))
    return line if re.match(r"^\w+(Error|Exception)\b", line) else f"{type(e).__name__}: {line}"


def _bind_reason(message: str) -> str:
    m = re.search(r"failed due to `(.*?)`", message, re.S)
    return m.group(1) if m else first_line(message)


@dataclasses.dataclass
class Bench:
    """The user's Python function and its recorded calls, where fix candidates are run.

    Attributes:
        body: the Python function the tf.function wraps (a bound method included).
        calls: the recorded call signatures, in trace order.
        n_calls: how many calls the user made (each one traced a recorded
            signature or hit the trace of one).
        traces: how many traces the user's calls made (the count to beat).
        options: the tf.function's options (``reduce_retracing``, ``input_signature``,
            ``jit_compile``: XLA rounds otherwise than the graph, and does not run in the
            forked child a candidate is checked in (it aborts there), so the values of a fix
            for an XLA-compiled function are not compared, and the fix says so).
        memo: candidate key -> `Outcome`, so a report read twice traces nothing new.
        values: the calls' argument values, the state they ran with and eager's
            outputs on them (`tflab.retrace.values.CaseValues`); None when no
            values were kept (a log): fixes then say "traces only, values not kept".
        rebinds: the body's lines that rebind a tf.Variable's name
            (`tflab.retrace.statefix.Rebind`), whose fix the search may combine.
    """

    body: Callable | None
    calls: list[Recorded]
    n_calls: int
    traces: int
    options: dict = dataclasses.field(default_factory=dict)
    memo: dict = dataclasses.field(default_factory=dict)
    values: Any = None
    rebinds: tuple = ()

    def __post_init__(self) -> None:
        if self.values is not None and self.options.get("jit_compile"):
            self.values.unkept = ("your tf.function compiles with XLA (jit_compile=True): XLA does not run in "
                                  "the forked process a fix is checked in, and a candidate run without it "
                                  "rounds otherwise than yours would")

    def state(self) -> Any:
        """The state the first call ran with, for the block (a body that rebinds a global traces as it did)."""
        import contextlib

        return self.values.world.as_at_first_call() if self.values is not None else contextlib.nullcontext()

    def values_check(self, key: str, calls: Sequence[Recorded], *, convert: Mapping | None = None,
                     overrides: Mapping | None = None, **run_kwargs: Any) -> fx.ValuesCheck:
        """The candidate run on every recorded call's VALUES, compared with eager's outputs (memoized by ``key``).

        The fresh tf.function is traced on the recorded signatures first (as `run`
        does: an input_signature, relaxed dims), then called with the values.
        """
        if self.values is None or not self.values.kept:
            return fx.values_match(None, [])
        memo_key = ("values", key, tuple(c.trace for c in calls), id(run_kwargs.get("body") or self.body))
        if memo_key not in self.memo:
            ref = self.values.reference()  # before any candidate runs
            f = self.memo.get(("fn", key, tuple(c.trace for c in calls), id(run_kwargs.get("body") or self.body)))
            f = f if f is not None else self._traced(calls, **run_kwargs)
            outs = self.values.run(f, convert, overrides=overrides)
            self.memo[memo_key] = self.values.compare(outs) if ref is not None else fx.values_match(None, [])
        return self.memo[memo_key]

    def _traced(self, calls: Sequence[Recorded], *, input_signature: Any = None, reduce_retracing: bool = False,
                transform: Callable[[Recorded], Mapping[str, Node]] | None = None, body: Callable | None = None) -> Any:
        import tensorflow as tf

        body = body or self.body
        kwargs: dict = {}
        if input_signature is not None:
            kwargs["input_signature"] = input_signature
        if reduce_retracing:
            kwargs["reduce_retracing"] = True
        f = tf.function(body, **kwargs)
        with self.state():
            for c in calls:
                args, kw = call_args(body, transform(c) if transform is not None else c.nodes)
                try:
                    f.get_concrete_function(*args, **kw)
                except (KeyboardInterrupt, SystemExit):
                    raise
                except Exception:  # noqa: BLE001 - the values run says what this call does
                    break
        return f

    @property
    def ok_calls(self) -> list[Recorded]:
        return [c for c in self.calls if c.ok]

    def your_calls(self) -> str:
        if not self.n_calls:  # calls not counted (a log): the signatures that traced
            n = len(self.calls)
            return f"the {n} call signature{'s' * (n != 1)} that traced"
        return f"your {self.n_calls} call{'s' * (self.n_calls != 1)}"

    def rebuildable(self, body: Callable | None = None) -> Callable:
        """The body a candidate re-traces (``body`` or the recorded one), without running it.

        Raises:
            NotRebuilt: the function or the instance of its method is gone.
        """
        body = body or self.body
        if body is None:
            raise NotRebuilt("the Python function is no longer alive")
        from tflab._tf.function import method_target_freed

        if method_target_freed(body):
            raise NotRebuilt("the instance whose method this is has been freed")
        return body

    def run(self, key: str, calls: Sequence[Recorded], *, input_signature: Any = None,
            reduce_retracing: bool = False, transform: Callable[[Recorded], Mapping[str, Node]] | None = None,
            body: Callable | None = None) -> Outcome:
        """Trace a fresh tf.function of the body on ``calls`` (each transformed); memoized by ``key``."""
        import tensorflow as tf

        body = self.rebuildable(body)
        memo_key = (key, tuple(c.trace for c in calls), id(body))
        if memo_key in self.memo:
            return self.memo[memo_key]
        kwargs: dict = {}
        if input_signature is not None:
            kwargs["input_signature"] = input_signature
        if reduce_retracing:
            kwargs["reduce_retracing"] = True
        f = tf.function(body, **kwargs)
        out = None
        with self.state():
            out = self._trace_all(f, body, calls, transform)
        if out is None:
            out = Outcome(int(f.experimental_get_tracing_count()))
            self.memo[("fn",) + memo_key] = f  # the values check calls this same tf.function: no trace more
        self.memo[memo_key] = out
        return out

    def _trace_all(self, f: Any, body: Callable, calls: Sequence[Recorded],
                   transform: Callable[[Recorded], Mapping[str, Node]] | None) -> Outcome | None:
        out = None
        for c in calls:
            nodes = transform(c) if transform is not None else c.nodes
            args, kw = call_args(body, nodes)
            try:
                f.get_concrete_function(*args, **kw)
            except TypeError as e:
                if "Binding inputs" in str(e) or "Can not cast" in str(e):
                    out = Outcome(int(f.experimental_get_tracing_count()),
                                  rejected=f"rejects {c.name}{f' (trace #{c.trace})' if c.call else ''}: "
                                           f"{_bind_reason(str(e))}")
                else:
                    out = Outcome(int(f.experimental_get_tracing_count()),
                                  error=f"the trace for {c.name} raised {error_text(e)}")
                break
            except (KeyboardInterrupt, SystemExit):
                raise
            except Exception as e:  # noqa: BLE001 - the user's body under the fix may raise anything
                out = Outcome(int(f.experimental_get_tracing_count()),
                              error=f"the trace for {c.name} raised {error_text(e)}")
                break
        return out


# Bodies whose re-trace did not finish within the time limit: later candidates for them are not
# checked, so one blocking body costs one time limit, not one per candidate and retrace.
_STUCK: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def measured_fix(kind: str, change: str, description: str, bench: Bench, key: str,
                 calls: Sequence[Recorded], *, goal: Callable[[Outcome], bool], how: str,
                 summary: Callable[[Outcome], str], convert: Mapping | None = None, values: bool = True,
                 overrides: Mapping | None = None, **run_kwargs: Any) -> fx.Fix:
    """One candidate applied on the bench: checked when ``goal(outcome)`` AND its outputs equal eager's.

    The trace count is measured on the recorded signatures; then, where values
    were kept, the candidate runs on every recorded call's values (each
    argument converted by ``convert``: ``{path: ("tensor"|"cast", dtype)}``)
    and its outputs are compared with the original function's eager outputs
    (`tflab.fix.values_match`). Without values the result says
    `tflab.fix.VALUES_NOT_KEPT`; ``values=False`` for a change whose calls pass
    other data than the user's (one object for many).
    Not checked when it cannot run.
    """
    try:
        bench.rebuildable(run_kwargs.get("body"))  # the body is re-run only in the check's child
    except NotRebuilt as e:
        return fx.unchecked(kind, change, description, str(e))

    memo_key = ("fix", kind, change, key, tuple(c.trace for c in calls), id(run_kwargs.get("body")))
    if memo_key in bench.memo:  # the check runs in a child: its Outcome is not kept, the Fix is
        return bench.memo[memo_key]
    body = run_kwargs.get("body") or bench.body
    stuck = _STUCK.get(body)
    if stuck is not None:
        return fx.unchecked(kind, change, description, f"an earlier candidate for this function {stuck}")

    def check():
        o = bench.run(key, calls, **run_kwargs)
        if o.rejected:
            return False, o.rejected, {"traces": o.traces}
        if o.error:
            return False, o.error, {"traces": o.traces}
        measured = {"traces": o.traces, "calls": bench.n_calls, "signatures": len(calls), "was": bench.traces}
        if not goal(o):
            return False, summary(o), measured
        vc = (bench.values_check(key, calls, convert=convert, overrides=overrides, **run_kwargs) if values
              else fx.values_match(None, []))
        measured.update(vc.measured)
        return vc.ok, f"{summary(o)}; {vc.text}" if vc.ok else f"{summary(o)}, but {vc.text}", measured

    if values and bench.values is not None:
        bench.values.prefetch()  # eager's outputs made once, inherited by every candidate's child
    fix = fx.attempt(kind, change, description, check, how=how)
    bench.memo[memo_key] = fix
    if fix.status == fx.NOT_CHECKED and "timeout_s" in fix.measured:
        with contextlib.suppress(TypeError):  # a body that cannot be weakly referenced is tried every time
            _STUCK[body] = f"did not finish in {fix.measured['timeout_s']:g} s"
    return fix


def traces_text(o: Outcome, bench: Bench, extra: str = "") -> str:
    was = f", instead of {bench.traces}" if o.traces != bench.traces else ""
    return f"{o.traces} trace{'s' * (o.traces != 1)} for {bench.your_calls()}{was}{extra}"


# ---------------------------------------------------------------------------
# Where an object is built, and what a Keras optimizer needs
# ---------------------------------------------------------------------------


def enclosing_scope(qualname: str) -> tuple[str, str] | None:
    """(enclosing function, where to build it once) from a ``A.run.<locals>.step`` qualname, or None.

    Example:
        >>> enclosing_scope("Predictor.run_predictions.<locals>.predict_step")
        ('Predictor.run_predictions', 'in `Predictor.__init__`')
        >>> enclosing_scope("run.<locals>.step")
        ('run', 'at module level')
    """
    if "<locals>." not in qualname:
        return None
    outer = qualname.rsplit(".<locals>.", 1)[0]
    parts = outer.split(".<locals>.")[-1].split(".")
    if len(parts) >= 2:
        return outer, f"in `{'.'.join(parts[:-1])}.__init__`"
    return outer, "at module level"


def keras_optimizer(obj: Any) -> bool:
    """A Keras optimizer (Keras 3 ``keras.optimizers.Optimizer`` or tf-keras's)."""
    return any(c.__name__ in ("Optimizer", "BaseOptimizer", "OptimizerV2") and
               (c.__module__ or "").startswith(("keras", "tf_keras")) for c in type(obj).__mro__)


def keras_model(obj: Any) -> bool:
    return hasattr(obj, "trainable_variables") and any(
        (c.__module__ or "").startswith(("keras", "tf_keras")) for c in type(obj).__mro__)


def fresh_optimizer(opt: Any) -> Any:
    """A new optimizer of the same class and config (the user's is not touched)."""
    return type(opt).from_config(opt.get_config())
