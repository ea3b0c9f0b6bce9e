"""Operands of the broadcasting and slicing conversions of :func:`shardwise.from_torch`: a
computed tensor, a lazy value, or a trainable parameter of the model read as data (a
``parameter`` op), and slices of them (``x[:, 1:]``, ``self.pos[:, :T]``).  Used by
:mod:`.ops` (add), :mod:`.seq` (getitem) and :mod:`.bcast`; it imports none of them."""
from __future__ import annotations

from typing import Any

from shardwise.graph import Tensor
from shardwise.importers.common import Lazy
from shardwise.importers.torch.call import Attr, Call, _show


def operand(c: Call, v: Any, what: str) -> Tensor:
    """``v`` as a graph tensor: a computed tensor, a lazy value, or a trainable parameter of the
    model (a ``parameter`` op)."""
    if isinstance(v, Lazy):
        v = v.tensor(c.graph, c.where, what)
    if isinstance(v, Attr):
        if not getattr(v.value, "requires_grad", False) or c.parameter_op is None:
            raise c.error(f"reads {_show(v)} (a constant: a buffer, or a parameter without requires_grad) as {what}; "
                          f"constant tensors are not supported as operands (the graph has no constant op)")
        v = c.parameter_op(v, c.where)
    return c.as_tensor(v, what)


def slice_index(c: Call, x: Any, index: Any) -> Tensor | None:
    """``x[...]`` with slices (and at most one int, a ``select``) of a computed tensor or a
    parameter: a ``slice`` op per sliced dimension (``self.pos[:, :T]``, ``x[:, 1:]``); None
    when ``index`` is not of that form."""
    if not isinstance(x, (Tensor, Attr, Lazy)):
        return None
    index = index if isinstance(index, tuple) else (index,)
    if not all(isinstance(i, slice) for i in index) or any(i is Ellipsis for i in index):
        return None
    t = operand(c, x, "the tensor sliced")
    if len(index) > len(t.shape):
        return None
    y = t
    for d, s in enumerate(index):
        if s == slice(None):
            continue
        for v in (s.start, s.stop, s.step):
            if v is not None and (isinstance(v, bool) or not isinstance(v, int)):
                return None
        lo, hi, step = s.indices(t.shape[d])
        if d == 0:
            if (lo, hi, step) == (0, t.shape[0], 1):
                continue
            raise c.error(f"slicing the batch dimension ({s}) is not supported")
        y = c.graph.slice(y, d, lo, hi, step, name=c.name if y is t else None)
    return y
