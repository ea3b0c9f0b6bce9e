"""The ONNX spelling of torchvision's Swin Transformer window attention, as :func:`shardwise.from_onnx`
imports it (the dynamo exporter writes the functions torch.fx leaves whole out op by op):

* ``GatherND(table, index)`` of the relative position table (L_h L_w, H), an initializer, by
  torchvision's constant index (T T, 1): the relative position bias that
  :func:`shardwise.importers.windows.relative_position_bias` builds (1, H, T, T) of slices of the
  table, seen as the (T T, H) the node computes (a view: the exporter's reshape to (T, T, H),
  permute and unsqueeze give the bias itself back);
* ``Pad`` with zeros (the padding to whole windows, ``F.pad``): concats with zeros
  (:func:`~shardwise.importers.windows.pad_zeros`);
* ``Add`` of torchvision's shifted-window mask, a constant (1, nW, 1, T, T) of 0 and -100 the
  exporter folds to numbers: the mask recognized (its geometry found) and built as
  :func:`~shardwise.importers.windows.shifted_window_mask` builds it.

The window partitions (rank-6 reshapes and transposes, the batch merged with the windows) are
views (:mod:`shardwise.importers.onnx.views`); the scores' batched products, the bias, the
softmax run on (N, nW, H, T, T).  Nothing here imports onnx.
"""
from __future__ import annotations

import weakref
from typing import Any, Callable

import numpy as np

from shardwise.graph import Graph, Tensor
from shardwise.importers.onnx.const import Const
from shardwise.importers.onnx.ops import ONNX_OPS, OnnxCall, _show
from shardwise.importers.onnx.views import from_index
from shardwise.importers.windows import (MASK_VALUE, pad_zeros, relative_position_bias, relative_position_index,
                                         shifted_window_mask, shifted_window_mask_values)

# per graph: a relative position bias (1, H, T, T), the source of the mask's constants
_bias_of: "weakref.WeakKeyDictionary[Graph, Tensor]" = weakref.WeakKeyDictionary()


def _window_of(rows: int, size: int) -> tuple[int, int] | None:
    """(wh, ww) of a table of ``rows`` = (2 wh - 1)(2 ww - 1) gathered by an index of ``size``
    = (wh ww)^2 entries."""
    t = int(round(size ** 0.5))
    if t * t != size:
        return None
    for wh in range(1, t + 1):
        if t % wh == 0 and (2 * wh - 1) * (2 * (t // wh) - 1) == rows:
            return wh, t // wh
    return None


def _relative_table(c: OnnxCall) -> bool:
    """Is the node's input 0 a table (rows, heads) of the model and input 1 constant indices?"""
    table, ids = c.inputs[0], c.inputs[1]
    return isinstance(table, Const) and table.source is not None and table.value.ndim == 2 and \
        table.value.dtype.kind == "f" and isinstance(ids, Const) and ids.value.dtype.kind in "iu"


def _gather_nd(c: OnnxCall) -> Any:
    """GatherND(table, index (T T, 1)): Swin's relative position bias."""
    if not _relative_table(c):
        raise c.error(f"GatherND of {_show(c.inputs[0])} by {_show(c.inputs[1])} is not supported (only a relative "
                      f"position table by torchvision's constant index)")
    if c.attrs.get_int("batch_dims", 0) != 0:
        raise c.error("GatherND with batch_dims is not supported")
    ids = c.inputs[1].value
    return _relative_bias(c, ids.reshape(-1) if ids.ndim == 2 and ids.shape[1] == 1 else None)


def _gather(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Gather(table, index (T T,)) of a table by torchvision's relative position index (MaxViT's
    ``table[index]``): the relative position bias; anything else as before."""
    def convert(c: OnnxCall) -> Any:
        if len(c.inputs) == 2 and _relative_table(c) and c.inputs[1].value.ndim == 1 and \
                c.attrs.get_int("axis", 0) == 0 and _window_of(c.inputs[0].value.shape[0], c.inputs[1].value.size):
            return _relative_bias(c, c.inputs[1].value)
        return previous(c)
    return convert


def _relative_bias(c: OnnxCall, index: np.ndarray | None) -> Any:
    """The relative position bias (1, H, T, T) of the table, input 0, gathered by ``index`` (it
    must be torchvision's), seen as the (T T, H) the node computes."""
    table = c.inputs[0]
    rows, heads = table.value.shape
    window = _window_of(rows, index.size) if index is not None else None
    if window is None or not np.array_equal(index, relative_position_index(*window)):
        raise c.error(f"{c.op_type} of the table {table.source!r} by indices that are not torchvision's relative "
                      f"position index is not supported")
    assert c.parameter_op is not None
    bias = relative_position_bias(c.graph, c.parameter_op(table, c.where), *window, c.name)   # (1, H, T, T)
    _bias_of[c.graph] = bias
    t = window[0] * window[1]
    # the node's (T T, H): element (i, h) is bias[0, h, i // T, i % T]
    index = (np.arange(heads)[None, :] * (t * t) + np.arange(t * t)[:, None]).astype(np.int64)
    return from_index(bias, np.empty(bias.shape, dtype=np.int8), index, c.where)


def _pad(c: OnnxCall) -> Tensor:
    x = c.tensor(0)
    mode = c.attrs.get_str("mode", "constant")
    pads = c.const_ints(1, "pads")
    value = c.const(2, "constant_value") if len(c.inputs) > 2 else None
    r = len(x.shape)
    if mode != "constant" or (value is not None and np.any(np.asarray(value) != 0)):
        raise c.error(f"Pad in mode {mode!r} with value {value} is not supported (zeros only)")
    if pads is None or len(pads) != 2 * r or min(pads) < 0:
        raise c.error(f"pads={pads} are not supported (non-negative, for each of the {r} dimensions)")
    axes = c.axes("axes", 3, r) if len(c.inputs) > 3 else None
    if axes is not None:
        raise c.error("Pad with axes is not supported")
    if pads[0] or pads[r]:
        raise c.error("padding the batch dimension is not supported")
    dims = [d for d in range(1, r) if pads[d] or pads[r + d]]
    y = x
    for d in dims:
        y = pad_zeros(c.graph, y, d, pads[d], pads[r + d], c.name if d == dims[-1] else f"{c.name}.{d}")
    return y


def _mask_geometry(mask: np.ndarray) -> tuple[int, int, tuple[int, int], tuple[int, int]] | None:
    """(hp, wp, window, shift) of torchvision's shifted-window mask (1, nW, 1, T, T), or None."""
    if mask.ndim != 5 or mask.shape[0] != 1 or mask.shape[2] != 1 or mask.shape[3] != mask.shape[4]:
        return None
    nw, t = mask.shape[1], mask.shape[3]
    values = mask.reshape(nw, t, t)
    if not np.all((values == 0) | (values == MASK_VALUE)):
        return None
    for wh in (d for d in range(1, t + 1) if t % d == 0):
        ww = t // wh
        for nwr in (d for d in range(1, nw + 1) if nw % d == 0):
            hp, wp = nwr * wh, nw // nwr * ww
            for sh in range(wh):
                for sw in range(ww):
                    if np.array_equal(shifted_window_mask_values(hp, wp, (wh, ww), (sh, sw)), values):
                        return hp, wp, (wh, ww), (sh, sw)
    return None


def _add(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Add of torchvision's shifted-window mask (a constant) to scores (N, nW, H, T, T); else as before."""
    def convert(c: OnnxCall) -> Any:
        for x, m in ((c.inputs[0], c.inputs[1]), (c.inputs[1], c.inputs[0])):
            if isinstance(m, Const) and m.source is None and isinstance(x, Tensor) and len(x.shape) == 5:
                found = _mask_geometry(np.asarray(m.value, dtype=np.float64))
                if found is None or x.shape[1] != m.value.shape[1] or x.shape[3:] != m.value.shape[3:]:
                    break
                source = _bias_of.get(c.graph)
                if source is None:
                    raise c.error("a shifted-window mask without a relative position bias before it is not supported")
                hp, wp, window, shift = found
                mask = shifted_window_mask(c.graph, source, hp, wp, window, shift, c.name)
                return c.graph.add(x, mask, name=c.name)
        return previous(c)
    return convert


def register() -> None:
    """Add GatherND and Pad to :data:`~shardwise.importers.onnx.ops.ONNX_OPS`, the mask to Add and
    the relative position table to Gather."""
    if "GatherND" in ONNX_OPS:
        return
    ONNX_OPS.update({"GatherND": _gather_nd, "Pad": _pad, "Add": _add(ONNX_OPS["Add"]),
                     "Gather": _gather(ONNX_OPS["Gather"])})


register()

