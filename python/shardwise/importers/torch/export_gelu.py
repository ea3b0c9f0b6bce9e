"""GELU's tanh approximation written out as a formula, found in an exported ATen graph.

Hugging Face's ``NewGELUActivation`` (GPT-2's default ``gelu_new``) does not call
``F.gelu(x, approximate="tanh")``; it writes the formula, which ``torch.export`` records as
eight ATen calls:

    h = mul(x, 0.5)                 p = pow(x, 3)           w = mul(p, 0.044715)
    v = add(x, w)                   u = mul(v, sqrt(2/pi))  t = tanh(u)
    s = add(t, 1.0)                 y = mul(h, s)

:func:`tanh_gelus` finds exactly that shape (either operand order of each mul and add, the
constants equal to the formula's to double precision, every intermediate read only by the
formula), so the importer builds one ``gelu(x, approximate="tanh")`` op at ``y`` and skips the
others.  Anything else (another constant, an intermediate read elsewhere) is left to the
op-by-op conversion, which refuses the ops shardwise has no converter for (``aten.pow``).
"""
from __future__ import annotations

import math
from typing import Any, Callable

__all__ = ["tanh_gelus"]

_B = math.sqrt(2.0 / math.pi)
_K = 0.044715


def tanh_gelus(graph: Any, aten_name: Callable[[Any], str]) -> tuple[dict[Any, Any], set[Any]]:
    """({y node: x node} for each tanh GELU written as the formula, the formula's other nodes)."""
    found: dict[Any, Any] = {}
    inner: set[Any] = set()
    for node in graph.nodes:
        match = _match(node, aten_name)
        if match is not None:
            x, nodes = match
            found[node] = x
            inner.update(nodes)
    return found, inner


def _is(node: Any, op: str, aten_name: Callable[[Any], str]) -> bool:
    return getattr(node, "op", None) == "call_function" and aten_name(node.target) == op and not node.kwargs


def _number(v: Any, want: float) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and abs(float(v) - want) <= 1e-12 * abs(want)


def _split(node: Any, test: Callable[[Any], bool]) -> tuple[Any, Any] | None:
    """(the operand passing ``test``, the other) of a two-operand call, either order."""
    if len(node.args) != 2:
        return None
    a, b = node.args
    if test(b):
        return a, b
    if test(a):
        return b, a
    return None


def _match(y: Any, aten_name: Callable[[Any], str]) -> tuple[Any, list[Any]] | None:
    """(x, the intermediate nodes) when ``y`` is mul(mul(x, 0.5), add(tanh(...), 1.0))."""
    if not _is(y, "aten.mul", aten_name):
        return None
    ops = _split(y, lambda n: _is(n, "aten.mul", aten_name) and _split(n, lambda v: _number(v, 0.5)) is not None)
    if ops is None:
        return None
    s, h = ops
    x = _split(h, lambda v: _number(v, 0.5))[0]
    # s = add(tanh(u), 1.0)
    if not _is(s, "aten.add", aten_name) or (parts := _split(s, lambda v: _number(v, 1.0))) is None:
        return None
    t = parts[0]
    if not _is(t, "aten.tanh", aten_name) or len(t.args) != 1:
        return None
    u = t.args[0]
    # u = mul(v, sqrt(2/pi)); v = add(x, w); w = mul(p, 0.044715); p = pow(x, 3)
    if not _is(u, "aten.mul", aten_name) or (parts := _split(u, lambda c: _number(c, _B))) is None:
        return None
    v = parts[0]
    if not _is(v, "aten.add", aten_name) or (parts := _split(v, lambda n: n is x)) is None:
        return None
    w = parts[0]
    if not _is(w, "aten.mul", aten_name) or (parts := _split(w, lambda c: _number(c, _K))) is None:
        return None
    p = parts[0]
    if not _is(p, "aten.pow", aten_name) or len(p.args) != 2 or p.args[0] is not x or not _number(p.args[1], 3.0):
        return None
    nodes = [h, s, t, u, v, w, p]
    if any(len(n.users) != 1 for n in nodes):   # an intermediate read elsewhere: not only a GELU
        return None
    return x, nodes
