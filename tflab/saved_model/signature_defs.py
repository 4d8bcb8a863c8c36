"""Which SignatureDefs a SavedModel gets, what they call, and what they cannot keep.

* `module_signatures`: the signatures ``tf.saved_model.save(obj)`` exports for a
  `tf.Module` (TF's own rule, through `tflab._tf.saved_model`), or the given ones;
* `Reference`: the in-process ConcreteFunction a signature was saved from,
  callable with the signature's named inputs (the reference side of the round trip);
* `unsaved_notes`, `lost_dict_keys_notes`, `fixed_shape_notes`: what a SavedModel
  keeps only in part (tensorflow/python/saved_model/save.py, signature_serialization.py).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, Mapping

import numpy as np

from tflab._tf import saved_model as tf_sm
from tflab.errors import UsageError
from tflab.saved_model.loading import DEFAULT_SIGNATURE, normalize_outputs, to_numpy
from tflab.saved_model.records import TensorInfo

__all__ = ["Reference", "reference", "module_signatures", "signature_input_names", "unsaved_notes",
           "lost_dict_keys_notes", "fixed_shape_notes", "tf_functions"]


def tf_functions(obj) -> dict[str, Any]:
    """Attribute name → `tf.function` (PolymorphicFunction) on a tf.Module."""
    import tensorflow as tf

    found = {}
    names = set()
    for klass in type(obj).__mro__:
        names.update(vars(klass))
    names.update(getattr(obj, "__dict__", {}))
    for name in sorted(names):
        if name.startswith("__") and name != "__call__":  # AutoTrackable lists __call__ too
            continue
        try:
            value = getattr(obj, name)
        except Exception:  # properties that fail are not functions we save
            continue
        if isinstance(value, tf.types.experimental.PolymorphicFunction):
            found[name] = value
    return found


def unsaved_notes(obj) -> list[str]:
    """Notes on a tf.Module's tf.functions that the SavedModel keeps only in part or not at all."""
    from tflab import fix as fx

    notes = []
    for name, fn in tf_functions(obj).items():
        cfs = tf_sm.serialized_concrete_functions(fn)
        if not cfs:
            fix = fx.unchecked("input_signature", f"@tf.function(input_signature=[...]) on {name}",
                               "call it once or give it an input_signature before saving",
                               "tflab does not know the inputs it should take")
            notes.append(f"{name}: never traced and no input_signature, so the SavedModel holds no "
                         f"ConcreteFunction for it; the reloaded {name} raises when called; {fix.line()}")
            continue
        literals: dict[str, set] = {}
        for cf in cfs:
            for p in cf.function_type.parameters.values():
                if tf_sm.is_literal(p.type_constraint):
                    literals.setdefault(p.name, set()).add(repr(p.type_constraint.value))
        for pname, values in literals.items():
            vals = ", ".join(sorted(values))
            fix = fx.unchecked("code", "", "trace other values before saving, or make it a tensor",
                               f"which other values of {pname} you call with is yours to say")
            notes.append(f"{name}: Python argument {pname} was traced only as {pname}={vals}; each value "
                         f"is a constant baked into its FuncGraph, so the reloaded {name} accepts only "
                         f"{pname}={vals}; {fix.line()}")
    return notes


@dataclasses.dataclass
class Reference:
    """In-process ConcreteFunction of one signature, callable with the signature's named inputs."""

    concrete: Any
    input_names: list[str]  # signature input name of each flat input, in flatten order
    rename: Callable[[Any], dict]

    def __call__(self, feed: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import tensorflow as tf

        args, kwargs = self.concrete.structured_input_signature
        if not args and sorted(kwargs) == self.input_names:
            out = self.concrete(**{n: tf.constant(feed[n]) for n in self.input_names})
            return {k: to_numpy(v) for k, v in self.rename(out).items()}
        flat = [tf.constant(feed[n]) for n in self.input_names]
        args, kwargs = tf.nest.pack_sequence_as(self.concrete.structured_input_signature, flat)
        out = self.concrete(*args, **kwargs)
        return {k: to_numpy(v) for k, v in self.rename(out).items()}


def reference(concrete, rename=normalize_outputs) -> Reference:
    import tensorflow as tf

    args, kwargs = concrete.structured_input_signature
    if not args and kwargs and all(isinstance(s, tf.TensorSpec) for s in kwargs.values()):
        # A signature function (e.g. of a loaded SavedModel) takes its inputs by name.
        return Reference(concrete, sorted(kwargs), rename)
    n = len(tf.nest.flatten(concrete.structured_input_signature))
    # Signature inputs are named after the FuncGraph's placeholders (the spec's
    # name, else the argument's path), in flatten order; captures follow them.
    names = [t.name.split(":")[0] for t in concrete.inputs[:n]]
    return Reference(concrete, names, rename)


def module_signatures(obj, signatures) -> tuple[dict[str, Any], list[str]]:
    """The signatures to save for a tf.Module, and notes on how they were chosen.

    With ``signatures`` given, those. Without, ``tf.saved_model.save``'s own
    rule (``save.py`` calls ``signature_serialization.find_function_to_export``
    on the object's SavedModel children, which ``AutoTrackable`` lists from
    ``dir(obj)``, ``__call__`` included): an attribute named
    ``_default_save_signature`` wins; otherwise, if exactly one child
    `tf.function` with an ``input_signature`` (or ConcreteFunction) is a valid
    signature (``_valid_signature``: it returns at least one tensor, takes no
    `tf.Variable`, and its outputs are a tensor, a list/tuple or a str-keyed
    dict of tensors), it becomes ``serving_default``. TF exports no signature
    when several qualify; tflab then checks each under its attribute name
    (none is ``serving_default``) and says so in a note. With none, a single
    traced `tf.function` (one ConcreteFunction) is checked as
    ``serving_default``, also with a note, since TF would export nothing.
    """
    if signatures is not None:
        if not isinstance(signatures, Mapping):
            signatures = {DEFAULT_SIGNATURE: signatures}
        out = {}
        for k, f in signatures.items():
            out[k] = f.get_concrete_function() if hasattr(f, "get_concrete_function") else f
        return out, []
    chosen, candidates, rejected = _tf_signature_choice(obj)
    notes = [f"{n}: has an input_signature but tf.saved_model.save does not make it a signature: {why}"
             for n, why in rejected.items()]
    if chosen is not None:
        return {DEFAULT_SIGNATURE: chosen}, notes
    if len(candidates) > 1:
        names = ", ".join(candidates)
        notes.append(f"{len(candidates)} functions can be signatures ({names}): tf.saved_model.save(obj) "
                     f"without signatures= exports none of them (it picks one only when exactly one "
                     f"qualifies, signature_serialization.find_function_to_export); tflab saved each under "
                     f"its attribute name and none as serving_default. Pass signatures={{'serving_default': "
                     f"obj.{next(iter(candidates))}, ...}} (to save_and_reload or tf.saved_model.save) to choose")
        return dict(candidates), notes
    # A single traced function can still serve as the default signature.
    traced = {n: tf_sm.serialized_concrete_functions(f) for n, f in tf_functions(obj).items()}
    traced = {n: c for n, c in traced.items() if len(c) == 1}
    if len(traced) == 1:
        (name, (concrete,)), = traced.items()
        notes.append(f"{name} has no input_signature, so tf.saved_model.save(obj) alone would export no "
                     f"signature; tflab saved its one traced ConcreteFunction as serving_default "
                     f"(signatures={{'serving_default': obj.{name}.get_concrete_function(...)}})")
        return {DEFAULT_SIGNATURE: concrete}, notes
    raise UsageError(f"{type(obj).__name__} has no tf.function with an input_signature to export as "
                     f"a signature: decorate one with @tf.function(input_signature=[tf.TensorSpec(...)]) "
                     f"or pass signatures={{'serving_default': fn}}")


def _tf_signature_choice(obj) -> tuple[Any, dict[str, Any], dict[str, str]]:
    """What ``tf.saved_model.save(obj)`` without ``signatures=`` would export.

    Runs TF's own ``signature_serialization.find_function_to_export`` on the
    ``_AugmentedGraphView`` that ``tf.saved_model.save`` builds, and applies
    the same ``_get_signature``/``_valid_signature`` tests to each child.

    Returns:
        (the ConcreteFunction TF would save as ``serving_default`` or None,
        {attribute: ConcreteFunction} for every child that could be a
        signature, {attribute: why not} for functions that have an
        input_signature but are not valid signatures).
    """
    import tensorflow as tf

    chosen, children = tf_sm.signature_choice(obj)
    candidates: dict[str, Any] = {}
    rejected: dict[str, str] = {}
    for name, child in children:
        if not isinstance(child, (tf.types.experimental.PolymorphicFunction,
                                  tf.types.experimental.ConcreteFunction)):
            continue
        concrete = tf_sm.get_signature(child)
        if concrete is None:
            continue
        if tf_sm.valid_signature(concrete):
            candidates[name] = concrete
        elif not concrete.outputs:
            rejected[name] = "it returns no tensor"
        else:
            rejected[name] = ("it takes a tf.Variable or returns something other than tensors "
                              "(a tensor, a list/tuple or a str-keyed dict of them)")
    if chosen is not None and not isinstance(chosen, tf.types.experimental.ConcreteFunction):
        # `_default_save_signature` may hold a tf.function: TF resolves it the same way.
        concrete = tf_sm.get_signature(chosen)
        if concrete is None:
            raise UsageError(f"{type(obj).__name__}._default_save_signature is a tf.function without an "
                             f"input_signature: give it one, or pass signatures=")
        chosen = concrete
    return chosen, candidates, rejected



def signature_input_names(concrete: Any) -> list[str]:
    """The SignatureDef input name of each flat input of ``concrete``, in flatten order.

    Signature inputs are named after the FuncGraph's placeholders (a spec's
    ``name``, else the parameter's), which is how a SavedModel signature
    will call them.
    """
    return list(reference(concrete).input_names)



def source_function(obj, concrete) -> Any:
    """The `tf.function` of a tf.Module whose saved ConcreteFunction is ``concrete`` (by name), or None."""
    if obj is None or concrete is None:
        return None
    name = getattr(concrete, "name", None)
    for fn in tf_functions(obj).values():
        try:
            if any(getattr(c, "name", None) == name for c in tf_sm.serialized_concrete_functions(fn)):
                return fn
        except Exception:  # noqa: BLE001 - a function TF cannot list: not the one
            continue
    return None


def _relaxed_batch_check(obj, concrete, fixed: list[TensorInfo]) -> Callable[[], tuple]:
    """Re-traces the signature's tf.function with dim 0 None and runs a batch one larger."""
    import tensorflow as tf

    def check():
        fn = source_function(obj, concrete)
        args, kwargs = concrete.structured_input_signature
        if fn is None or kwargs or not all(isinstance(a, tf.TensorSpec) for a in args):
            raise _NotApplicable("not a tf.Module function with positional tensor inputs tflab can re-trace")
        names = signature_input_names(concrete)
        specs = [tf.TensorSpec([None] + a.shape.as_list()[1:], a.dtype, name=n) if a.shape.rank else a
                 for a, n in zip(args, names)]
        relaxed = tf.function(fn.python_function, input_signature=specs).get_concrete_function()
        sizes = {a.shape[0] for a in args if a.shape.rank}
        n = (max(sizes) if sizes else 1) + 1
        relaxed(*[tf.zeros([n] + a.shape.as_list()[1:], a.dtype) if a.shape.rank else tf.zeros([], a.dtype)
                  for a in args])
        return True, (f"re-traced with dim 0 None and ran a batch of {n} (the saved signature takes "
                      f"{', '.join(str(s) for s in sorted(sizes))} only)"), {"batch_run": n}

    return check


class _NotApplicable(Exception):
    pass


def graph_op_types(fn) -> set[str]:
    """The op types a concrete function's graph runs, the library functions it calls included.

    Reached through every function-valued attr (``f`` of a call, ``body``/``cond`` of a ``While``,
    ``then_branch``/``else_branch`` of an ``If``), so only the functions this graph really calls count.
    """
    gdef = fn.graph.as_graph_def()
    library = {f.signature.name: f for f in gdef.library.function}
    types: set[str] = set()
    seen: set[str] = set()
    pending = [list(gdef.node)]
    while pending:
        for node in pending.pop():
            types.add(node.op)
            for attr in node.attr.values():
                names = [attr.func.name] if attr.HasField("func") else []
                if attr.HasField("list"):
                    names += [f.name for f in attr.list.func]
                for name in names:
                    if name in library and name not in seen:
                        seen.add(name)
                        pending.append(list(library[name].node_def))
    return types


# Ops whose TFLite conversion needs the batch dimension fixed: a tensor list reserved per batch row
# (a Keras RNN's loop) fails with "'tf.TensorListReserve' op requires element_shape to be static".
STATIC_BATCH_OPS = ("TensorListReserve",)


def fixed_shape_notes(key: str, inputs: Mapping[str, TensorInfo], obj: Any = None, concrete: Any = None,
                      saved: Any = None) -> list[str]:
    """A warning for a signature whose inputs have a fixed batch dim (tensorflow/tensorflow#36461):
    TF Serving, or any caller, with another batch size gets an error. The fix (a None dim 0) is a
    `tflab.fix.Fix`: for a tf.Module's tf.function (``obj``, ``concrete``), re-traced with the relaxed
    input_signature and run on a batch one larger; otherwise "not checked". Where the saved signature
    (``saved``, its loaded function) runs an op of `STATIC_BATCH_OPS`, the note says that TFLite needs
    the fixed batch, so the two advices do not send the user in a circle."""
    from tflab import fix as fx

    fixed = [i for i in inputs.values() if i.shape and i.shape[0] is not None]
    if not fixed:
        return []
    needs = sorted(set(STATIC_BATCH_OPS) & graph_op_types(saved)) if saved is not None else []
    shown = ", ".join(str(i) for i in fixed)
    relaxed = ", ".join(f"tf.TensorSpec([None{''.join(f', {d}' for d in i.shape[1:])}], tf.{i.dtype}, "
                        f"name={i.name!r})" for i in fixed)
    what = (f"for any batch size, export with a None dim (signature {key}: "
            + ", ".join(f"{i.name}: {i.dtype}[None{''.join(f',{d}' for d in i.shape[1:])}]" for i in fixed) + ")")
    change = f"input_signature=[{relaxed}]"
    fix = fx.attempt("input_signature", change, what, _relaxed_batch_check(obj, concrete, fixed),
                     how="your tf.function re-traced with the relaxed input_signature")
    if fix.failed and "_NotApplicable" in fix.result:
        fix = fx.unchecked("input_signature", change, what, fix.result.split(": ", 1)[-1])
    tflite = (f"; for TFLite keep this fixed batch: its {', '.join(needs)} (a Keras RNN's loop) converts "
              f"only with a static batch (\"requires element_shape to be static\" with a None dim), so "
              f"export a None-batch signature for TF Serving and this one for TFLite") if needs else ""
    return [f"signature {key} takes {shown} exactly (dim 0 is fixed at the traced size): a batch of "
            f"another size is refused when bound to the SignatureDef (\"Can not cast TensorSpec\") or "
            f"fails in an op traced at the fixed size; " + "; ".join(fx.first_working([fix]).lines()) + tflite]


def _named_keys_check(obj, concrete, lost: list[str]) -> Callable[[], tuple]:
    """Re-traces the signature's tf.function with each dict TensorSpec named after its key."""
    import tensorflow as tf

    def check():
        fn = source_function(obj, concrete)
        args, kwargs = concrete.structured_input_signature
        if fn is None or kwargs:
            raise _NotApplicable("not a tf.Module function with positional inputs tflab can re-trace")
        named = [{k: tf.TensorSpec(v.shape, v.dtype, name=k) if isinstance(v, tf.TensorSpec) else v
                  for k, v in a.items()} if isinstance(a, Mapping) else a for a in args]
        cf = tf.function(fn.python_function, input_signature=named).get_concrete_function()
        got = signature_input_names(cf)
        missing = [k for k in lost if k not in got]
        if missing:
            return False, f"re-traced, the signature inputs are {sorted(got)}: {missing} still missing"
        return True, f"re-traced with named specs: the signature inputs are {sorted(got)}", {"inputs": sorted(got)}

    return check


def lost_dict_keys_notes(key: str, concrete, inputs: Mapping[str, TensorInfo], obj: Any = None) -> list[str]:
    """A note when a dict input's keys did not become the signature's input names; its fix (a
    ``name=`` per spec) re-traced on the tf.Module's function (``obj``) and its names read back."""
    from tflab import fix as fx

    notes = []
    args, kwargs = concrete.structured_input_signature
    for arg in list(args) + list(kwargs.values()):
        if isinstance(arg, Mapping):
            lost = [k for k in arg if k not in inputs]
            if lost:
                change = "{" + ", ".join(f"{k!r}: tf.TensorSpec(..., name={k!r})" for k in lost) + "}"
                what = "give each spec name=<key> to keep the keys"
                fix = fx.attempt("input_signature", change, what, _named_keys_check(obj, concrete, lost),
                                 how="your tf.function re-traced with the named specs")
                if fix.failed and "_NotApplicable" in fix.result:
                    fix = fx.unchecked("input_signature", change, what, fix.result.split(": ", 1)[-1])
                notes.append(f"signature {key}: dict keys {lost} are not input names (the signature has "
                             f"{sorted(inputs)}); unnamed TensorSpecs are named after their placeholders; "
                             + "; ".join(fx.first_working([fix]).lines()))
    return notes

