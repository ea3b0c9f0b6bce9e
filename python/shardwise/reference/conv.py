"""Plain NumPy convolution, dense, grouped, depthwise and dilated: part of the numerics oracle
(:mod:`shardwise.reference` re-exports it, with the window helpers pooling shares).

PyTorch's definition (``torch.nn.functional.conv2d``), in the dtype of the inputs::

    y[n, co, r, c] = sum over ci < Cig, i < kh, j < kw of
                     xpad[n, g*Cig + ci, r*sh + i*dh, c*sw + j*dw] * w[co, ci, i, j]  + b[co]

with ``G = groups``, ``Cig = C_in / G`` input and ``Cog = C_out / G`` output channels per
group, ``g = co // Cog`` the group of output channel ``co``, ``xpad`` the input zero-padded by
``(ph, pw)``, and ``(dh, dw)`` the dilation (the distance between a kernel's taps).  The output
is ``(H + 2ph - dh*(kh-1) - 1) // sh + 1`` rows high.  ``groups = C_in`` is a depthwise
convolution.

As in the rest of the oracle, loops run over the kernel's taps (never over pixels) and the
groups are an axis of one einsum, so every line is array arithmetic with its shapes beside it.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

__all__ = ["conv2d_forward", "conv2d_backward"]


def _pair(value: int | Sequence[int]) -> tuple[int, int]:
    """An int or a pair of ints -> a pair (the graph builder accepts both)."""
    if isinstance(value, (int, np.integer)):
        return (int(value), int(value))
    a, b = value
    return (int(a), int(b))


def _out_size(size: int, kernel: int, stride: int, pad: int, dilation: int = 1) -> int:
    return (size + 2 * pad - dilation * (kernel - 1) - 1) // stride + 1


def _window(xp: np.ndarray, i: int, j: int, ho: int, wo: int, sh: int, sw: int) -> np.ndarray:
    """The (N, C, Ho, Wo) view of the padded input read at padded offset (i, j).

    Output pixel (y, x) reads padded input pixel (y*sh + i, x*sw + j); a dilated kernel's tap
    (ki, kj) is the offset (ki*dh, kj*dw).
    """
    return xp[:, :, i: i + sh * (ho - 1) + 1: sh, j: j + sw * (wo - 1) + 1: sw]


def _pad(x: np.ndarray, ph: int, pw: int, value: float = 0.0) -> np.ndarray:
    """(N, C, H, W) -> (N, C, H + 2ph, W + 2pw), padded with ``value``."""
    if ph == 0 and pw == 0:
        return x
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _unpad(xp: np.ndarray, ph: int, pw: int) -> np.ndarray:
    """The inverse of :func:`_pad` (a view)."""
    h, w = xp.shape[2] - 2 * ph, xp.shape[3] - 2 * pw
    return xp[:, :, ph: ph + h, pw: pw + w]


def _groups(x_channels: int, w: np.ndarray, groups: int) -> tuple[int, int]:
    """(Cig, Cog) after checking that the weight (C_out, Cig, kh, kw) fits the input and groups."""
    co, cig = w.shape[0], w.shape[1]
    assert groups >= 1 and co % groups == 0, f"conv2d: groups={groups} must divide the {co} output channels"
    assert x_channels == cig * groups, (f"conv2d: input has {x_channels} channels, weight expects {cig} per group "
                                        f"x {groups} groups")
    return cig, co // groups


def conv2d_forward(x: np.ndarray, w: np.ndarray, b: np.ndarray | None, stride: Sequence[int] | int,
                   padding: Sequence[int] | int, dilation: Sequence[int] | int = 1, groups: int = 1) -> np.ndarray:
    """x (N, C_in, H, W), w (C_out, C_in / groups, kh, kw), b (C_out,) or None -> y (N, C_out, Ho, Wo)."""
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, ci, h, wd = x.shape
    co, cig, kh, kw = w.shape
    _, cog = _groups(ci, w, groups)
    ho, wo = _out_size(h, kh, sh, ph, dh), _out_size(wd, kw, sw, pw, dw)
    xp = _pad(x, ph, pw)
    wg = w.reshape(groups, cog, cig, kh, kw)
    y = np.zeros((n, groups, cog, ho, wo), dtype=x.dtype)
    for i in range(kh):
        for j in range(kw):
            # (N, G, Cig, Ho, Wo) x (G, Cog, Cig) -> (N, G, Cog, Ho, Wo)
            win = _window(xp, i * dh, j * dw, ho, wo, sh, sw).reshape(n, groups, cig, ho, wo)
            y += np.einsum("ngchw,goc->ngohw", win, wg[:, :, :, i, j])
    y = y.reshape(n, co, ho, wo)
    if b is not None:
        y += b.reshape(1, co, 1, 1)
    return y


def conv2d_backward(x: np.ndarray, w: np.ndarray, dy: np.ndarray, stride: Sequence[int] | int,
                    padding: Sequence[int] | int, bias: bool = True, dilation: Sequence[int] | int = 1,
                    groups: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Gradients of conv2d: dx (N, C_in, H, W), dw (C_out, C_in / groups, kh, kw), db (C_out,) or None.

    Each tap (i, j) of the forward contributed ``window(i*dh, j*dw) @ w[:, :, i, j]`` within
    each group; its backward scatters ``dy @ w[:, :, i, j]`` back onto the same window of the
    padded input and correlates ``dy`` with that window for ``dw[:, :, i, j]``.
    """
    (sh, sw), (ph, pw), (dh, dw) = _pair(stride), _pair(padding), _pair(dilation)
    n, ci = x.shape[0], x.shape[1]
    co, cig, kh, kw = w.shape
    _, cog = _groups(ci, w, groups)
    ho, wo = dy.shape[2], dy.shape[3]
    xp = _pad(x, ph, pw)
    dxp = np.zeros_like(xp)
    wg = w.reshape(groups, cog, cig, kh, kw)
    dyg = dy.reshape(n, groups, cog, ho, wo)
    dwg = np.zeros_like(wg)
    for i in range(kh):
        for j in range(kw):
            win = _window(xp, i * dh, j * dw, ho, wo, sh, sw).reshape(n, groups, cig, ho, wo)
            # dw[:, :, i, j]: (N, G, Cog, Ho, Wo) x (N, G, Cig, Ho, Wo) -> (G, Cog, Cig)
            dwg[:, :, :, i, j] = np.einsum("ngohw,ngchw->goc", dyg, win)
            # dx window: (N, G, Cog, Ho, Wo) x (G, Cog, Cig) -> (N, G, Cig, Ho, Wo)
            dwin = np.einsum("ngohw,goc->ngchw", dyg, wg[:, :, :, i, j]).reshape(n, ci, ho, wo)
            _window(dxp, i * dh, j * dw, ho, wo, sh, sw)[...] += dwin
    db = dy.sum(axis=(0, 2, 3)) if bias else None
    return np.ascontiguousarray(_unpad(dxp, ph, pw)), dwg.reshape(w.shape), db
