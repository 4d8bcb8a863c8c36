"""TraceType objects as comparable `Node` trees (and, for a saved log, TraceType text).

A tf.function keys its trace cache by FunctionType: one TraceType per
parameter (``TensorSpec``, ``RaggedTensorSpec``, ``SparseTensorSpec`` or another
``TypeSpec``, ``Literal``, ``Weakref``, ``List``/``Tuple``/``Dict``/``NamedTuple``/
``Attrs``, ``PerReplicaSpec``; TF 2.21 ``tensorflow/core/function/trace_type/
default_types.py``). `node_of` walks those OBJECTS once per trace into a `Node`
tree with readable labels (never a TraceType repr); `tflab.retrace.diff` diffs
two trees. `parse_trace_type` reads the same tree from TraceType text, for the
one path that has only text: a saved log file.

TF internals (a Weakref's referent, a PerReplicaSpec's components, a
TypeSpec's serialization) are read through `tflab._tf.function`.
"""

from __future__ import annotations

import re
from typing import Any, Mapping, NamedTuple, Sequence

from tflab._tf import function as _tf

# ---------------------------------------------------------------------------
# The tree
# ---------------------------------------------------------------------------


class Node(NamedTuple):
    """One TraceType, as a comparable tree.

    Attributes:
        kind: "tensor" (TensorSpec), "ragged", "sparse", "spec" (another
            TypeSpec, e.g. an ExtensionType's), "literal", "object" (a
            Weakref), "seq" (List/Tuple), "map" (Dict/NamedTuple/Attrs),
            "per_replica" or "other".
        name: the TraceType or TypeSpec class name (``TensorSpec``, ``List``,
            ``Dict``, the NamedTuple's type name, ``MaskedTensor.Spec``…).
        shape: a tensor's dims (ints, None for an unknown dim), or None for
            an unknown rank.
        dtype: a tensor's dtype name (``float32``).
        value: a literal's Python value; for an object, a key that is equal
            exactly when TF's Weakref would match (see `_object_key`).
        label: readable text for the value (``float32(3,)``, ``'a'``,
            ``lambda at demo.py:4``), never a TraceType repr.
        what: for an object: "function", "lambda", "bound_method", "object"
            or "collected".
        children: ((key, Node), ...) of a container, spec or PerReplicaSpec.
    """

    kind: str
    name: str = ""
    shape: Any = None
    dtype: str = ""
    value: Any = None
    label: str = ""
    what: str = ""
    children: tuple = ()


def fmt_shape(shape: Any) -> str:
    if shape is None:
        return "<unknown rank>"
    dims = ", ".join("None" if d is None else str(d) for d in shape)
    return f"({dims},)" if len(shape) == 1 else f"({dims})"


def _dims_of(tensor_shape: Any) -> tuple | None:
    try:
        if tensor_shape.rank is None:
            return None
        return tuple(tensor_shape.as_list())
    except (AttributeError, ValueError):
        return None


def _dtype_name(dtype: Any) -> str:
    return getattr(dtype, "name", str(dtype))


def _object_label(obj: Any) -> tuple[str, str]:
    """(what, label) of a live Python object TF keyed by weak reference."""
    import types

    if isinstance(obj, types.MethodType):
        owner = type(obj.__self__).__name__
        return "bound_method", f"bound method {owner}.{obj.__func__.__name__}"
    code = getattr(obj, "__code__", None)
    if isinstance(obj, types.FunctionType) and code is not None:
        where = f"{code.co_filename.rsplit('/', 1)[-1]}:{code.co_firstlineno}"
        if obj.__name__ == "<lambda>":
            return "lambda", f"lambda at {where}"
        return "function", f"function {obj.__qualname__.rsplit('<locals>.', 1)[-1]} at {where}"
    if type(obj).__name__ == "partial" and hasattr(obj, "func"):
        return "function", f"functools.partial of {getattr(obj.func, '__name__', 'a callable')}"
    text = repr(obj)
    if len(text) > 60 or text.startswith("<"):
        text = f"{type(obj).__name__} object"
    return "object", text


def _object_key(obj: Any) -> Any:
    # Weakref.__eq__ (default_types.py): the same live object, or == between
    # two live objects. The key holds a weak reference too (never keeping the
    # user's object alive): two weakrefs are == when both referents are alive
    # and ==, else only when they are the same weakref.
    import weakref

    try:
        ref = weakref.ref(obj)
    except TypeError:
        return ("id", id(obj), None)
    mode = "eq" if type(obj).__eq__ is not object.__eq__ else "id"
    return (mode, id(obj) if mode == "id" else 0, ref)


def collected(node: "Node") -> bool:
    if node.what == "collected":
        return True
    ref = node.value[2] if isinstance(node.value, tuple) and len(node.value) == 3 else None
    return ref is not None and ref() is None


def _leaf(value: Any) -> "Node":
    """A non-TraceType field of a TypeSpec's serialization (a shape, a dtype, a number)."""
    if type(value).__name__ == "TensorShape":
        return Node("tensor", name="shape", shape=_dims_of(value), label=fmt_shape(_dims_of(value)))
    if type(value).__name__ == "DType":
        return Node("literal", value=value.name, label=value.name)
    if _tf.has_serialization(value) or hasattr(value, "is_subtype_of"):
        return node_of(value)
    if isinstance(value, (tuple, list)):
        return Node("seq", name="Tuple", children=tuple((str(i), _leaf(v)) for i, v in enumerate(value)),
                    label="(" + ", ".join(_leaf(v).label for v in value) + ")")
    try:
        hash(value)
    except TypeError:
        value = repr(value)
    return Node("literal", value=value, label=repr(value))


def node_of(trace_type: Any) -> "Node":
    """The `Node` tree of one TF TraceType object (or of its repr text, for a log file).

    Args:
        trace_type: a TraceType from a FunctionType's parameter
            (``p.type_constraint``): ``tf.TensorSpec``, ``tf.RaggedTensorSpec``,
            ``tf.SparseTensorSpec``, another ``tf.TypeSpec``,
            ``default_types.Literal`` / ``Weakref`` / ``List`` / ``Tuple`` /
            ``NamedTuple`` / ``Attrs`` / ``Dict``, ``PerReplicaSpec``; or a
            str (parsed with `parse_trace_type`).

    Returns:
        The tree; a TraceType it does not know is an "other" leaf labelled by
        its class name.
    """
    if isinstance(trace_type, Node):
        return trace_type
    if isinstance(trace_type, str):
        return parse_trace_type(trace_type)
    cls = type(trace_type).__name__
    if cls in ("TensorSpec", "BoundedTensorSpec", "DenseSpec"):
        dims, dt = _dims_of(trace_type.shape), _dtype_name(trace_type.dtype)
        return Node("tensor", name=cls, shape=dims, dtype=dt, label=f"{dt}{fmt_shape(dims)}")
    if cls == "Literal":
        v = trace_type.value
        return Node("literal", value=v, label=repr(v))
    if cls == "Weakref":
        obj = _tf.weakref_target(trace_type)
        if obj is None:
            return Node("object", value=("dead", id(trace_type)), what="collected",
                        label="a garbage-collected object")
        what, label = _object_label(obj)
        return Node("object", name=type(obj).__qualname__, value=_object_key(obj), what=what,
                    label=label)
    if cls in ("List", "Tuple"):
        comps = trace_type.components_tuple.components if cls == "List" else trace_type.components
        kids = tuple((str(i), node_of(c)) for i, c in enumerate(comps))
        inner = ", ".join(k.label for _, k in kids)
        label = f"[{inner}]" if cls == "List" else f"({inner}{',' if len(kids) == 1 else ''})"
        return Node("seq", name=cls, children=kids, label=label)
    if cls == "Dict":
        kids = tuple((repr(k), node_of(v)) for k, v in trace_type.mapping.items())
        return Node("map", name="Dict", children=kids,
                    label="{" + ", ".join(f"{k}: {c.label}" for k, c in kids) + "}")
    if cls in ("NamedTuple", "Attrs"):
        names = trace_type.attribute_names
        comps = trace_type.attributes.components
        kids = tuple((str(n), node_of(c)) for n, c in zip(names, comps))
        tname = trace_type.type_name
        return Node("map", name=tname, children=kids,
                    label=f"{tname}(" + ", ".join(f"{k}={c.label}" for k, c in kids) + ")")
    if cls == "PerReplicaSpec":
        kids = tuple((str(i), node_of(s)) for i, s in enumerate(_tf.per_replica_components(trace_type)))
        return Node("per_replica", name=cls, children=kids, label=_per_replica_label(kids))
    if cls == "RaggedTensorSpec":
        dims, dt = _dims_of(trace_type.shape), _dtype_name(trace_type.dtype)
        kids = (("ragged_rank", _leaf(trace_type.ragged_rank)),
                ("row_splits_dtype", _leaf(trace_type.row_splits_dtype)))
        return Node("ragged", name=cls, shape=dims, dtype=dt, children=kids,
                    label=f"ragged {dt}{fmt_shape(dims)}")
    if cls == "SparseTensorSpec":
        dims, dt = _dims_of(trace_type.shape), _dtype_name(trace_type.dtype)
        return Node("sparse", name=cls, shape=dims, dtype=dt, label=f"sparse {dt}{fmt_shape(dims)}")
    if _tf.has_serialization(trace_type):  # an ExtensionType's spec or another TypeSpec
        try:
            fields = _tf.type_spec_fields(trace_type)
        except Exception:
            fields = ()
        kids = []
        for i, f in enumerate(fields if isinstance(fields, (tuple, list)) else (fields,)):
            if isinstance(f, tuple) and len(f) == 2 and isinstance(f[0], str):
                kids.append((f[0], _leaf(f[1])))
            else:
                kids.append((str(i), _leaf(f)))
        name = type(trace_type).__qualname__
        return Node("spec", name=name, children=tuple(kids),
                    label=f"{name}(" + ", ".join(f"{k}={c.label}" for k, c in kids) + ")")
    return Node("other", name=cls, value=("other", id(trace_type)), label=f"a {cls}")


def _per_replica_label(kids: Sequence[tuple[str, Node]]) -> str:
    dts = sorted({c.dtype for _, c in kids if c.dtype})
    shapes = [c.label[len(c.dtype):] if c.kind == "tensor" else c.label for _, c in kids]
    sh = shapes[0] if len(set(shapes)) == 1 else "[" + ", ".join(shapes) + "]"
    return f"per-replica {'/'.join(dts)}{sh} ×{len(kids)}"


# ---------------------------------------------------------------------------
# Text fallback (a log file): TraceType repr -> the same Node tree
# ---------------------------------------------------------------------------

_OPEN = {"(": ")", "[": "]", "{": "}", "<": ">"}
_CLOSE = set(_OPEN.values())
_TENSOR_RE = re.compile(r"^(\w*Spec)\(shape=(.*?), dtype=tf\.(\w+)")
_WEAKREF_TO = re.compile(r"; to '([^']+)' at (0x[0-9a-fA-F]+)(?: \((.*)\))?>")


def _split_top(text: str) -> list[str]:
    """Splits on commas that are outside brackets and quotes."""
    parts, depth, quote, start, i = [], 0, "", 0, 0
    while i < len(text):
        c = text[i]
        if quote:
            if c == "\\":
                i += 1
            elif c == quote:
                quote = ""
        elif c in "'\"":
            quote = c
        elif c in _OPEN:
            depth += 1
        elif c in _CLOSE:  # an unmatched close (TF's Weakref repr ends in "])") is ignored
            depth = max(0, depth - 1)
        elif c == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
        i += 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _parse_shape(text: str) -> tuple | None:
    text = text.strip()
    if not (text.startswith("(") and text.endswith(")")):
        return None
    out = []
    for d in text[1:-1].split(","):
        d = d.strip()
        if d:
            out.append(None if d == "None" else int(d) if d.lstrip("-").isdigit() else d)
    return tuple(out)


def parse_trace_type(text: str) -> Node:
    """Parses the repr of a TF 2.21 TraceType (as a log file prints it) into a `Node` tree.

    Only for text that has no TraceType object behind it (a saved log); in
    process `node_of` walks the objects.
    """
    text = text.strip()
    m = _TENSOR_RE.match(text)
    if m:
        dims = _parse_shape(m.group(2))
        return Node("tensor", name=m.group(1), shape=dims, dtype=m.group(3),
                    label=f"{m.group(3)}{fmt_shape(dims)}")
    if text.startswith("Literal[") and text.endswith("]"):
        import ast

        v = text[len("Literal["):-1]
        try:
            value = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            value = v
        return Node("literal", value=value, label=v)
    if text.startswith("Weakref["):
        if "; dead>" in text:
            return Node("object", value=("dead", text), what="collected", label="a garbage-collected object")
        m = _WEAKREF_TO.search(text)
        kind, addr, extra = (m.group(1), m.group(2), m.group(3)) if m else ("object", text, None)
        if kind == "method":
            what, label = "bound_method", "bound method"
        elif kind == "function":
            what = "lambda" if extra == "<lambda>" else "function"
            label = "lambda" if extra == "<lambda>" else f"function {extra or ''}".strip()
        else:
            what, label = "object", f"{kind} object"
        return Node("object", value=("id", addr), what=what, label=label)
    if text.startswith("PerReplicaSpec(") and text.endswith(")"):
        kids = tuple((str(i), parse_trace_type(t))
                     for i, t in enumerate(_split_top(text[len("PerReplicaSpec("):-1])))
        return Node("per_replica", name="PerReplicaSpec", children=kids, label=_per_replica_label(kids))
    m = re.match(r"^([A-Za-z_][\w.]*)\[(.*)\]$", text, re.S)
    if m:
        name, body = m.group(1), m.group(2)
        items = _split_top(body)
        if name in ("List", "Tuple"):
            kids = tuple((str(i), parse_trace_type(t)) for i, t in enumerate(items))
            inner = ", ".join(k.label for _, k in kids)
            return Node("seq", name=name, children=kids,
                        label=f"[{inner}]" if name == "List" else f"({inner})")
        pairs = []
        for item in items:
            if item.startswith("[") and item.endswith("]"):
                kv = _split_top(item[1:-1])
                if len(kv) == 2:
                    pairs.append((kv[0], parse_trace_type(kv[1])))
                    continue
            pairs.append((str(len(pairs)), parse_trace_type(item)))
        return Node("map", name=name, children=tuple(pairs),
                    label="{" + ", ".join(f"{k}: {c.label}" for k, c in pairs) + "}")
    head = re.match(r"^([A-Za-z_][\w.]*)", text)
    return Node("other", name=head.group(1) if head else "", value=("text", text),
                label=f"a {head.group(1)}" if head else "a value")




def nodes_of(function_type: Any) -> dict[str, Node]:
    """``{parameter: Node}`` of a TF FunctionType, a ``{name: TraceType or text}`` mapping, or pairs."""
    if function_type is None:
        return {}
    if hasattr(function_type, "parameters"):
        return {p.name: node_of(p.type_constraint) for p in function_type.parameters.values()}
    items = function_type.items() if isinstance(function_type, Mapping) else function_type
    return {str(k): node_of(v) for k, v in items}



def function_type_inputs(function_type: Any) -> tuple[tuple[str, str], ...]:
    """(parameter, TraceType repr) pairs of a TF FunctionType (for JSON; reasons never use them)."""
    return tuple((p.name, repr(p.type_constraint)) for p in function_type.parameters.values())
