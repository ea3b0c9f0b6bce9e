"""The broadcasting and slicing operations :func:`shardwise.from_torch` imports: products and
sums with broadcasting (squeeze-and-excitation's ``scale * input``, ``x + self.pos``),
``Tensor.expand`` (ViT's class token), slices (``self.pos[:, :T]``), ``chunk`` and ``split``
(ShuffleNet's channel split), torchvision's ``StochasticDepth`` and nearest upsampling.

A trainable parameter of the model read as an operand (``self.class_token``,
``self.pos_embedding``) becomes a ``parameter`` op, shared by its readers.  Constant tensors
(buffers, ``torch.ones``) as operands are refused: the graph has no constant op.
"""
from __future__ import annotations

from typing import Any

from shardwise.graph import Tensor
from shardwise.importers.common import Lazy
from shardwise.importers.torch.call import REQUIRED, Attr, Call, TorchOp, _dim, _show, is_torch_tensor
from shardwise.importers.torch.operands import operand


def _is_tensorish(v: Any) -> bool:
    """A computed tensor, a parameter, or a lazy value that is one (not attention scores, whose
    products are the softmax's scale)."""
    from shardwise.importers.torch.seq import Scores

    return isinstance(v, (Tensor, Attr)) or (isinstance(v, Lazy) and not isinstance(v, Scores))


def _mul(c: Call) -> Any:
    """a * b of two tensors (either a parameter of the model), broadcast as PyTorch does; a
    positive constant times attention scores stays the softmax's scale (seq._scale)."""
    from shardwise.importers.torch.seq import _scale

    a, b = c.inputs[0], c.inputs[1]
    if _is_tensorish(a) and _is_tensorish(b):
        return c.graph.mul(operand(c, a, "operand 0"), operand(c, b, "operand 1"), name=c.name)
    if is_torch_tensor(a) or is_torch_tensor(b):
        other = a if is_torch_tensor(a) else b
        if other.dim() > 0:
            raise c.error(f"multiplying by {_show(other)} is not supported (constant tensors: the graph has no "
                          f"constant op)")
    return _scale(False)(c)


def _expand(c: Call) -> Tensor:
    """``x.expand(*sizes)``: of a computed tensor or a parameter (``self.class_token.expand(n, -1, -1)``)."""
    x = operand(c, c.inputs[0], "the tensor expanded")
    sizes = c.attrs["size"]
    if not isinstance(sizes, (tuple, list)) or not all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
        raise c.error(f"expand{sizes!r} is not supported (sizes must be ints fixed by the example inputs)")
    if tuple(sizes) == x.shape or all(s == -1 for s in sizes) and len(sizes) == len(x.shape):
        return x
    return c.graph.expand(x, tuple(sizes), name=c.name)


def _split_sizes(c: Call, total: int, sizes: Any) -> list[int]:
    if isinstance(sizes, int) and not isinstance(sizes, bool):
        return [min(sizes, total - s) for s in range(0, total, sizes)]
    if isinstance(sizes, (tuple, list)) and all(isinstance(s, int) and not isinstance(s, bool) for s in sizes):
        return list(sizes)
    raise c.error(f"split sizes {sizes!r} are not supported (an int or a list of ints)")


def _pieces(c: Call, x: Tensor, dim: int, sizes: list[int]) -> tuple[Tensor, ...]:
    if dim == 0:
        raise c.error("splitting the batch dimension (dim=0) is not supported")
    if sum(sizes) != x.shape[dim]:
        raise c.error(f"split sizes {sizes} do not add up to dimension {dim} of {x.shape}")
    out, start = [], 0
    for k, s in enumerate(sizes):
        out.append(c.graph.slice(x, dim, start, start + s, name=f"{c.name}.{k}"))
        start += s
    return tuple(out)


def _chunk(c: Call) -> tuple[Tensor, ...]:
    """``x.chunk(chunks, dim)``: PyTorch's pieces of ceil(size / chunks), each a ``slice`` op."""
    x = operand(c, c.inputs[0], "the tensor chunked")
    dim = _dim(c, c.attrs["dim"], len(x.shape))
    chunks = c.attrs["chunks"]
    if isinstance(chunks, bool) or not isinstance(chunks, int) or chunks < 1:
        raise c.error(f"chunks={chunks!r} is not supported (a positive int)")
    return _pieces(c, x, dim, _split_sizes(c, x.shape[dim], -(-x.shape[dim] // chunks)))


def _split(c: Call) -> tuple[Tensor, ...]:
    """``torch.split(x, sizes, dim)``: pieces of ``sizes`` (an int: of that size, the last one
    smaller), each a ``slice`` op."""
    x = operand(c, c.inputs[0], "the tensor split")
    dim = _dim(c, c.attrs["dim"], len(x.shape))
    return _pieces(c, x, dim, _split_sizes(c, x.shape[dim], c.attrs["split_size_or_sections"]))


def _stochastic_depth(c: Call) -> Tensor:
    """torchvision.ops.StochasticDepth: shardwise's stochastic_depth op (the identity in eval
    mode), or nothing when p=0.  Its draws are shardwise's (dropout's), not PyTorch's stream."""
    m = c.module
    p = float(m.p)
    if not 0.0 <= p < 1.0:
        raise c.error(f"p={m.p!r} is not supported (a number in [0, 1))")
    x = c.tensor(0)
    if p == 0.0:
        return x
    return c.graph.stochastic_depth(x, p, mode=m.mode, name=c.name)


def _upsample(c: Call) -> Tensor:
    """nn.Upsample / F.interpolate, mode "nearest" or "bilinear" (align_corners=False) with an
    integer scale factor (or a size that is an integer multiple of the input's)."""
    x = c.tensor(0, rank=4)
    a = c.attrs
    if a["mode"] not in ("nearest", "bilinear"):
        raise c.error(f"mode={a['mode']!r} is not supported; only 'nearest' and 'bilinear' with integer scale factors")
    if a["mode"] == "bilinear" and a["align_corners"]:
        raise c.error("align_corners=True is not supported (bilinear with align_corners=False only)")
    if a.get("recompute_scale_factor") or a.get("antialias"):
        raise c.error("recompute_scale_factor and antialias are not supported")
    size, scale = a["size"], a["scale_factor"]
    if size is not None:
        size = (size, size) if isinstance(size, int) else tuple(size)
        if len(size) != 2 or any(s % h for s, h in zip(size, x.shape[2:])):
            raise c.error(f"size={a['size']!r} of a {x.shape[2]}x{x.shape[3]} input is not supported (an integer "
                          f"multiple of the input size)")
        scale = (size[0] // x.shape[2], size[1] // x.shape[3])
    elif scale is not None:
        scale = (scale, scale) if isinstance(scale, (int, float)) else tuple(scale)
        if len(scale) != 2 or any(float(s) != int(s) or s < 1 for s in scale):
            raise c.error(f"scale_factor={a['scale_factor']!r} is not supported (positive integer factors)")
        scale = (int(scale[0]), int(scale[1]))
    else:
        raise c.error("give size or scale_factor")
    if scale == (1, 1):
        return x
    if a["mode"] == "bilinear":
        return c.graph.upsample_bilinear(x, scale, name=c.name)
    return c.graph.upsample_nearest(x, scale, name=c.name)


_F = "torch.nn.functional."
_PARAM_DOC = "either operand may be a trainable parameter of the model (a `parameter` op); constant tensors are refused"

TORCH_BCAST_OPS: tuple[TorchOp, ...] = (
    TorchOp("mul", _mul, inputs=2, functions=("operator.mul", "torch.mul"), methods=("mul",),
            op="`mul`; (the scale of attention scores)",
            doc="two tensors broadcast as PyTorch does (`scale * input` of squeeze-and-excitation); " + _PARAM_DOC
                + "; a positive constant times attention scores (a batched `matmul`'s result) read by a softmax over "
                  "the keys: the softmax's `scale`"),
    TorchOp("expand", _expand, params=(("size", REQUIRED),), methods=("expand",), variadic=True, op="`expand`",
            doc="sizes fixed by the example inputs, -1 keeps a size (`self.class_token.expand(n, -1, -1)`); "
                "of a computed tensor or a parameter"),
    TorchOp("chunk", _chunk, params=(("chunks", REQUIRED), ("dim", 0)), functions=("torch.chunk",),
            methods=("chunk",), op="`slice` per piece", doc="any dimension but the batch"),
    TorchOp("split", _split, params=(("split_size_or_sections", REQUIRED), ("dim", 0)), functions=("torch.split",),
            methods=("split",), op="`slice` per piece", doc="any dimension but the batch"),
    TorchOp("stochastic_depth", _stochastic_depth, modules=("torchvision.ops.StochasticDepth",),
            op="`stochastic_depth`",
            doc="`mode` \"row\" or \"batch\", `0 <= p < 1` (none for `p=0`); the identity in eval mode; the draws "
                "are shardwise's (dropout's), not PyTorch's random stream"),
    TorchOp("upsample", _upsample, params=(("size", None), ("scale_factor", None), ("mode", "nearest"),
                                           ("align_corners", None), ("recompute_scale_factor", None),
                                           ("antialias", False)),
            modules=("Upsample",), functions=(_F + "interpolate",), op="`upsample_nearest`, `upsample_bilinear`",
            doc="`mode=\"nearest\"`, or `\"bilinear\"` with `align_corners=False`, by integer scale factors (or sizes "
                "that are integer multiples)"),
)
"""The broadcasting and slicing operations, part of :data:`~shardwise.importers.torch.ops.TORCH_OPS`."""
