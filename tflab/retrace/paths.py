"""Paths into `Node` trees, and a recorded call rebuilt like an earlier trace.

`node_at` and `replace_at` read and replace the node at a reason's path
(``x``, ``batch['a']``, ``cfg.size``, ``xs[2]``); `same_types` compares two
calls' trees without their values; `like_trace` rebuilds a call with the part
a reason names taken from an earlier trace ("like trace #P"), the change a
retrace fix is checked with (`tflab.retrace.check`). `tflab.retrace.diff`
re-exports these names.
"""

from __future__ import annotations

import re
from typing import Any, Callable, Mapping

from tflab.retrace.nodes import Node


_TOKEN = re.compile(r"\[((?:'[^']*'|\"[^\"]*\"|[^\]])+)\]|\.(\w+)")


def _split(path: str) -> tuple[str, list[str]]:
    head = re.match(r"^[^\[.]+", path)
    name = head.group(0) if head else path
    return name, [a or b for a, b in _TOKEN.findall(path[len(name):])]


def _child(node: Node, key: str) -> Node | None:
    for k, c in node.children:
        if k == key or k.strip("'\"") == key.strip("'\""):
            return c
    return None


def node_at(nodes: Mapping[str, Node], path: str) -> Node | None:
    """The Node at a reason's parameter path (``x``, ``d['l']``, ``cfg.scale``), or None."""
    name, keys = _split(path)
    node = nodes.get(name)
    for k in keys:
        if node is None:
            return None
        node = _child(node, k)
    return node


def replace_at(nodes: Mapping[str, Node], path: str, fn: Callable[[Node], Node]) -> dict[str, Node]:
    """A copy of ``nodes`` with the Node at ``path`` replaced by ``fn(node)`` (unchanged if absent)."""
    name, keys = _split(path)
    out = dict(nodes)
    if name not in out:
        return out

    def walk(node: Node, rest: list[str]) -> Node:
        if not rest:
            return fn(node)
        kids = tuple((k, walk(c, rest[1:]) if (k == rest[0] or k.strip("'\"") == rest[0].strip("'\"")) else c)
                     for k, c in node.children)
        return node._replace(children=kids)

    out[name] = walk(out[name], keys)
    return out


# ---------------------------------------------------------------------------
# "Make it like trace #P": the smallest change of one reason, for ties and structure fixes
# ---------------------------------------------------------------------------


def _bare(node: Node) -> Any:
    """A Node without its labels (a List and a Tuple of the same items differ only in ``name``)."""
    return (node.kind, node.name, node.shape, node.dtype, node.value if node.kind != "object" else node.value[:2]
            if isinstance(node.value, tuple) else node.value,
            tuple((k, _bare(c)) for k, c in node.children))


def same_types(a: Mapping[str, Node], b: Mapping[str, Node]) -> bool:
    """Two FunctionType trees are the same TraceTypes (labels aside)."""
    return list(a) == list(b) and all(_bare(a[n]) == _bare(b[n]) for n in a)


def like_trace(nodes: Mapping[str, Node], reason: Any, earlier: Mapping[str, Node]) -> dict[str, Node]:
    """``nodes`` with only the change ``reason`` names undone, as the earlier trace had it.

    A dict's keys: the keys become the earlier ones, the values of the keys
    both have stay this call's. A list <-> tuple: the container only. A dtype:
    the dtype only. Anything else at the path: the earlier trace's value there.
    """
    path, kind = reason.parameter, reason.kind
    if not path:
        return dict(nodes)
    old = node_at(earlier, path)
    if kind == "signature":
        out = dict(nodes)
        if old is None:
            out.pop(path, None)
        else:
            out[path] = old
        return {n: out[n] for n in earlier if n in out}
    if old is None:
        return dict(nodes)

    def change(cur: Node) -> Node:
        if kind == "keys" and cur.kind == "map" and old.kind == "map":
            mine = dict(cur.children)
            return cur._replace(children=tuple((k, mine.get(k, c)) for k, c in old.children))
        if kind == "kind" and cur.kind == "seq" and old.kind == "seq":
            return cur._replace(name=old.name)
        if kind == "dtype" and cur.kind == old.kind:
            return cur._replace(dtype=old.dtype)
        return old

    return replace_at(nodes, path, change)
