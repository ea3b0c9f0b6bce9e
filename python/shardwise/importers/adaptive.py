"""Adaptive pooling (``nn.AdaptiveAvgPool2d``, ``nn.AdaptiveMaxPool2d``) as graph ops, shared by
both importers: :mod:`shardwise.importers.torch.ops` (the module or function call) and
:mod:`shardwise.importers.onnx.adaptive` (the index arithmetic PyTorch's dynamo exporter writes
for it).  Both build the same ops for the same sizes:

* no op where the output size is the input size, or the input is 1x1 pooled to 1x1;
* ``expand`` of a 1x1 input (N, C, 1, 1) to (N, C, OH, OW): every window is the one value
  (alexnet's and vgg's 6x6 / 7x7 pools on small images);
* ``pool2d`` with kernel = stride = input / output where the output size divides the input's;
* else, for the average only, ``adaptive_avg_pool2d`` (PyTorch's uneven or overlapping windows,
  upsampling too: 2x2 -> 7x7).

Nothing here imports torch or onnx.
"""
from __future__ import annotations

import numpy as np

from shardwise.graph import Graph, Tensor
from shardwise.ops.bcast import adaptive_windows

__all__ = ["adaptive_pool", "adaptive_avg_weights"]


def adaptive_pool(g: Graph, x: Tensor, out: tuple[int, int], kind: str, name: str) -> Tensor | None:
    """``x`` (N, C, H, W) pooled adaptively to ``out`` = (OH, OW), positive ints, by ``kind``
    ("avg" or "max"); None where no op does it (a max pool whose output size does not divide the
    input's, other than of a 1x1 input)."""
    size = tuple(x.shape[2:])
    if size == (1, 1):
        return x if out == (1, 1) else g.expand(x, tuple(x.shape[:2]) + tuple(out), name=name)
    if out == size:
        return x
    if any(s % o for s, o in zip(size, out)):
        return g.adaptive_avg_pool2d(x, out, name=name) if kind == "avg" else None
    kernel = (size[0] // out[0], size[1] // out[1])
    return g.pool2d(x, kernel=kernel, stride=kernel, kind=kind, name=name)


def adaptive_avg_weights(size: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
    """Adaptive average pooling of an (H, W) map to (OH, OW) as a linear map: the (OH, OW, H W)
    float64 array whose [i, j] holds 1 / (window size) on the positions of window (i, j)
    (PyTorch's windows, :func:`shardwise.ops.bcast.adaptive_windows`) and 0 elsewhere."""
    (h, w), (oh, ow) = size, out
    weights = np.zeros((oh, ow, h, w))
    for i, (top, bottom) in enumerate(adaptive_windows(h, oh)):
        for j, (left, right) in enumerate(adaptive_windows(w, ow)):
            weights[i, j, top:bottom, left:right] = 1.0 / ((bottom - top) * (right - left))
    return weights.reshape(oh, ow, h * w)
