"""The broadcasting and slicing ops of vision models, each described once as an :class:`OpDesc`.

Shapes broadcast as NumPy's and PyTorch's do: ranks aligned at the right, a dimension of
size 1 (or a missing leading one) read at index 0 for every output index, which the index
map says with an expression without variables (a coefficient 0: the region any output box
reads there is index 0 alone, and the gradient is the sum over the broadcast dimension).

    mul               out[o] = a[map_a(o)] * b[map_b(o)]     (squeeze-and-excitation: (N, C, 1, 1) * (N, C, H, W))
    broadcast_add     out[o] = a[map_a(o)] + b[map_b(o)]     ((N, T, D) + (1, T, D): a learned position table)
    expand            out[o] = x[map(o)]                     (a class token (1, 1, D) -> (N, 1, D))
    slice             out[.., i, ..] = x[.., start + i * step, ..]   (chunk, split, pos[:, :T])
    stochastic_depth  out[n, ..] = x[n, ..] * keep(n) / (1 - p)      (torchvision's StochasticDepth)
    upsample_nearest  out[n, c, y, x] = in[n, c, y // sh, x // sw]   (nn.Upsample(scale_factor=s))

The CPU kernels of mul, broadcast_add, expand and upsample_nearest evaluate these very maps
(csrc/cpu/bcast.c), slice's are reshape's (csrc/cpu/indexmap.c).
"""
from __future__ import annotations

from shardwise.errors import ShapeError
from shardwise.ops.desc import DATA, IndexExpr, InputDesc, OpDesc, var

# FLOPs per output element: a product or a sum; stochastic depth a (per-sample) draw and a product
STOCHASTIC_DEPTH_FLOPS = 1.0


def broadcast_shape(a: tuple[int, ...], b: tuple[int, ...], what: str) -> tuple[int, ...]:
    """NumPy's broadcast of two shapes (ranks aligned at the right, size 1 stretched)."""
    r = max(len(a), len(b))
    pa, pb = (1,) * (r - len(a)) + a, (1,) * (r - len(b)) + b
    out = []
    for x, y in zip(pa, pb):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"{what}: shapes {a} and {b} do not broadcast")
        out.append(max(x, y))
    return tuple(out)


def broadcast_exprs(x: tuple[int, ...], out: tuple[int, ...]) -> tuple[IndexExpr, ...]:
    """x's index map inside ``out`` (x broadcast to it): x's dimension d is out's dimension
    d + (len(out) - len(x)), read at its own index, or at 0 when x's size is 1 there."""
    r, lead = len(out), len(out) - len(x)
    zero = IndexExpr((0,) * r)
    return tuple(zero if x[d] == 1 and out[d + lead] != 1 else var(r, d + lead) for d in range(len(x)))


def _binary(a: tuple[int, ...], b: tuple[int, ...], what: str) -> OpDesc:
    out = broadcast_shape(a, b, what)
    inputs = (InputDesc(DATA, a, broadcast_exprs(a, out)), InputDesc(DATA, b, broadcast_exprs(b, out)))
    return OpDesc(extents=out, out_rank=len(out), inputs=inputs, flops_per_output=1.0)


def mul(a: tuple[int, ...], b: tuple[int, ...]) -> OpDesc:
    """a * b with broadcasting (``torch.mul``), either operand broadcast."""
    return _binary(a, b, "mul")


def broadcast_add(a: tuple[int, ...], b: tuple[int, ...]) -> OpDesc:
    """a + b with broadcasting (``torch.add``) where ``add``'s equal or trailing shapes do not
    hold (either operand broadcast)."""
    return _binary(a, b, "broadcast_add")


def expand(x: tuple[int, ...], shape: tuple[int, ...]) -> OpDesc:
    """``x.expand(shape)``: x's dimensions of size 1 (and missing leading ones) repeated."""
    if len(shape) < len(x):
        raise ShapeError(f"expand: cannot expand {x} to the lower rank {shape}")
    lead = len(shape) - len(x)
    for d, s in enumerate(x):
        if s != shape[d + lead] and s != 1:
            raise ShapeError(f"expand: dimension {d} of {x} (size {s}) cannot become {shape[d + lead]}")
    return OpDesc(extents=shape, out_rank=len(shape), inputs=(InputDesc(DATA, x, broadcast_exprs(x, shape)),))


def slice_(x: tuple[int, ...], dim: int, start: int, stop: int, step: int = 1) -> OpDesc:
    """``x[.., start:stop:step, ..]`` along ``dim`` (0 <= start < stop <= x[dim], step >= 1):
    the output's index i reads x's index start + i * step there (an affine map, so any split
    of the output reads a contiguous block of x, or a strided one)."""
    r = len(x)
    if not 0 <= dim < r:
        raise ShapeError(f"slice: dim {dim} out of range for rank {r}")
    if step < 1 or not 0 <= start < stop <= x[dim]:
        raise ShapeError(f"slice: [{start}:{stop}:{step}] of dimension {dim} of {x} is empty or out of range")
    size = (stop - start + step - 1) // step
    out = x[:dim] + (size,) + x[dim + 1:]
    exprs = tuple(var(r, d, step, start) if d == dim else var(r, d) for d in range(r))
    return OpDesc(extents=out, out_rank=r, inputs=(InputDesc(DATA, x, exprs),))


def stochastic_depth(x: tuple[int, ...]) -> OpDesc:
    """out[n, ..] = x[n, ..] * keep(n) / (1 - p): relu's map (any split; the draw is a function
    of the sample's global index, so it needs nothing from other workers)."""
    r = len(x)
    return OpDesc(extents=x, out_rank=r, inputs=(InputDesc(DATA, x, tuple(var(r, d) for d in range(r))),),
                  flops_per_output=STOCHASTIC_DEPTH_FLOPS)


def upsample_nearest(x: tuple[int, ...], scale: tuple[int, int]) -> OpDesc:
    """Nearest-neighbour upsampling of (N, C, H, W) by integer factors: out[n, c, y, x] =
    in[n, c, y // sh, x // sw] (``nn.Upsample(scale_factor=s, mode="nearest")``); a split of
    the output rows must keep whole groups of sh rows (the division's granule)."""
    if len(x) != 4:
        raise ShapeError(f"upsample_nearest expects an (N, C, H, W) input, got shape {x}")
    sh, sw = scale
    if min(sh, sw) < 1:
        raise ShapeError(f"upsample_nearest: scale factors must be positive ints, got {scale}")
    r = 4

    def div(v: int, q: int) -> IndexExpr:
        coefs = [0] * r
        coefs[v] = 1
        return IndexExpr(tuple(coefs), 0, q)

    exprs = (var(r, 0), var(r, 1), div(2, sh) if sh > 1 else var(r, 2), div(3, sw) if sw > 1 else var(r, 3))
    out = (x[0], x[1], x[2] * sh, x[3] * sw)
    return OpDesc(extents=out, out_rank=r, inputs=(InputDesc(DATA, x, exprs),))


def adaptive_windows(size: int, out: int) -> list[tuple[int, int]]:
    """PyTorch's adaptive pooling windows along one axis: [floor(i size / out), ceil((i + 1) size / out))."""
    return [(i * size // out, -(-(i + 1) * size // out)) for i in range(out)]


def adaptive_avg_pool2d(x: tuple[int, ...], out: tuple[int, int]) -> OpDesc:
    """Adaptive average pooling of (N, C, H, W) to (N, C, OH, OW), any sizes (``nn.AdaptiveAvgPool2d``;
    upsampling too: 2x2 -> 7x7).  Window i starts at floor(i H / OH) = (i H + dy OH) // OH - dy,
    so the description reads row (i H + dy OH) // OH for dy below the largest window: a superset
    of the true window where windows differ in size (the region is then a row larger; the
    kernels read the true windows only)."""
    if len(x) != 4:
        raise ShapeError(f"adaptive_avg_pool2d expects an (N, C, H, W) input, got shape {x}")
    oh, ow = out
    if min(oh, ow) < 1:
        raise ShapeError(f"adaptive_avg_pool2d: output size must be positive, got {out}")
    h, w = x[2], x[3]
    kh = max(b - a for a, b in adaptive_windows(h, oh))
    kw = max(b - a for a, b in adaptive_windows(w, ow))
    nv = 6   # 0 n, 1 c, 2 i, 3 j | 4 dy, 5 dx

    def axis(v: int, r: int, size: int, o: int) -> IndexExpr:
        coefs = [0] * nv
        coefs[v], coefs[r] = size, o
        return IndexExpr(tuple(coefs), 0, o) if o > 1 else IndexExpr(tuple(coefs))

    exprs = (var(nv, 0), var(nv, 1), axis(2, 4, h, oh), axis(3, 5, w, ow))
    return OpDesc(extents=(x[0], x[1], oh, ow, kh, kw), out_rank=4, inputs=(InputDesc(DATA, x, exprs),),
                  flops_per_point=1.0, reductions=("dy", "dx"))


def upsample_bilinear(x: tuple[int, ...], scale: tuple[int, int]) -> OpDesc:
    """Bilinear upsampling of (N, C, H, W) by integer factors, align_corners=False
    (``nn.Upsample(scale_factor=s, mode="bilinear")``): output row y reads input rows y0 and
    y0 + 1 with y0 = floor((y + 1/2) / s - 1/2), which is y // s - 1 or y // s: the description
    reads rows (y + s dy - s) // s = y // s - 1 + dy for dy in {0, 1, 2} (clamped into the
    input), a superset of the taps whose division's period s keeps row splits on whole
    groups of s output rows.  FLOPs: 8 per output (two lerps per axis, roughly)."""
    if len(x) != 4:
        raise ShapeError(f"upsample_bilinear expects an (N, C, H, W) input, got shape {x}")
    sh, sw = scale
    if min(sh, sw) < 1:
        raise ShapeError(f"upsample_bilinear: scale factors must be positive ints, got {scale}")
    nv = 6   # 0 n, 1 c, 2 y, 3 x | 4 dy, 5 dx

    def axis(v: int, r: int, s: int) -> IndexExpr:
        coefs = [0] * nv
        coefs[v], coefs[r] = 1, s
        return IndexExpr(tuple(coefs), -s, s) if s > 1 else IndexExpr(tuple(coefs), -1)

    exprs = (var(nv, 0), var(nv, 1), axis(2, 4, sh), axis(3, 5, sw))
    out = (x[0], x[1], x[2] * sh, x[3] * sw)
    return OpDesc(extents=out + (3, 3), out_rank=4, inputs=(InputDesc(DATA, x, exprs),), flops_per_output=8.0,
                  reductions=("dy", "dx"))
