"""The ops of sequence models (transformers), each described once as an :class:`OpDesc`.

Shapes are PyTorch's: activations (N, T, D) or any leading dimensions before the
feature dimension, attention scores (N, H, T, T), token ids (N, T).  As for the
ops of :mod:`shardwise.ops.builtin`, the planner derives splits, regions, transfers and
FLOPs from these index maps alone; the kernels of ``reshape`` and ``permute``
even evaluate the same maps (csrc/cpu/indexmap.c).

    layer_norm   out[..., d]    = (x[..., d] - mean_k x[..., k]) / std_k * w[d] + b[d]
    embedding    out[..., d]    = Sum(v) [ids[...] == v] * W[v, d]    (a one-hot product: v is additive,
                                                                     so the vocabulary may be split)
    softmax_dim  out[.., i, ..] = exp(s x[.., i, ..]) / Sum(k) exp(s x[.., k, ..])   (optional causal mask)
    matmul       out[b.., m, n] = Sum(k) op(a)[b.., m, k] * op(b)[b.., k, n]          (op: optional transpose)
    reshape      out[o..]       = x[in(o..)]    (row-major order kept; groups of dimensions split or merged)
    permute      out[o..]       = x[o[inverse(dims)]]
    rotary       out[.., t, j]  = x[.., t, j] cos(t f_j) + rotate_half(x)[.., t, j] sin(t f_j)   (reads the row)
"""
from __future__ import annotations

from dataclasses import replace
from math import prod
from typing import Sequence

from shardwise.errors import ShapeError
from shardwise.ops.desc import DATA, WEIGHT, IndexExpr, InputDesc, OpDesc, affine, var

# FLOPs per output element the cost model charges (forward): layer norm subtracts the mean,
# scales by the inverse deviation, then the weight and bias (plus its share of the two sums);
# a softmax element costs an exp, a subtraction, a division and its share of the sums.
LAYER_NORM_FLOPS = 8.0
SOFTMAX_FLOPS = 5.0
# a rotary element: two products and a sum (the angle's cos and sin counted as two more)
ROTARY_FLOPS = 5.0


def _axis(axis: int, rank: int, what: str) -> int:
    if isinstance(axis, bool) or not isinstance(axis, int):
        raise ShapeError(f"{what}: dim must be an int, got {axis!r}")
    if not -rank <= axis < rank:
        raise ShapeError(f"{what}: dim {axis} out of range for rank {rank}")
    return axis % rank


def layer_norm(x: tuple[int, ...]) -> OpDesc:
    """Normalization over the last dimension with weight and bias (``torch.nn.LayerNorm(D)``).

    Iteration (x's dims | k): every output reads its whole row ``x[..., k]``, so the
    leading dimensions split freely and a split of ``d`` recomputes the row's statistics
    on every worker (as the loss's class split does)."""
    r = len(x)
    d = x[-1]
    nv = r + 1
    row = tuple(var(nv, i) for i in range(r - 1)) + (var(nv, r),)
    inputs = (InputDesc(DATA, x, row), InputDesc(WEIGHT, (d,), (var(nv, r - 1),)),
              InputDesc(WEIGHT, (d,), (var(nv, r - 1),), bias=True))
    return OpDesc(extents=x + (d,), out_rank=r, inputs=inputs, flops_per_output=LAYER_NORM_FLOPS,
                  reductions=("k",))


def rms_norm(x: tuple[int, ...]) -> OpDesc:
    """RMS normalization over the last dimension with a weight and no bias (``torch.nn.RMSNorm(D)``):
    layer_norm's description without the bias (every output reads its whole row)."""
    desc = layer_norm(x)
    return replace(desc, inputs=desc.inputs[:2])


def rotary(x: tuple[int, ...]) -> OpDesc:
    """Rotary position embedding of (N, .., T, Dh) along Dh (even), at the position t of
    dimension -2 (RoPE in the rotate-half layout: Llama's).

    Iteration (x's dims | k): every output reads its whole row ``x[..., k]`` (the rotation
    pairs column j with j +- Dh/2), as layer_norm's, so the leading dimensions (heads,
    positions) split freely and a split of Dh reads whole rows."""
    r = len(x)
    if r < 3 or x[-1] % 2:
        raise ShapeError(f"rotary expects (N, .., T, Dh) with an even Dh, got shape {x}")
    nv = r + 1
    row = tuple(var(nv, i) for i in range(r - 1)) + (var(nv, r),)
    return OpDesc(extents=x + (x[-1],), out_rank=r, inputs=(InputDesc(DATA, x, row),),
                  flops_per_output=ROTARY_FLOPS, reductions=("k",))


def embedding(ids: tuple[int, ...], vocab: int, dim: int, table_input: bool = False) -> OpDesc:
    """out[..., d] = W[ids[...], d] (``torch.nn.Embedding(vocab, dim)``), described as the
    product of a one-hot row and W over the additive vocabulary variable ``v``: a split of
    ``v`` is Megatron's vocabulary-parallel embedding (each worker looks up the ids in its
    rows, zeros elsewhere, and the partial outputs add up).  The FLOPs are a copy per
    output, not the product's.  ``table_input``: W is a data input (a ``parameter`` op's output,
    shared with other readers: tied embeddings), not the op's own weight; the index maps are the same."""
    if vocab <= 0 or dim <= 0:
        raise ShapeError(f"embedding: vocab and dim must be positive, got {vocab}, {dim}")
    r = len(ids) + 1
    nv = r + 1
    inputs = (InputDesc(DATA, ids, tuple(var(nv, i) for i in range(r - 1))),
              InputDesc(DATA if table_input else WEIGHT, (vocab, dim), (var(nv, r), var(nv, r - 1))))
    return OpDesc(extents=ids + (dim, vocab), out_rank=r, inputs=inputs, flops_per_output=1.0,
                  reductions=("v",), additive=(r,))


def softmax_dim(x: tuple[int, ...], dim: int, causal: bool) -> OpDesc:
    """Softmax over dimension ``dim`` (``torch.softmax(x, dim)``), optionally of ``scale * x``
    with a causal mask (attention scores (..., T_q, T_k): key j > query i gets no weight).
    Iteration (x's dims | k): every output reads its whole line along ``dim``."""
    r = len(x)
    a = _axis(dim, r, "softmax_dim")
    if causal and (r < 2 or a != r - 1):
        raise ShapeError(f"softmax_dim: a causal mask needs scores (..., T_q, T_k) and dim=-1, got dim {dim} "
                         f"of shape {x}")
    nv = r + 1
    exprs = tuple(var(nv, r) if i == a else var(nv, i) for i in range(r))
    return OpDesc(extents=x + (x[a],), out_rank=r, inputs=(InputDesc(DATA, x, exprs),),
                  flops_per_output=SOFTMAX_FLOPS + 1.0, reductions=("k",))


def matmul(a: tuple[int, ...], b: tuple[int, ...], transpose_a: bool = False,
           transpose_b: bool = False) -> OpDesc:
    """Batched matrix product over equal leading dimensions (``torch.matmul`` with
    ``a.transpose(-2, -1)`` / ``b.transpose(-2, -1)`` when asked): (..., M, K) @ (..., K, N).
    Iteration (batch.., m, n | k); k is additive (partition-n-reduce)."""
    if len(a) < 2 or len(a) != len(b):
        raise ShapeError(f"matmul expects two operands of one rank >= 2, got {a} and {b}")
    if a[:-2] != b[:-2]:
        raise ShapeError(f"matmul: batch dimensions differ: {a[:-2]} vs {b[:-2]}")
    m, k = (a[-1], a[-2]) if transpose_a else (a[-2], a[-1])
    kb, n = (b[-1], b[-2]) if transpose_b else (b[-2], b[-1])
    if k != kb:
        raise ShapeError(f"matmul: inner dimensions differ: {a}{'^T' if transpose_a else ''} @ "
                         f"{b}{'^T' if transpose_b else ''}")
    r = len(a)
    nv = r + 1   # batch dims, m (r-2), n (r-1) | k (r)
    batch = tuple(var(nv, i) for i in range(r - 2))
    va, vk = var(nv, r - 2), var(nv, r)
    vb = var(nv, r - 1)
    ea = batch + ((vk, va) if transpose_a else (va, vk))
    eb = batch + ((vb, vk) if transpose_b else (vk, vb))
    return OpDesc(extents=a[:-2] + (m, n, k), out_rank=r, inputs=(InputDesc(DATA, a, ea), InputDesc(DATA, b, eb)),
                  flops_per_point=2.0, reductions=("k",), additive=(r,))


def reshape_groups(src: tuple[int, ...], dst: tuple[int, ...]) -> list[tuple[list[int], list[int]]]:
    """Pair the dimensions of ``src`` and ``dst`` into consecutive groups of equal products:
    ([src dims], [dst dims]); size-1 dimensions join the group before them."""
    if prod(src) != prod(dst):
        raise ShapeError(f"reshape: cannot reshape {src} ({prod(src)} elements) to {dst} ({prod(dst)})")
    groups: list[tuple[list[int], list[int]]] = []
    i = j = 0
    while i < len(src) or j < len(dst):
        gs, gd = [], []
        ps = pd = 1
        if i < len(src):
            gs.append(i)
            ps *= src[i]
            i += 1
        if j < len(dst):
            gd.append(j)
            pd *= dst[j]
            j += 1
        while ps != pd:   # the products are equal overall, so the smaller side has dims left
            if ps < pd:
                gs.append(i)
                ps *= src[i]
                i += 1
            else:
                gd.append(j)
                pd *= dst[j]
                j += 1
        while i < len(src) and src[i] == 1:
            gs.append(i)
            i += 1
        while j < len(dst) and dst[j] == 1:
            gd.append(j)
            j += 1
        groups.append((gs, gd))
    return groups


def reshape(x: tuple[int, ...], shape: tuple[int, ...]) -> OpDesc:
    """``x.reshape(shape)`` (row-major order).  Each group of dimensions either splits one
    dimension (an affine map: in = h * Dh + e, so a split of h reads a contiguous block) or
    merges several into one (quasi-affine: in = (f // s) % size, whose split granules keep
    whole groups, as flatten's); a group mixing both is refused (reshape in two steps)."""
    r = len(shape)
    zero = IndexExpr((0,) * r)
    exprs: list[IndexExpr] = [zero] * len(x)
    for gs, gd in reshape_groups(x, shape):
        big_s = [d for d in gs if x[d] != 1]
        big_d = [d for d in gd if shape[d] != 1]
        if len(big_s) > 1 and len(big_d) > 1:
            raise ShapeError(f"reshape {x} -> {shape}: dimensions {[x[d] for d in gs]} become "
                             f"{[shape[d] for d in gd]}; split or merge them in two steps")
        if len(big_s) == 1:   # one source dim = the destination dims with their row-major strides
            terms, stride = {}, 1
            for d in reversed(big_d):
                terms[d] = stride
                stride *= shape[d]
            exprs[big_s[0]] = affine(r, terms)
        elif len(big_s) > 1:   # several source dims merged into f: x[..., (f // stride) % size, ...]
            (f,) = big_d
            stride = shape[f]
            for d in big_s:
                stride //= x[d]
                mod = x[d] if stride * x[d] != shape[f] else 0
                exprs[d] = IndexExpr(tuple(1 if v == f else 0 for v in range(r)), 0, stride, mod)
    return OpDesc(extents=shape, out_rank=r, inputs=(InputDesc(DATA, x, tuple(exprs)),))


def permute(x: tuple[int, ...], dims: Sequence[int]) -> OpDesc:
    """``x.permute(dims)``: out dimension i is x's dimension dims[i], so x's dimension dims[i]
    is indexed by output variable i."""
    r = len(x)
    if sorted(dims) != list(range(r)):
        raise ShapeError(f"permute: dims {tuple(dims)} are not a permutation of 0..{r - 1}")
    exprs: list[IndexExpr] = [var(r, 0)] * r
    for i, d in enumerate(dims):
        exprs[d] = var(r, i)
    return OpDesc(extents=tuple(x[d] for d in dims), out_rank=r, inputs=(InputDesc(DATA, x, tuple(exprs)),))


def select(x: tuple[int, ...], dim: int, index: int) -> OpDesc:
    """``x.select(dim, index)`` (``x[:, index]`` for dim 1): x without dimension ``dim``, read at
    ``index`` (an RNN's timestep t of an (N, T, E) sequence).  x's dimension ``dim`` is the
    constant ``index`` (an offset without variables), the others follow the output's in order;
    the kernels are reshape's (they evaluate this map), the gradient is zero elsewhere."""
    r = len(x)
    a = _axis(dim, r, "select")
    if a == 0:
        raise ShapeError(f"select: dim 0 is the batch dimension of {x}; select another")
    if r < 2 or isinstance(index, bool) or not isinstance(index, int) or not 0 <= index < x[a]:
        raise ShapeError(f"select: index {index!r} is out of range for dimension {dim} of {x}")
    ro = r - 1
    exprs = tuple(IndexExpr((0,) * ro, index) if d == a else var(ro, d if d < a else d - 1) for d in range(r))
    return OpDesc(extents=x[:a] + x[a + 1:], out_rank=ro, inputs=(InputDesc(DATA, x, exprs),))


def add(a: tuple[int, ...], b: tuple[int, ...]) -> OpDesc:
    """a + b where b's shape is a's or a trailing part of it (broadcast over a's leading
    dimensions, as a learned position table (T, D) added to (N, T, D) tokens)."""
    r, rb = len(a), len(b)
    if rb > r or a[r - rb:] != b:
        raise ShapeError(f"add: shapes {a} and {b} differ (the second may only be a trailing part of the first)")
    inputs = (InputDesc(DATA, a, tuple(var(r, i) for i in range(r))),
              InputDesc(DATA, b, tuple(var(r, i) for i in range(r - rb, r))))
    return OpDesc(extents=a, out_rank=r, inputs=inputs, flops_per_output=1.0)


def softmax_loss(x: tuple[int, ...]) -> OpDesc:
    """The loss op (softmax + cross-entropy) over the last dimension of (N, C) or (N, T, C)
    logits: out[..., c] = exp(x[..., c]) / Sum(k) exp(x[..., k]); every output reads its row."""
    if len(x) < 2:
        raise ShapeError(f"softmax expects rank >= 2 logits (N, ..., classes), got shape {x}")
    r = len(x)
    nv = r + 1
    data = InputDesc(DATA, x, tuple(var(nv, i) for i in range(r - 1)) + (var(nv, r),))
    return OpDesc(extents=x + (x[-1],), out_rank=r, inputs=(data,), flops_per_output=SOFTMAX_FLOPS,
                  reductions=("k",))
