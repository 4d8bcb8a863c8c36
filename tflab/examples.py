"""The user's example batches: normalized ONCE into one typed value, `Examples`, and passed on as is.

Every lab function that runs a SignatureDef on the user's data takes the same
forms (``examples`` of `tflab.save_and_reload`, `tflab.tflite_roundtrip`, the
converter's representative dataset, ``tflab export --examples``):

* ``{input name: array}``: one batch, e.g. ``{"x": np.zeros((4, 64), np.float32)}``;
* a list of such dicts: several batches;
* ``{signature key: {input name: array} or [dicts]}``: per signature, for
  models whose signatures take different inputs;
* the path of an ``.npz`` (``str`` or ``os.PathLike``), as ``--examples`` takes it: one batch of
  input names, or ``"<i>/<name>"`` keys for several (the ``examples.npz`` that `export_model`
  writes, given back as it is);
* an `Examples` value (returned as is: nothing is read twice).

`Examples.of` turns any of them into one frozen value (numpy arrays, named
batches), and `Examples.check` checks it ONCE against the SignatureDefs
(names, dtypes, shapes; one clear `UsageError` for the first mismatch) and
keeps, per signature, the feeds that signature takes. The natural first
guesses (``[x]``, a bare ndarray) are refused with the form to use.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

import numpy as np

from tflab.report.base import Report, config_field
from tflab.errors import UsageError
from tflab._user.arrays import as_example_array, check_finite

FORMS = ("examples must be a dict {input name: array} (one batch), a non-empty list of such dicts, "
         "{signature key: {input name: array}}, or the path of an .npz (export's examples.npz)")


@dataclasses.dataclass(frozen=True, repr=False, eq=False)
class Examples(Report):
    """Example batches for a model's SignatureDefs, normalized once.

    Iterating gives the batches (``{name: ndarray}`` dicts); ``len()`` is
    their number, so code that took a list of dicts takes an `Examples`.

    Attributes:
        batches: the batches, each ``{input name: np.ndarray}``; with the
            per-signature form, merged by batch index (a signature with fewer
            batches repeats its own; each signature is fed only its names).
        signatures: after `check`: signature key → the feeds it takes, one
            ``{name: ndarray}`` per batch; empty before.
        config: `tflab.runtime_config()`'s dict when the value was made.
        names: (property) every input name, sorted.
        description: (property) the first batch's names, dtypes and shapes.

    Example:

    >>> ex = Examples.of({"x": np.ones((4, 64), np.float32)})
    >>> ex
    <Examples: 1 batch: x float32[4,64]>
    >>> Examples.of(ex) is ex
    True
    """

    batches: tuple[dict[str, np.ndarray], ...]
    signatures: Mapping[str, tuple[dict[str, np.ndarray], ...]] = dataclasses.field(default_factory=dict)
    config: dict = config_field()

    def __post_init__(self) -> None:
        """Refuses batches that are not a tuple of ``{input name: np.ndarray}`` dicts.

        Raises:
            UsageError: what was given, and `Examples.of` for the other accepted forms.
        """
        good = isinstance(self.batches, tuple) and all(
            isinstance(b, dict) and all(isinstance(k, str) and isinstance(v, np.ndarray) for k, v in b.items())
            for b in self.batches)
        if not good:
            shown = repr(self.batches) if len(repr(self.batches)) <= 60 else repr(self.batches)[:57] + "..."
            raise UsageError(f"Examples(batches=...) takes a tuple of {{input name: np.ndarray}} dicts, got "
                             f"{type(self.batches).__name__} {shown}; Examples.of(value) takes the other forms "
                             f"(a dict of arrays, a list of such dicts, per-signature dicts)")

    @classmethod
    def of(cls, examples: Any) -> "Examples":
        """The `Examples` for any accepted form; an `Examples` is returned as is.

        Raises:
            UsageError: not one of the forms (the message shows them), two
                signatures giving different arrays for one input name, or a path
                that is no readable ``.npz`` (`tflab._io.path_checks.read_npz`).
        """
        if isinstance(examples, Examples):
            return examples
        if isinstance(examples, (str, os.PathLike)):  # an .npz, read as every verb's --examples reads it
            from tflab._io.path_checks import read_npz

            return cls(tuple(_normalize(read_npz(examples, "examples"))))
        return cls(tuple(_normalize(examples)))

    def __iter__(self) -> Iterator[dict[str, np.ndarray]]:
        return iter(self.batches)

    def __len__(self) -> int:
        return len(self.batches)

    def __getitem__(self, i: int) -> dict[str, np.ndarray]:
        return self.batches[i]

    @property
    def names(self) -> tuple[str, ...]:
        """Every input name in the batches, sorted."""
        return tuple(sorted(set().union(*(set(b) for b in self.batches)))) if self.batches else ()

    def check(self, inputs: Mapping[str, Mapping[str, Any]]) -> "Examples":
        """Checks the batches against SignatureDefs once; returns the value with per-signature feeds.

        Args:
            inputs: signature key → its inputs, name → a `tflab.saved_model.TensorInfo`
                (``.dtype`` name, ``.shape`` with None dims).

        Returns:
            ``self`` when it was already checked against these signatures,
            else a copy whose ``signatures[key]`` holds each batch's feed.

        Raises:
            UsageError: a name no signature takes, a missing input, a wrong
                dtype or an incompatible shape (the first, in one line).
        """
        if self.signatures and set(self.signatures) == set(inputs) and all(
                set(self.signatures[k][0]) == set(v) for k, v in inputs.items() if self.signatures[k]):
            return self
        known = set().union(*(set(v) for v in inputs.values())) if inputs else set()
        batches = list(self.batches)
        for key, sig in inputs.items():
            check_examples(batches, sig, f"signature {key!r}", known)
        check_unused(batches, inputs)
        feeds = {key: tuple(feed_for(b, sig) for b in batches) for key, sig in inputs.items()}
        return dataclasses.replace(self, signatures=feeds)

    def feeds(self, key: str) -> tuple[dict[str, np.ndarray], ...]:
        """The feeds of signature ``key`` (after `check`).

        Raises:
            UsageError: ``key`` was not checked.
        """
        if key not in self.signatures:
            raise UsageError(f"examples were not checked against signature {key!r}; "
                             f"checked: {sorted(self.signatures) or 'none'}")
        return self.signatures[key]

    def check_rows(self) -> "Examples":
        """Refuses batches with zero rows (nothing would be compared or calibrated); returns self."""
        check_rows(self.batches)
        return self

    @property
    def description(self) -> str:
        """``x float32[4,64]; mask bool[4,16]`` for the first batch, then ``(+N batches)``."""
        if not self.batches:
            return "no batches"
        first = "; ".join(f"{n} {_array_text(a)}" for n, a in self.batches[0].items())
        more = f" (+{len(self.batches) - 1} batch(es))" if len(self.batches) > 1 else ""
        return first + more

    def summary_line(self) -> str:
        """``1 batch: x float32[4,64]`` (+ the signatures it was checked for)."""
        n = len(self.batches)
        checked = f", checked for {', '.join(self.signatures)}" if self.signatures else ""
        return f"{n} batch{'es' * (n != 1)}: {self.description}{checked}"

    def to_text(self) -> str:
        """One line per batch: its index, then each input's name, dtype and shape."""
        from tflab.report.text import table

        rows = [(i, "; ".join(f"{n} {_array_text(a)}" for n, a in b.items())) for i, b in enumerate(self.batches)]
        head = f"examples: {len(self.batches)} batch(es)" + (
            f", checked for {', '.join(self.signatures)}" if self.signatures else "")
        return head + ("\n" + table(rows, header=("batch", "inputs"), indent="  ") if rows else "")

    def to_dict(self) -> dict:
        """JSON-ready summary (no arrays): batch count, names, per-batch dtype and shape, signatures, config."""
        return {"batch_count": len(self.batches), "names": list(self.names),
                "batches": [{n: _array_text(a) for n, a in b.items()} for b in self.batches],
                "signatures": sorted(self.signatures), "config": dict(self.config)}


def _array_text(a: np.ndarray) -> str:
    return f"{a.dtype.name}[{','.join(str(d) for d in a.shape)}]"


def normalize_examples(examples: Any) -> list[dict[str, np.ndarray]]:
    """The batches of `Examples.of(examples)` as a list (kept for callers that want a list)."""
    return list(Examples.of(examples).batches)


def _normalize(examples: Any) -> list[dict[str, np.ndarray]]:
    """The one place the accepted forms are read (see the module docstring)."""
    if isinstance(examples, np.ndarray) or hasattr(examples, "numpy") and not isinstance(examples, Mapping):
        raise UsageError(f"examples is a bare {type(examples).__name__}: name it by its signature input, "
                         f"e.g. {{'x': array}} (one batch); " + FORMS)
    if (isinstance(examples, Sequence) and not isinstance(examples, (str, bytes)) and examples
            and not any(isinstance(b, Mapping) for b in examples)):
        raise UsageError(f"examples is a list of {type(examples[0]).__name__}, not of dicts: name each "
                         f"array by its signature input, e.g. [{{'x': array}}]; " + FORMS)
    return _normalize_batches(examples)


def _is_batch_list(v: Any) -> bool:
    return (isinstance(v, Sequence) and not isinstance(v, (str, bytes)) and bool(v)
            and all(isinstance(b, Mapping) for b in v))


def is_per_signature(examples: Any) -> bool:
    """True for ``{signature key: {name: array}}`` (or ``{key: [batches]}``), the per-signature form."""
    return (isinstance(examples, Mapping) and bool(examples)
            and all(isinstance(v, Mapping) or _is_batch_list(v) for v in examples.values()))


def _normalize_batches(examples: Any) -> list[dict[str, np.ndarray]]:
    """Turns the accepted example forms into a list of numpy dicts (one per batch).

    Forms: ``{name: array}`` (one batch), a list of such dicts, or per
    signature ``{signature key: {name: array} or [dicts]}`` for models whose
    signatures take different inputs. The per-signature form is merged by
    batch index into batches holding the union of names (a signature with
    fewer batches repeats its own); each signature is later fed only the
    names it takes. Two signatures giving different arrays for the same
    input name cannot be merged.

    Raises:
        UsageError: not one of these forms, or conflicting arrays for a shared name.
    """
    if is_per_signature(examples):
        per = {k: _normalize_batches(v) for k, v in examples.items()}
        n = max(len(v) for v in per.values())
        merged: list[dict[str, np.ndarray]] = []
        for i in range(n):
            batch: dict[str, np.ndarray] = {}
            for key, batches in per.items():
                for name, a in batches[i % len(batches)].items():
                    if name in batch and (batch[name].shape != a.shape or batch[name].dtype != a.dtype
                                          or batch[name].tobytes() != a.tobytes()):
                        raise UsageError(f"examples for signature {key!r} give input {name!r} another array "
                                         f"than an earlier signature in batch {i}: signatures sharing an input "
                                         f"name must share its examples")
                    batch[name] = a
            merged.append(batch)
        return merged
    if isinstance(examples, Mapping):
        batches = [examples]
    elif isinstance(examples, Sequence) and not isinstance(examples, (str, bytes)) and examples:
        batches = list(examples)
    else:
        raise UsageError(FORMS)
    out = []
    for i, b in enumerate(batches):
        if not isinstance(b, Mapping):
            raise UsageError(f"examples[{i}] is a {type(b).__name__}, expected a dict {{input name: array}}")
        # A ragged list, Python objects or a dtype TF has no tensor for: one line (`as_example_array`).
        out.append({str(k): as_example_array(str(k), v, f"examples[{i}]") for k, v in b.items()})
    return out


def feed_for(batch: Mapping[str, np.ndarray], inputs: Any) -> dict[str, np.ndarray]:
    """The part of ``batch`` a signature takes (``inputs``: its input names)."""
    return {n: batch[n] for n in inputs if n in batch}


def check_unused(batches: list[dict[str, np.ndarray]], takes: Mapping[str, Any]) -> None:
    """Names that no signature takes are a mistake (a typo would otherwise be ignored).

    Args:
        takes: signature key → its input names.

    Raises:
        UsageError: a name no signature takes.
    """
    known = set().union(*(set(v) for v in takes.values())) if takes else set()
    for i, batch in enumerate(batches):
        extra = sorted(set(batch) - known)
        if extra:
            where = "examples" if len(batches) == 1 else f"examples[{i}]"
            sigs = "; ".join(f"{k} takes {sorted(v)}" for k, v in takes.items())
            hint = next(filter(None, (renamed_keys_hint(sorted(set(v) - set(batch)), extra, v, batch)
                                      for v in takes.values())), "")  # case D9
            raise UsageError(f"{where}: no signature takes {extra} ({sigs}){hint}")


def renamed_keys_hint(missing: list[str], unknown: list[str], inputs: Any, batch: Any) -> str:
    """Why a SignatureDef does not take a dict input's own keys (case D9), or "".

    A SignatureDef's inputs are the flattened leaves of the function's
    arguments: a dict argument is flattened in sorted key order
    (`tf.nest.flatten`) and each leaf is named after the parameter, ``inputs``,
    ``inputs_1``, … unless its `tf.TensorSpec` has a ``name``. When the missing
    names are exactly such a run (``P``, ``P_1``, …, ``P_{k-1}``) and the user
    gave ``k`` unknown keys whose sorted order matches them dtype by dtype, the
    keys were renamed: the hint gives the mapping and the fix.

    Args:
        missing: the signature's input names the examples lack.
        unknown: the example keys the signature does not take.
        inputs: name -> TensorInfo (with ``.dtype`` as a string) of the signature;
            a plain collection of names skips the dtype check.
        batch: the example batch, key -> array.

    Returns:
        ``"; TF flattened … 'bar' -> 'inputs', …"`` or "".
    """
    if not missing or len(missing) != len(unknown):
        return ""
    if len(missing) == 1:  # one leaf: nothing shows a flattened dict input, so none is claimed
        return f"; the examples have {unknown}, the model's inputs are {missing}: name each array after its input"
    stem = min(missing, key=len)
    flat = [stem] + [f"{stem}_{i}" for i in range(1, len(missing))]
    if sorted(flat) != sorted(missing):
        return ""
    pairs = list(zip(sorted(unknown), flat))
    for key, name in pairs:
        arr = np.asarray(batch[key])
        want = getattr(inputs.get(name) if isinstance(inputs, dict) else None, "dtype", None)
        got = "string" if arr.dtype.kind in "OSU" else arr.dtype.name
        if want is not None and str(want) != got:
            return ""
    mapping = ", ".join(f"{k!r} -> {n!r}" for k, n in pairs)
    first = pairs[0][0]
    return (f"; TF flattened the dict input {stem!r} in sorted key order and named its leaves "
            f"{stem}, {stem}_1, …: {mapping}. Feed those names, or keep your keys as input "
            f"names with tf.TensorSpec(..., name={first!r}) for each entry of the input_signature")


def check_examples(batches: list[dict[str, np.ndarray]], inputs: Mapping[str, Any],
                   where: str, known: Any = None) -> None:
    """Checks that each batch feeds the signature's inputs with matching dtype/shape.

    Names the signature does not take are ignored here (another signature may
    take them; `check_unused` rejects names no signature takes).

    Args:
        known: names any signature takes; those outside it are listed as
            unknown when a name is missing (default: this signature's).

    Raises:
        UsageError: a missing name, a wrong dtype, or an incompatible shape.
    """
    import tensorflow as tf

    want = ", ".join(str(t) for t in inputs.values())
    for i, batch in enumerate(batches):
        label = "examples" if len(batches) == 1 else f"examples[{i}]"
        missing = sorted(set(inputs) - set(batch))
        if missing:
            extra = sorted(set(batch) - set(inputs if known is None else known))
            raise UsageError(f"{label} does not match {where}: missing {missing} "
                             + (f"unknown {extra} " if extra else "") + f"(the signature takes {want})"
                             + renamed_keys_hint(missing, extra, inputs, batch))  # case D9
        for name, info in inputs.items():
            arr = batch[name]
            dt = tf.dtypes.as_dtype(arr.dtype) if arr.dtype.kind not in "OSU" else tf.string
            if dt.name != info.dtype:
                raise UsageError(f"{label}[{name!r}] is {dt.name} but {where} wants {info.dtype}: "
                                 f"cast it (e.g. x.astype(np.{info.dtype}))" if info.dtype != "string" else
                                 f"{label}[{name!r}] is {dt.name} but {where} wants string (bytes)")
            if info.shape is not None and not tf.TensorShape(info.shape).is_compatible_with(arr.shape):
                raise UsageError(f"{label}[{name!r}] has shape {list(arr.shape)} but {where} wants "
                                 f"{info}: reshape it")


def union_inputs(per_signature: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
    """All signatures' inputs by name, for random examples every signature can take.

    Raises:
        UsageError: two signatures take the same name with different dtype or shape.
    """
    out: dict[str, Any] = {}
    owner: dict[str, str] = {}
    for key, inputs in per_signature.items():
        for name, info in inputs.items():
            if name in out and (out[name].dtype, out[name].shape) != (info.dtype, info.shape):
                raise UsageError(f"signatures {owner[name]!r} and {key!r} both take input {name!r} but as "
                                 f"{out[name]} and {info}: random examples cannot serve both; give examples "
                                 f"per signature ({{signature key: {{name: array}}}})")
            out.setdefault(name, info)
            owner.setdefault(name, key)
    return out


def random_examples(inputs: Mapping[str, Any], seed: int = 0,
                    batch_sizes: Sequence[int] = (1, 4)) -> list[dict[str, np.ndarray]]:
    """Seeded random example batches for a signature: one batch per size in ``batch_sizes``.

    Unknown (None) dims are the batch size for the first dim and 1 elsewhere.
    Floats are standard normal, integers uniform in [0, 10), bools fair coins,
    strings ``b"tflab"``.
    """
    rng = np.random.default_rng(seed)
    out = []
    for b in batch_sizes:
        batch = {}
        for name, info in inputs.items():
            shape = [(b if i == 0 else 1) if d is None else d for i, d in enumerate(info.shape or ())]
            dt = np.dtype(info.dtype) if info.dtype not in ("string", "bfloat16") else None
            if info.dtype == "string":
                batch[name] = np.full(shape, b"tflab", dtype=object)
            elif dt is not None and dt.kind == "f":
                batch[name] = rng.standard_normal(shape).astype(dt)
            elif dt is not None and dt.kind in "iu":
                batch[name] = rng.integers(0, 10, size=shape).astype(dt)
            elif dt is not None and dt.kind == "b":
                batch[name] = rng.integers(0, 2, size=shape).astype(bool)
            else:
                raise UsageError(f"cannot make random examples of dtype {info.dtype} for input {name!r}: "
                                 f"give examples (an .npz file with one array per input)")
        out.append(batch)
    return out


def check_rows(batches: Sequence[Mapping[str, np.ndarray]]) -> None:
    """Refuses examples with zero rows, or an input none of whose values is finite: nothing would be
    compared or calibrated.

    An all-NaN input made int8 calibration produce a float model (export then blamed its own
    ``int8`` recipe) and check-tflite compare NaN with NaN and pass ("ok", exit 0): the check was
    vacuous. Called before any conversion. An input with some finite values is kept (NaN
    propagation is worth checking).

    Raises:
        UsageError: a batch whose first dimension is 0; an input whose every value (over all
            batches) is NaN or ±inf, with the counts.
    """
    for b in batches:
        rows = [a.shape[0] for a in b.values() if a.ndim]
        if rows and min(rows) == 0:
            raise UsageError("examples have 0 rows: nothing to compare or calibrate; give at least one row")
    check_finite(batches)


def load_examples(path: str) -> list[dict[str, np.ndarray]]:
    """Reads an .npz file of examples (`tflab._io.path_checks.read_npz`, the one reader every verb's
    ``--examples`` goes through).

    Keys are input names (one batch), or ``"<i>/<name>"`` for several batches,
    the layout of the ``examples.npz`` that `export_model` writes, so an
    export's examples can be given back with ``--examples``.

    Raises:
        UsageError: missing or unreadable file.
    """
    from tflab._io.path_checks import read_npz

    return read_npz(path, "--examples")


def example_inputs(fn: Callable, examples: Any, named: dict[str, Any] | None = None, *,
                   flag: str = "--examples", by_position: bool = False) -> tuple[tuple, dict]:
    """Binds real example arrays to ``fn``'s parameters: the one path every verb's ``--examples``
    (``inspect``, ``lower``, ``compare``, ``precision``, ``diagnose``) and the Python API's
    ``examples=`` go through.

    Each array is a parameter's value, found by name (`tflab._user.example_names.bind_example_names`:
    a name that is no parameter is refused, except numpy's ``arr_0`` as the one array of a function
    with one parameter to feed, and a one-input Keras model's input name); ``--arg``
    values (``named``) fill the other parameters. An ``--arg`` TensorSpec for the same name must describe the array (dtype, shape):
    the array replaces the random draw. The first batch of a several-batch ``.npz`` (``0/x``, as
    ``tflab export`` writes) is used.

    Args:
        fn: the function, `tf.function` or Keras model/layer the verb calls.
        examples: a path to an ``.npz`` (one array per parameter name, ``np.savez(path, ids=a)``), or
            a dict ``{parameter name: array}``.
        named: the parsed ``--arg`` values, ``{name: TensorSpec or Python value}``.
        flag: the option's name for messages.
        by_position: ``fn`` takes no parameters and builds a model (``tflab precision``'s factory):
            the arrays are its model's inputs, in the file's order.

    Returns:
        ``(args, kwargs)`` for ``fn``: the arrays as tensors (`tf.constant`, the array's dtype).

    Raises:
        UsageError: an unreadable file, a name ``fn`` does not take (named, with the parameters
            expected), an array that does not fit its
            ``--arg`` spec, or a required parameter with no value.

    Example:

    >>> np.savez("ids.npz", ids=np.array([[0, 1, 1]], np.int32))
    >>> example_inputs(lambda ids: ids, "ids.npz")
    ((), {'ids': <tf.Tensor: shape=(1, 3), dtype=int32, numpy=array([[0, 1, 1]], dtype=int32)>})
    """
    import inspect

    import tensorflow as tf

    from tflab._user import target as _target
    from tflab._user.example_names import bind_example_names
    from tflab._user.usercode import shorten

    named = dict(named or {})
    arg = "--arg" if flag.startswith("--") else "the argument"
    if isinstance(examples, (str, os.PathLike)):
        from tflab._io.path_checks import read_npz

        batch = read_npz(examples, flag)[0]
        source = f"{flag} {shorten(os.fspath(examples), 60)}"
    elif isinstance(examples, dict) and not examples:
        raise UsageError(f"{flag}: the dict is empty: give one array per parameter name, {{'x': array}}")
    elif isinstance(examples, dict) and not all(isinstance(k, str) for k in examples):
        bad = next(k for k in examples if not isinstance(k, str))
        raise UsageError(f"{flag}: keys must be parameter names (str), got {type(bad).__name__} "
                         f"{shorten(repr(bad), 40)}: name each array after the parameter it feeds, {{'x': array}}")
    elif isinstance(examples, dict):
        batch, source = dict(examples), "examples"
    elif isinstance(examples, Examples):  # what save_and_reload and export hand on: its first batch, as a path's
        batch, source = dict(examples.batches[0]), "examples"
    else:
        raise UsageError(f"{flag}: give a path to an .npz, a dict {{parameter name: array}} or an Examples; got "
                         f"{shorten(type(examples).__name__, 40)}")
    values: dict[str, Any] = {}
    batch = {name: as_example_array(name, a, source) for name, a in batch.items()}
    check_finite([batch])  # an all-NaN input would be judged over nothing (export's own rule)
    for name, a in batch.items():
        if a.dtype == object:
            raise UsageError(f"{source}: {name!r} is an object array; give a numeric or bool array")
        spec = named.get(name)
        if name in named and not isinstance(spec, tf.TensorSpec):
            raise UsageError(f"{source}: {name!r} is also given as {arg} {name}={shorten(spec, 40)}; give it once")
        if isinstance(spec, tf.TensorSpec) and (tf.as_dtype(a.dtype) != spec.dtype
                                                or not spec.shape.is_compatible_with(a.shape)):
            raise UsageError(f"{source}: {name!r} is {a.dtype.name}{list(a.shape)}, but {arg} {name} says "
                             f"{spec.dtype.name}{spec.shape.as_list() if spec.shape.rank is not None else ''}; "
                             f"make them agree, or drop the {arg}")
        values[name] = tf.constant(a)
    if by_position:
        specs = [n for n in named if isinstance(named[n], tf.TensorSpec)]
        stray = [n for n in values if n not in named]
        if specs and stray:  # both would be passed, the stray array as a second positional (Keras' `training`)
            raise UsageError(f"{source}: array(s) {', '.join(map(repr, stray))} name no {arg} input of the factory's "
                             f"model ({', '.join(specs)}): name each array after the {arg} it replaces, or drop "
                             f"the {arg}")
        unknown = [n for n in specs if n not in values]
        return tuple(values.values()) + tuple(named[n] for n in unknown), {}
    sig = _target.python_signature(fn)
    call = getattr(fn, "call", None)
    if sig is not None and not inspect.isroutine(fn) and inspect.ismethod(call) \
            and any(p.kind is p.VAR_KEYWORD for p in sig.parameters.values()):
        sig = _target.python_signature(call)  # a Keras layer or model: its call's names (``inputs``)
    values = bind_example_names(values, fn, sig, named, source, _target.callable_name(fn))
    named.update(values)
    return _target.bind_args(fn, named)


def load_call_with_examples(target: str, arg_items: list[str] | None,
                            examples: Any = None) -> tuple[Callable, tuple, dict]:
    """``FILE.py:FUNC``, ``--arg`` and ``--examples`` → the function and its call arguments.

    `tflab._user.target.load_call` when no examples are given; else its steps with the arrays bound by
    `example_inputs` (what ``inspect``, ``lower``, ``compare`` and ``diagnose`` call).

    Raises:
        UsageError: a bad target, ``--arg`` or ``--examples`` (one line).
    """
    from tflab._user import target as _target

    if examples is None:
        return _target.load_call(target, arg_items)
    named = _target.parse_args(arg_items)
    fn = _target.load_target(target)
    _target.check_target(fn, target.rpartition(":")[2])
    args, kwargs = example_inputs(fn, examples, named)
    return fn, args, kwargs


def with_examples(fn: Callable, examples: Any, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """The Python API's ``examples=`` (`tflab.compare_modes`, `tflab.lower`, `tflab.compare_precisions`,
    `tflab.trace_and_inspect`, `tflab.diagnose`): ``(args, kwargs)`` with the arrays bound to ``fn``'s
    parameters by `example_inputs`, the same binding as the CLI's ``--examples``.

    Args:
        fn: the user's function.
        examples: None (``args``/``kwargs`` returned unchanged), a path to an ``.npz`` or a dict
            ``{parameter name: array}``.
        args, kwargs: the call's own arguments; with ``examples``, only keyword arguments for the
            parameters the arrays do not feed (Python values such as ``training=False``, or specs).

    Raises:
        UsageError: positional arguments given too, or `example_inputs`' refusals.
    """
    if examples is None:
        return args, kwargs
    if args:
        raise UsageError("examples= feeds the function's parameters by name: give the other arguments "
                         "by keyword, not positionally")
    return example_inputs(fn, examples, dict(kwargs), flag="examples=")
