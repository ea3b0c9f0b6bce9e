"""Graph builders of the broadcasting and slicing ops of vision models, mixed into
:class:`~shardwise.graph.Graph`.

    s = g.sigmoid(g.conv2d(squeezed, 16, kernel=1))       # (N, 16, 1, 1)
    y = g.mul(s, x)                                        # (N, 16, H, W): squeeze-and-excitation
    tok = g.expand(g.parameter((1, 1, 32)), (8, 1, 32))    # ViT's class token for every sample
    a, b = g.chunk(x, 2, dim=1)                            # ShuffleNet's channel split

Each builder validates its inputs, derives the op's description (:mod:`shardwise.ops.bcast`)
and adds the op; names and arguments follow PyTorch's (``torch.mul``, ``Tensor.expand``,
``Tensor.chunk``, ``torch.split``, ``torchvision.ops.stochastic_depth``, ``nn.Upsample``).
"""
from __future__ import annotations

import hashlib
import numbers
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from shardwise.errors import GraphError, ShapeError
from shardwise.ops import bcast as ops_bcast
from shardwise.shapes import check_shape

if TYPE_CHECKING:
    from shardwise.graph import Op, Tensor
    from shardwise.ops.desc import OpDesc

STOCHASTIC_DEPTH_MODES = ("row", "batch")   # torchvision.ops.StochasticDepth's modes


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ShapeError(f"{what} must be an int, got {value!r}")
    return int(value)


def _dim(dim: Any, rank: int, what: str) -> int:
    d = _int(dim, f"{what} dim")
    if not -rank <= d < rank:
        raise ShapeError(f"{what}: dim {dim} out of range for rank {rank}")
    return d % rank


def broadcasts(a: Sequence[int], b: Sequence[int]) -> bool:
    """Whether shapes a and b broadcast (NumPy's rule)."""
    try:
        ops_bcast.broadcast_shape(tuple(a), tuple(b), "broadcast")
    except ShapeError:
        return False
    return True


class BroadcastBuilders:
    """The builders of mul, broadcast_add, expand, slice (and chunk, split), stochastic_depth
    and upsample_nearest."""

    ops: list["Op"]

    # provided by Graph
    def _tensor(self, t: Any, what: str = "input") -> "Tensor":  # pragma: no cover - Graph's
        raise NotImplementedError

    def _add(self, op_kind: str, inputs: Sequence["Tensor"], desc: "OpDesc", name: str | None,
             **attrs: Any) -> "Tensor":  # pragma: no cover - Graph's
        raise NotImplementedError

    def mul(self, a: "Tensor", b: "Tensor", name: str | None = None) -> "Tensor":
        """Element-wise product with NumPy's broadcasting (``torch.mul``, ``a * b``): a
        squeeze-and-excitation scale (N, C, 1, 1) times its input (N, C, H, W), a gate, a
        learned per-channel table."""
        a, b = self._tensor(a, "first input"), self._tensor(b, "second input")
        return self._add("mul", [a, b], ops_bcast.mul(a.shape, b.shape), name)

    def broadcast_add(self, a: "Tensor", b: "Tensor", name: str | None = None) -> "Tensor":
        """a + b with NumPy's broadcasting ((N, T, D) + (1, T, D): a learned position table
        with its batch dimension of 1).  :meth:`add` builds this op by itself where shapes are
        neither equal nor trailing parts of each other."""
        a, b = self._tensor(a, "first input"), self._tensor(b, "second input")
        return self._add("broadcast_add", [a, b], ops_bcast.broadcast_add(a.shape, b.shape), name)

    def expand(self, x: "Tensor", shape: Sequence[int], name: str | None = None) -> "Tensor":
        """``x.expand(shape)``: dimensions of size 1 (and missing leading ones) repeated; -1
        keeps x's size.  The gradient sums over the repeats."""
        x = self._tensor(x)
        try:
            dims = [_int(d, "expand size") for d in shape]
        except TypeError:
            raise ShapeError(f"expand shape must be a sequence of ints, got {shape!r}") from None
        lead = len(dims) - len(x.shape)
        if lead < 0:
            raise ShapeError(f"expand: cannot expand {x.shape} to the lower rank {tuple(dims)}")
        dims = [x.shape[d - lead] if s == -1 and d >= lead else s for d, s in enumerate(dims)]
        out = check_shape(dims, "expand shape")
        return self._add("expand", [x], ops_bcast.expand(x.shape, out), name, shape=out)

    def slice(self, x: "Tensor", dim: int, start: int, stop: int | None = None, step: int = 1,
              name: str | None = None) -> "Tensor":
        """``x[.., start:stop:step, ..]`` along ``dim`` (not the batch, except of a ``parameter``
        op's output: the first T rows of a table of learned positions), Python's rules for
        negative and too large bounds; the result must not be empty."""
        x = self._tensor(x)
        r = len(x.shape)
        d = _dim(dim, r, "slice")
        if d == 0 and self.ops[x.op].kind != "parameter":   # a parameter's rows are no samples
            raise ShapeError(f"slice: dim 0 is the batch dimension of {x.shape}; slice another")
        step = _int(step, "slice step")
        if step < 1:
            raise ShapeError(f"slice: step must be >= 1, got {step}")
        lo, hi, _ = slice(_int(start, "slice start"), None if stop is None else _int(stop, "slice stop"),
                          step).indices(x.shape[d])
        if hi <= lo:
            raise ShapeError(f"slice: [{start}:{stop}:{step}] of dimension {d} of {x.shape} is empty")
        if (lo, hi, step) == (0, x.shape[d], 1):
            return x   # the whole dimension: no op
        return self._add("slice", [x], ops_bcast.slice_(x.shape, d, lo, hi, step), name, dim=d, start=lo,
                         stop=hi, step=step)

    def split(self, x: "Tensor", sizes: int | Sequence[int], dim: int = 1, name: str | None = None) -> list["Tensor"]:
        """``torch.split(x, sizes, dim)``: pieces of ``sizes`` along ``dim`` (an int: pieces of
        that size, the last one smaller), each a :meth:`slice` named ``<name>.<k>``."""
        x = self._tensor(x)
        d = _dim(dim, len(x.shape), "split")
        total = x.shape[d]
        if isinstance(sizes, numbers.Integral) and not isinstance(sizes, bool):
            size = int(sizes)
            if size < 1:
                raise ShapeError(f"split: size must be positive, got {size}")
            parts = [min(size, total - s) for s in range(0, total, size)]
        else:
            parts = [_int(s, "split size") for s in sizes]
            if sum(parts) != total or min(parts, default=0) < 1:
                raise ShapeError(f"split: sizes {tuple(parts)} do not add up to dimension {d} of {x.shape}")
        out, start = [], 0
        for k, s in enumerate(parts):
            out.append(self.slice(x, d, start, start + s, name=f"{name}.{k}" if name else None))
            start += s
        return out

    def chunk(self, x: "Tensor", chunks: int, dim: int = 1, name: str | None = None) -> list["Tensor"]:
        """``x.chunk(chunks, dim)``: PyTorch's pieces of ceil(size / chunks) along ``dim``."""
        x = self._tensor(x)
        chunks = _int(chunks, "chunk chunks")
        if chunks < 1:
            raise ShapeError(f"chunk: chunks must be positive, got {chunks}")
        d = _dim(dim, len(x.shape), "chunk")
        return self.split(x, -(-x.shape[d] // chunks), d, name=name)

    def stochastic_depth(self, x: "Tensor", p: float, mode: str = "row", seed: int | None = None,
                         name: str | None = None) -> "Tensor":
        """``torchvision.ops.stochastic_depth(x, p, mode)``: in train mode each sample ("row")
        or the whole minibatch ("batch") is zeroed with probability ``p``, the rest scaled by
        1 / (1 - p); in eval mode the identity.  The draws are dropout's: a function of
        ``seed``, the step and the sample's index, so every plan drops the same samples.
        ``seed`` defaults to one derived from the op's name."""
        x = self._tensor(x)
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not 0.0 <= p < 1.0 or np.float32(p) >= 1.0:
            raise GraphError(f"stochastic_depth p must be a number in [0, 1), got {p!r}")
        if mode not in STOCHASTIC_DEPTH_MODES:
            raise GraphError(f"stochastic_depth mode must be one of {STOCHASTIC_DEPTH_MODES}, got {mode!r}")
        if seed is not None and (isinstance(seed, bool) or not isinstance(seed, numbers.Integral)
                                 or not 0 <= seed < 2**64):
            raise GraphError(f"stochastic_depth seed must be an int in [0, 2**64), got {seed!r}")
        t = self._add("stochastic_depth", [x], ops_bcast.stochastic_depth(x.shape), name, p=float(p), mode=mode)
        op = self.ops[t.op]
        # dropout's default (shardwise.graph): the first 8 bytes of the SHA-256 of the op's name
        op.attrs["seed"] = int(seed) if seed is not None else int.from_bytes(
            hashlib.sha256(op.name.encode("utf-8")).digest()[:8], "little")
        return t

    def upsample_nearest(self, x: "Tensor", scale: int | Sequence[int], name: str | None = None) -> "Tensor":
        """Nearest-neighbour upsampling of (N, C, H, W) by integer factors (``nn.Upsample(
        scale_factor=s)``, ``F.interpolate(x, scale_factor=s, mode="nearest")``)."""
        x = self._tensor(x)
        sh, sw = (scale, scale) if isinstance(scale, numbers.Integral) else tuple(scale)
        sh, sw = _int(sh, "upsample scale"), _int(sw, "upsample scale")
        return self._add("upsample_nearest", [x], ops_bcast.upsample_nearest(x.shape, (sh, sw)), name,
                         scale=(sh, sw))

    def adaptive_avg_pool2d(self, x: "Tensor", output_size: int | Sequence[int], name: str | None = None) -> "Tensor":
        """``nn.AdaptiveAvgPool2d(output_size)`` of (N, C, H, W), any sizes: PyTorch's windows
        [floor(i H / OH), ceil((i + 1) H / OH)), overlapping where the output is larger (alexnet's
        and vgg's 2x2 -> 7x7 on small images).  Where OH divides H, ``pool2d`` is the same op."""
        x = self._tensor(x)
        oh, ow = (output_size, output_size) if isinstance(output_size, numbers.Integral) else tuple(output_size)
        out = (_int(oh, "adaptive_avg_pool2d output size"), _int(ow, "adaptive_avg_pool2d output size"))
        return self._add("adaptive_avg_pool2d", [x], ops_bcast.adaptive_avg_pool2d(x.shape, out), name,
                         output_size=out)

    def upsample_bilinear(self, x: "Tensor", scale: int | Sequence[int], name: str | None = None) -> "Tensor":
        """Bilinear upsampling of (N, C, H, W) by integer factors with ``align_corners=False``
        (``nn.Upsample(scale_factor=s, mode="bilinear")``, ``F.interpolate(..., mode="bilinear")``)."""
        x = self._tensor(x)
        sh, sw = (scale, scale) if isinstance(scale, numbers.Integral) else tuple(scale)
        sh, sw = _int(sh, "upsample scale"), _int(sw, "upsample scale")
        return self._add("upsample_bilinear", [x], ops_bcast.upsample_bilinear(x.shape, (sh, sw)), name,
                         scale=(sh, sw))
