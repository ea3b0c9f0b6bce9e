"""Convolution and linear CPU kernels (csrc/cpu/conv.c, linear.c) against shardwise.reference.

Two rungs of the numerics ladder:

* full tensors: every kernel equals the float64 NumPy reference within 1e-4
  (relative to the tensor's largest magnitude) over many random shapes, strides
  1-3, paddings 0-3, asymmetric (1x7, 7x1) and 1x1 stride-2 kernels;
* sharded execution: the output is cut into random boxes over (n, co, h, w); each box gets exactly the input region the planner computes
  for it (rows [r0*s - p, (r1-1)*s - p + k - 1] clipped to the tensor) and the
  weight slice of its output channels.  Assembled forward outputs, summed
  partial input gradients and the weight gradients summed over the sample /
  spatial splits of each channel range must equal the full ones.

Both convolution algorithms take every test that computes (the ``algorithm`` fixture): im2col +
GEMM and, on CPUs with AVX2 and FMA, the direct loops of csrc/cpu/conv_direct.c forced onto every
shape (in training they run where they pay: ``_core.conv_algorithm``).

Bad views (inconsistent shapes, wrong dtypes) must raise ValueError.  The linear layer's
backward passes, whole and split, are checked through the runtime by tests/ops/test_conformance.py
(the linear* cases); its forward stays here for the shapes of LINEAR_SHAPES.
"""
from __future__ import annotations

import zlib

import numpy as np
import pytest

from shardwise import _core
from shardwise import reference as ref

from isa import isa_available

RTOL = 1e-4


def _direct_available() -> bool:
    before = _core.conv_algorithm()
    try:
        _core.conv_algorithm("direct")
    except ValueError:
        return False
    finally:
        _core.conv_algorithm(before)
    return True


ALGORITHMS = ["im2col"] + (["direct"] if _direct_available() else [])


@pytest.fixture(params=ALGORITHMS)
def algorithm(request):
    """Run the test with the convolutions forced onto one algorithm (process-wide, restored after)."""
    before = _core.conv_algorithm()
    _core.conv_algorithm(request.param)
    yield request.param
    _core.conv_algorithm(before)


def assert_close(got: np.ndarray, want: np.ndarray, what: str, rtol: float = RTOL) -> None:
    """|got - want| <= rtol * max|want| elementwise; on failure show the worst entries (llm.c style)."""
    assert got.shape == want.shape, f"{what}: shape {got.shape} != {want.shape}"
    if want.size == 0:
        return
    scale = max(float(np.abs(want).max()), 1e-30)
    err = np.abs(got.astype(np.float64) - want)
    if err.max() <= rtol * scale:
        return
    worst = np.argsort(err, axis=None)[::-1][:5]
    rows = [f"  at {np.unravel_index(i, want.shape)}: got {got.flat[i]!r}, expected {want.flat[i]!r}"
            for i in worst]
    raise AssertionError(f"{what}: max abs error {err.max():.3g} > {rtol:g} * {scale:.3g}\n" + "\n".join(rows))


def f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


# ----------------------------------------------------------------------------------------------
# cases
# ----------------------------------------------------------------------------------------------
def out_size(size: int, k: int, s: int, p: int) -> int:
    return (size + 2 * p - k) // s + 1


def random_conv_case(rng: np.random.Generator) -> dict:
    """A random conv2d: kernels 1-5 per axis (sometimes 1x7 / 7x1), strides 1-3, paddings 0-3."""
    kind = rng.integers(0, 6)
    if kind == 0:
        kh, kw = (1, 7) if rng.integers(0, 2) else (7, 1)
    else:
        kh, kw = (int(v) for v in rng.integers(1, 6, size=2))
    sh, sw = (int(v) for v in rng.integers(1, 4, size=2))
    ph, pw = (int(v) for v in rng.integers(0, 4, size=2))
    h = int(rng.integers(max(1, kh - 2 * ph), max(1, kh - 2 * ph) + 12))
    w = int(rng.integers(max(1, kw - 2 * pw), max(1, kw - 2 * pw) + 12))
    return dict(n=int(rng.integers(1, 4)), ci=int(rng.integers(1, 6)), co=int(rng.integers(1, 7)), h=h, w=w,
                kernel=(kh, kw), stride=(sh, sw), padding=(ph, pw))


FIXED_CONV_CASES = [
    # (n, ci, co, h, w, kernel, stride, padding)
    dict(n=2, ci=3, co=4, h=9, w=11, kernel=(1, 7), stride=(1, 1), padding=(0, 3)),
    dict(n=2, ci=3, co=4, h=11, w=9, kernel=(7, 1), stride=(1, 1), padding=(3, 0)),
    dict(n=3, ci=4, co=6, h=10, w=10, kernel=(1, 1), stride=(2, 2), padding=(0, 0)),   # ResNet downsample
    dict(n=1, ci=5, co=3, h=33, w=31, kernel=(1, 1), stride=(1, 1), padding=(0, 0)),   # pointwise, in place
    dict(n=3, ci=5, co=3, h=7, w=6, kernel=(1, 1), stride=(1, 1), padding=(0, 0)),     # pointwise, batched tiles
    dict(n=2, ci=3, co=2, h=8, w=8, kernel=(1, 1), stride=(1, 1), padding=(3, 3)),     # rows of pure padding
    dict(n=2, ci=2, co=3, h=5, w=5, kernel=(3, 3), stride=(3, 3), padding=(3, 2)),
    dict(n=1, ci=2, co=2, h=1, w=1, kernel=(1, 1), stride=(1, 1), padding=(0, 0)),
    # K = Ci*kh*kw >= 2048: tiles of 256 pixels, cut inside output rows of one sample
    dict(n=2, ci=240, co=5, h=21, w=21, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=1, ci=240, co=3, h=19, w=23, kernel=(3, 3), stride=(2, 1), padding=(2, 1)),
    # output rows of >= 32 pixels (im2col copies them whole) and of 8 + 4 + 3 (in pieces)
    dict(n=2, ci=2, co=3, h=5, w=41, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=1, ci=3, co=2, h=6, w=17, kernel=(3, 5), stride=(1, 1), padding=(1, 1)),
    # the direct loops' edges: samples grouped on small planes with a short last group; 16 + 8
    # column blocks (24 channels) and channels padded to a vector (13, 9); taps and pixels that do
    # not fill a tile of 6; the data gradient's stride classes, some without taps (stride > kernel)
    dict(n=5, ci=16, co=16, h=4, w=4, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=3, ci=16, co=32, h=8, w=8, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=2, ci=13, co=24, h=7, w=9, kernel=(3, 3), stride=(2, 2), padding=(1, 1)),
    dict(n=2, ci=8, co=40, h=6, w=5, kernel=(2, 2), stride=(3, 3), padding=(1, 0)),
    dict(n=1, ci=20, co=9, h=11, w=10, kernel=(5, 3), stride=(1, 2), padding=(2, 1)),
    dict(n=2, ci=24, co=16, h=9, w=9, kernel=(1, 1), stride=(2, 2), padding=(0, 0)),
]

RANDOM_CONV_SEEDS = list(range(150))


def conv_case(spec) -> dict:
    if isinstance(spec, dict):
        return dict(spec)
    return random_conv_case(np.random.default_rng(1000 + spec))


def make_conv_tensors(c: dict, seed: int):
    rng = np.random.default_rng(seed)
    (kh, kw), (sh, sw), (ph, pw) = c["kernel"], c["stride"], c["padding"]
    ho, wo = out_size(c["h"], kh, sh, ph), out_size(c["w"], kw, sw, pw)
    x = rng.standard_normal((c["n"], c["ci"], c["h"], c["w"]))
    w = rng.standard_normal((c["co"], c["ci"], kh, kw)) / np.sqrt(c["ci"] * kh * kw)
    b = rng.standard_normal(c["co"])
    dy = rng.standard_normal((c["n"], c["co"], ho, wo))
    return x, w, b, dy


def conv_ids(spec) -> str:
    if isinstance(spec, dict):
        return "n{n}c{ci}o{co}_{h}x{w}_k{kernel[0]}x{kernel[1]}_s{stride[0]}{stride[1]}_p{padding[0]}{padding[1]}" \
            .format(**spec)
    return f"random{spec}"


CONV_SPECS = FIXED_CONV_CASES + RANDOM_CONV_SEEDS


# ----------------------------------------------------------------------------------------------
# full tensors
# ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("spec", CONV_SPECS, ids=conv_ids)
def test_conv2d_full_tensor_matches_reference(spec, algorithm):
    c = conv_case(spec)
    x, w, b, dy = make_conv_tensors(c, seed=7)
    s, p = c["stride"], c["padding"]
    use_bias = c["co"] % 2 == 1  # both with and without bias across the cases
    bb = b if use_bias else None
    y_ref = ref.conv2d_forward(x, w, bb, s, p)
    zeros4 = (0, 0, 0, 0)

    y = _core.conv2d_forward(f32(x), zeros4, f32(w), zeros4, None if bb is None else f32(bb), (0,),
                             zeros4, y_ref.shape, s, p, False)
    assert y.dtype == np.float32
    assert_close(y, y_ref, "conv2d forward")
    y_relu = _core.conv2d_forward(f32(x), None, f32(w), None, None if bb is None else f32(bb), None,
                                  None, y_ref.shape, stride=s, padding=p, relu=True)
    assert_close(y_relu, np.maximum(y_ref, 0.0), "conv2d forward + relu")

    dx_ref, dw_ref, db_ref = ref.conv2d_backward(x, w, dy, s, p, bias=True)
    dx = _core.conv2d_backward_data(f32(w), zeros4, f32(dy), zeros4, zeros4, x.shape, c["kernel"], s, p)
    assert_close(dx, dx_ref, "conv2d backward data")
    dw, db = _core.conv2d_backward_weight(f32(x), zeros4, f32(dy), zeros4, w.shape, s, p, True)
    assert_close(dw, dw_ref, "conv2d backward weight")
    assert_close(db, db_ref, "conv2d backward bias")
    dw2, none = _core.conv2d_backward_weight(f32(x), zeros4, f32(dy), zeros4, w.shape, s, p, with_bias=False)
    assert none is None
    np.testing.assert_array_equal(dw2, dw)


LINEAR_SHAPES = [(1, 1, 1), (4, 7, 3), (16, 33, 10), (5, 300, 129), (64, 120, 84), (3, 1, 17)]


@pytest.mark.parametrize("n,i,o", LINEAR_SHAPES)
def test_linear_full_tensor_matches_reference(n, i, o):
    rng = np.random.default_rng(n * 1000 + i * 10 + o)
    x, w, b = (rng.standard_normal(s) for s in ((n, i), (o, i), (o,)))
    y_ref = ref.linear_forward(x, w, b)
    y = _core.linear_forward(f32(x), (0, 0), f32(w), (0, 0), f32(b), (0,), (0, 0), (n, o))
    assert_close(y, y_ref, "linear forward")
    y = _core.linear_forward(f32(x), None, f32(w), None, None, None, None, (n, o), relu=True)
    assert_close(y, np.maximum(ref.linear_forward(x, w, None), 0.0), "linear forward + relu, no bias")


# ----------------------------------------------------------------------------------------------
# sharded execution
# ----------------------------------------------------------------------------------------------
def random_cuts(rng: np.random.Generator, extent: int, max_parts: int = 3) -> list[tuple[int, int]]:
    """Split [0, extent) into 1..max_parts non-empty, uneven, contiguous ranges."""
    parts = int(rng.integers(1, min(max_parts, extent) + 1))
    cuts = sorted(rng.choice(np.arange(1, extent), size=parts - 1, replace=False)) if parts > 1 else []
    edges = [0, *[int(v) for v in cuts], extent]
    return list(zip(edges[:-1], edges[1:]))


def window_region(lo: int, hi: int, k: int, s: int, p: int, size: int) -> tuple[int, int]:
    """Input rows [lo', hi') read by output rows [lo, hi), clipped to [0, size) (as the planner does)."""
    a = max(0, lo * s - p)
    b = min(size, (hi - 1) * s - p + k)
    return a, max(a, b)


def boxes(rng, shape: tuple[int, ...]):
    """Every box of a random grid over `shape` (a random split of each dimension)."""
    grids = [random_cuts(rng, e) for e in shape]
    for idx in np.ndindex(*[len(g) for g in grids]):
        yield tuple(grids[d][i] for d, i in enumerate(idx))


@pytest.mark.parametrize("spec", FIXED_CONV_CASES + RANDOM_CONV_SEEDS[:80], ids=conv_ids)
def test_conv2d_sharded_equals_full(spec, algorithm):
    c = conv_case(spec)
    x, w, b, dy = make_conv_tensors(c, seed=11)
    (kh, kw), s, p = c["kernel"], c["stride"], c["padding"]
    x32, w32, b32, dy32 = f32(x), f32(w), f32(b), f32(dy)
    y_full = _core.conv2d_forward(x32, None, w32, None, b32, None, None, dy.shape, s, p, True)
    y_ref = np.maximum(ref.conv2d_forward(x, w, b, s, p), 0.0)
    assert_close(y_full, y_ref, "full forward")
    dx_ref, dw_ref, db_ref = ref.conv2d_backward(x, w, dy, s, p, bias=True)

    rng = np.random.default_rng(zlib.crc32(conv_ids(spec).encode()))
    y_asm = np.full(dy.shape, np.nan, dtype=np.float32)
    dx_sum = np.zeros(x.shape, dtype=np.float64)
    dw_sum = np.zeros(w.shape, dtype=np.float64)
    db_sum = np.zeros(b.shape, dtype=np.float64)
    for (n0, n1), (c0, c1), (r0, r1), (q0, q1) in boxes(rng, dy.shape):
        ra, rb = window_region(r0, r1, kh, s[0], p[0], c["h"])
        ca, cb = window_region(q0, q1, kw, s[1], p[1], c["w"])
        x_lo = (n0, 0, ra, ca)
        x_reg = x32[n0:n1, :, ra:rb, ca:cb].copy()
        w_lo, w_sl, b_sl = (c0, 0, 0, 0), w32[c0:c1].copy(), b32[c0:c1].copy()
        y_lo, y_shape = (n0, c0, r0, q0), (n1 - n0, c1 - c0, r1 - r0, q1 - q0)
        y_box = _core.conv2d_forward(x_reg, x_lo, w_sl, w_lo, b_sl, (c0,), y_lo, y_shape, s, p, True)
        y_asm[n0:n1, c0:c1, r0:r1, q0:q1] = y_box

        dy_box = dy32[n0:n1, c0:c1, r0:r1, q0:q1].copy()
        dx_part = _core.conv2d_backward_data(w_sl, w_lo, dy_box, y_lo, x_lo, x_reg.shape, (kh, kw), s, p)
        dx_sum[n0:n1, :, ra:rb, ca:cb] += dx_part
        dw_part, db_part = _core.conv2d_backward_weight(x_reg, x_lo, dy_box, y_lo, w.shape, s, p, True)
        assert dw_part.shape == (c1 - c0,) + w.shape[1:]
        dw_sum[c0:c1] += dw_part
        db_sum[c0:c1] += db_part
    assert not np.isnan(y_asm).any(), "the boxes must tile the output"
    assert_close(y_asm, y_full.astype(np.float64), "assembled forward vs full kernel")
    assert_close(y_asm, y_ref, "assembled forward vs reference")
    assert_close(dx_sum.astype(np.float32), dx_ref, "summed partial dx")
    assert_close(dw_sum.astype(np.float32), dw_ref, "dw over Co ranges")
    assert_close(db_sum.astype(np.float32), db_ref, "db over Co ranges")


@pytest.mark.parametrize("seed", range(30))
def test_conv2d_backward_data_keeps_only_dx_box(seed, algorithm):
    """dx over any sub-box from the whole dy = the full gradient restricted to that box
    (contributions falling outside dx's box are dropped, not folded in)."""
    c = conv_case(seed)
    x, w, _, dy = make_conv_tensors(c, seed=seed)
    dx_ref = ref.conv2d_backward(x, w, dy, c["stride"], c["padding"], bias=False)[0]
    rng = np.random.default_rng(seed)
    (n0, n1), _, (h0, h1), (w0, w1) = (random_cuts(rng, e)[-1] for e in x.shape)
    dx = _core.conv2d_backward_data(f32(w), None, f32(dy), None, (n0, 0, h0, w0), (n1 - n0, c["ci"], h1 - h0, w1 - w0),
                                    c["kernel"], c["stride"], c["padding"])
    assert_close(dx, dx_ref[n0:n1, :, h0:h1, w0:w1], "dx sub-box")


def test_conv2d_forward_reads_a_larger_view(algorithm):
    """x and w views may hold more than the box needs (the whole tensors here)."""
    c = FIXED_CONV_CASES[6]
    x, w, b, _ = make_conv_tensors(c, seed=3)
    y_ref = ref.conv2d_forward(x, w, b, c["stride"], c["padding"])
    box = (slice(1, 2), slice(1, 3), slice(0, 2), slice(1, 3))
    y = _core.conv2d_forward(f32(x), None, f32(w), None, f32(b), None, (1, 1, 0, 1), (1, 2, 2, 2),
                             c["stride"], c["padding"])
    assert_close(y, y_ref[box], "box of a larger view")


def test_non_contiguous_inputs_are_copied(algorithm):
    rng = np.random.default_rng(0)
    x = f32(rng.standard_normal((2, 3, 8, 12)))[:, :, :, ::2]
    w = f32(rng.standard_normal((4, 3, 3, 3)))
    y = _core.conv2d_forward(x, None, w, None, None, None, None, (2, 4, 6, 4), 1, 0)
    assert_close(y, ref.conv2d_forward(x.astype(np.float64), w.astype(np.float64), None, 1, 0), "strided x")


# ----------------------------------------------------------------------------------------------
# bad views
# ----------------------------------------------------------------------------------------------
def _conv_args(**over):
    rng = np.random.default_rng(0)
    args = dict(x=f32(rng.standard_normal((2, 3, 6, 6))), x_lo=(0, 0, 0, 0), w=f32(rng.standard_normal((4, 3, 3, 3))),
                w_lo=(0, 0, 0, 0), b=f32(np.zeros(4)), b_lo=(0,), y_lo=(0, 0, 0, 0), y_shape=(2, 4, 4, 4),
                stride=1, padding=0)
    args.update(over)
    return args


BAD_CONV_FORWARD = {
    "x float64": dict(x=np.zeros((2, 3, 6, 6))),
    "x a list": dict(x=[[[[0.0]]]]),
    "x rank 3": dict(x=f32(np.zeros((3, 6, 6)))),
    "w int32": dict(w=np.zeros((4, 3, 3, 3), dtype=np.int32)),
    "x misses samples": dict(x_lo=(1, 0, 0, 0)),
    "x channels differ from w": dict(x=f32(np.zeros((2, 2, 6, 6)))),
    "x channel offset": dict(x_lo=(0, 1, 0, 0)),
    "w misses output channels": dict(w=f32(np.zeros((2, 3, 3, 3)))),
    "w kernel offset": dict(w_lo=(0, 0, 1, 0)),
    "b misses output channels": dict(b=f32(np.zeros(3))),
    "b rank 2": dict(b=f32(np.zeros((4, 1)))),
    "y_shape negative": dict(y_shape=(2, -4, 4, 4)),
    "y_shape short": dict(y_shape=(2, 4, 4)),
    "x_lo too long": dict(x_lo=(0, 0, 0, 0, 0)),
    "x_lo not integers": dict(x_lo=(0, 0.5, 0, 0)),
    "stride 0": dict(stride=0),
    "padding negative": dict(padding=(0, -1)),
    "stride triple": dict(stride=(1, 1, 1)),
}


@pytest.mark.parametrize("case", list(BAD_CONV_FORWARD), ids=list(BAD_CONV_FORWARD))
def test_conv2d_forward_bad_views_raise_value_error(case):
    with pytest.raises(ValueError):
        _core.conv2d_forward(**_conv_args(**BAD_CONV_FORWARD[case]))


def test_conv2d_backward_bad_views_raise_value_error():
    w, dy, x = f32(np.zeros((4, 3, 3, 3))), f32(np.zeros((2, 4, 4, 4))), f32(np.zeros((2, 3, 6, 6)))
    z = (0, 0, 0, 0)
    cases = [
        lambda: _core.conv2d_backward_data(w, z, dy, z, z, (2, 3, 6, 6), (2, 2), 1, 0),    # kernel != w's
        lambda: _core.conv2d_backward_data(w, z, dy, z, z, (2, 2, 6, 6), 3, 1, 0),         # dx misses channels
        lambda: _core.conv2d_backward_data(w, z, dy, z, (1, 0, 0, 0), (2, 3, 6, 6), 3, 1, 0),  # dy misses samples
        lambda: _core.conv2d_backward_data(w[:2], z, dy, z, z, (2, 3, 6, 6), 3, 1, 0),     # w misses dy's Co
        lambda: _core.conv2d_backward_data(w, z, dy.astype(np.float64), z, z, (2, 3, 6, 6), 3, 1, 0),
        lambda: _core.conv2d_backward_weight(x, z, dy, z, (3, 3, 3, 3), 1, 0),             # dy's Co beyond w
        lambda: _core.conv2d_backward_weight(x, z, dy, (0, 1, 0, 0), (4, 3, 3, 3), 1, 0),  # Co range beyond w
        lambda: _core.conv2d_backward_weight(x, z, dy, z, (4, 2, 3, 3), 1, 0),             # x channels != Ci
        lambda: _core.conv2d_backward_weight(x, (1, 0, 0, 0), dy, z, (4, 3, 3, 3), 1, 0),  # x misses samples
        lambda: _core.conv2d_backward_weight(x, z, dy, z, (4, 3, 0, 3), 1, 0),             # kernel 0
        lambda: _core.conv2d_backward_weight(x, z, dy, z, (4, 3, -3, 3), 1, 0),            # negative extent
        lambda: _core.conv2d_backward_weight(x[0], z, dy, z, (4, 3, 3, 3), 1, 0),          # x rank 3
    ]
    for i, call in enumerate(cases):
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"case {i} did not raise")


def test_linear_bad_views_raise_value_error():
    x, w = f32(np.zeros((4, 5))), f32(np.zeros((3, 5)))
    cases = [
        lambda: _core.linear_forward(x[:, :4].copy(), None, w, None, None, None, None, (4, 3)),   # features differ
        lambda: _core.linear_forward(x, (1, 0), w, None, None, None, None, (4, 3)),               # x misses rows
        lambda: _core.linear_forward(x, None, w[:2].copy(), None, None, None, None, (4, 3)),      # w misses outputs
        lambda: _core.linear_forward(x, None, w, None, f32(np.zeros(2)), None, None, (4, 3)),     # b misses outputs
        lambda: _core.linear_forward(x.astype(np.float64), None, w, None, None, None, None, (4, 3)),
        lambda: _core.linear_forward(x, None, w, (0, 1), None, None, None, (4, 3)),               # w feature offset
    ]
    for i, call in enumerate(cases):
        with pytest.raises(ValueError):
            call()
            pytest.fail(f"case {i} did not raise")


def test_error_message_names_the_view():
    with pytest.raises(ValueError, match=r"conv2d_forward: w does not cover y's output-channel range"):
        _core.conv2d_forward(**_conv_args(w=f32(np.zeros((2, 3, 3, 3)))))


def test_empty_boxes_are_fine(algorithm):
    """Zero-extent boxes (a worker with nothing to do) and input regions that are pure padding."""
    w, b = f32(np.ones((2, 1, 1, 1))), f32(np.array([0.5, -1.0]))
    x_empty = np.zeros((1, 1, 0, 0), dtype=np.float32)
    # output row 0 of a 1x1 conv with padding 3 reads only padding: y = relu(b)
    y = _core.conv2d_forward(x_empty, (0, 0, 0, 0), w, None, b, None, (0, 0, 0, 0), (1, 2, 1, 1), 1, 3, True)
    np.testing.assert_array_equal(y.reshape(2), [0.5, 0.0])
    y = _core.conv2d_forward(x_empty, None, w, None, b, None, None, (0, 2, 3, 3), 1, 0)
    assert y.shape == (0, 2, 3, 3)
    dw, db = _core.conv2d_backward_weight(x_empty, None, np.ones((1, 2, 1, 1), np.float32), None, (2, 1, 1, 1), 1, 3)
    np.testing.assert_array_equal(dw, 0.0)
    np.testing.assert_array_equal(db, [1.0, 1.0])
    dx = _core.conv2d_backward_data(w, None, np.ones((1, 2, 0, 4), np.float32), None, None, (1, 1, 5, 5), 1, 1, 0)
    np.testing.assert_array_equal(dx, 0.0)
    y = _core.linear_forward(np.zeros((0, 3), np.float32), None, f32(np.ones((2, 3))), None, None, None, None, (0, 2))
    assert y.shape == (0, 2)


# ----------------------------------------------------------------------------------------------
# the algorithm switch
# ----------------------------------------------------------------------------------------------
def _conv_all(c: dict, seed: int):
    """(y with bias and ReLU, dx, dw, db) of one case on full tensors with the current algorithm."""
    x, w, b, dy = (f32(a) for a in make_conv_tensors(c, seed))
    s, p = c["stride"], c["padding"]
    y = _core.conv2d_forward(x, None, w, None, b, None, None, dy.shape, s, p, True)
    dx = _core.conv2d_backward_data(w, None, dy, None, None, x.shape, c["kernel"], s, p)
    dw, db = _core.conv2d_backward_weight(x, None, dy, None, w.shape, s, p, True)
    return y, dx, dw, db


def _with_algorithm(name: str, run):
    before = _core.conv_algorithm()
    _core.conv_algorithm(name)
    try:
        return run()
    finally:
        _core.conv_algorithm(before)


RESNET_LAYER = dict(n=4, ci=16, co=16, h=8, w=8, kernel=(3, 3), stride=(1, 1), padding=(1, 1))
INPUT_LAYER = dict(n=2, ci=3, co=16, h=8, w=8, kernel=(3, 3), stride=(1, 1), padding=(1, 1))
LENET_INPUT_LAYER = dict(n=2, ci=1, co=6, h=12, w=12, kernel=(5, 5), stride=(1, 1), padding=(0, 0))
WIDE_LAYER = dict(n=2, ci=72, co=72, h=4, w=4, kernel=(3, 3), stride=(1, 1), padding=(1, 1))


@pytest.mark.skipif("direct" not in ALGORITHMS, reason="the direct convolution needs AVX2 and FMA")
def test_auto_runs_the_direct_loops_where_they_pay():
    """'auto' (the trainer's) gives the direct loops' bits on a 16-channel 3x3 layer, and
    im2col's on 1x1 kernels, for the 3-channel input gradient of an input layer, for a layer of
    6 output channels (LeNet-5's first) and on 3x3
    layers above the direct loops' limit (256 channels)."""
    assert _core.conv_algorithm() == "auto"
    for c in (RESNET_LAYER, dict(RESNET_LAYER, kernel=(1, 1), padding=(0, 0))):
        auto = _conv_all(c, seed=1)
        want = _with_algorithm("direct" if c["kernel"] == (3, 3) else "im2col", lambda: _conv_all(c, seed=1))
        other = _with_algorithm("im2col" if c["kernel"] == (3, 3) else "direct", lambda: _conv_all(c, seed=1))
        for a, b, o in zip(auto, want, other):
            np.testing.assert_array_equal(a, b)
        assert any(not np.array_equal(a, o) for a, o in zip(auto, other)), "the algorithms should differ in bits"
    auto = _conv_all(INPUT_LAYER, seed=2)
    direct = _with_algorithm("direct", lambda: _conv_all(INPUT_LAYER, seed=2))
    im2col = _with_algorithm("im2col", lambda: _conv_all(INPUT_LAYER, seed=2))
    np.testing.assert_array_equal(auto[0], direct[0])   # 16 output channels: direct
    np.testing.assert_array_equal(auto[1], im2col[1])   # dx has 3 channels: im2col
    # LeNet-5's first layer: 6 output channels fill no whole vector, so im2col for all three
    auto = _conv_all(LENET_INPUT_LAYER, seed=5)
    im2col = _with_algorithm("im2col", lambda: _conv_all(LENET_INPUT_LAYER, seed=5))
    direct = _with_algorithm("direct", lambda: _conv_all(LENET_INPUT_LAYER, seed=5))
    for a, b in zip(auto, im2col):
        np.testing.assert_array_equal(a, b)
    assert any(not np.array_equal(a, o) for a, o in zip(auto, direct)), "the algorithms should differ in bits"
    # above the direct loops' limit (256 channels, with either instruction set): im2col + GEMM everywhere
    # (its GEMMs are no longer thin); at the limit, the direct loops
    for isa, limit in (("avx2", 256), ("avx512", 256)):
        if not isa_available(isa):
            continue
        _core.conv_isa(isa)
        try:
            for channels, want_alg in ((limit, "direct"), (limit + 8, "im2col")):
                c = dict(WIDE_LAYER, ci=channels, co=channels)
                auto = _conv_all(c, seed=4)
                want = _with_algorithm(want_alg, lambda: _conv_all(c, seed=4))
                other = _with_algorithm("im2col" if want_alg == "direct" else "direct", lambda: _conv_all(c, seed=4))
                for a, b in zip(auto, want):
                    np.testing.assert_array_equal(a, b, err_msg=f"{isa}, {channels} channels: {want_alg}")
                assert any(not np.array_equal(a, o) for a, o in zip(auto, other)), "the algorithms should differ"
        finally:
            _core.conv_isa("auto")


def test_the_same_call_gives_the_same_bits(algorithm):
    first = _conv_all(RESNET_LAYER, seed=3)
    for a, b in zip(first, _conv_all(RESNET_LAYER, seed=3)):
        np.testing.assert_array_equal(a, b)


def test_conv_algorithm_rejects_unknown_names():
    with pytest.raises(ValueError, match="'auto', 'im2col' or 'direct'"):
        _core.conv_algorithm("winograd")
    with pytest.raises(TypeError):
        _core.conv_algorithm(3)
    assert _core.conv_algorithm() == "auto"


# ----------------------------------------------------------------------------------------------
# strides far larger than the input (issue 12): the padded plane must follow the input, not the output grid
# ----------------------------------------------------------------------------------------------
# 6x5 input, 3x2 kernel, strides 8192 x 6000 with paddings one larger: a 3x3 output whose centre
# pixel reads input rows -1..1 and columns -1..0 (partly padding) and whose other pixels read only
# padding.  A padded plane sized by the output grid would be 16387 x 12002 floats (787 MB).
HUGE_STRIDE = dict(n=2, ci=2, co=3, h=6, w=5, kernel=(3, 2), stride=(8192, 6000), padding=(8193, 6001))


def _huge_stride_reference(c: dict, x, w, b, dy):
    """The NumPy reference for HUGE_STRIDE without materialising its padding: output pixel (r, c)
    of stride s and padding p reads the input window starting at r*s - p, which is output pixel
    r*s - p + (k-1) of the stride-1 convolution padded by k-1 (zero, plus the bias, when that index
    is off the stride-1 output: the window then lies wholly in the padding)."""
    (kh, kw), (sh, sw), (ph, pw) = c["kernel"], c["stride"], c["padding"]
    ho, wo = out_size(c["h"], kh, sh, ph), out_size(c["w"], kw, sw, pw)
    full = ref.conv2d_forward(x, w, b, (1, 1), (kh - 1, kw - 1))
    y = np.broadcast_to(b.reshape(1, -1, 1, 1), (c["n"], c["co"], ho, wo)).copy()
    dy_full = np.zeros(full.shape)
    hits = 0
    for r in range(ho):
        for q in range(wo):
            i, j = r * sh - ph + kh - 1, q * sw - pw + kw - 1
            if 0 <= i < full.shape[2] and 0 <= j < full.shape[3]:
                y[:, :, r, q] = full[:, :, i, j]
                dy_full[:, :, i, j] = dy[:, :, r, q]
                hits += 1
    assert hits == 1  # the case is built so that exactly the centre pixel sees the input
    dx, dw, _ = ref.conv2d_backward(x, w, dy_full, (1, 1), (kh - 1, kw - 1), bias=False)
    return y, dx, dw, dy.sum(axis=(0, 2, 3))


def test_conv2d_stride_far_larger_than_the_input_matches_reference(algorithm):
    c = HUGE_STRIDE
    rng = np.random.default_rng(5)
    (kh, kw), s, p = c["kernel"], c["stride"], c["padding"]
    ho, wo = out_size(c["h"], kh, s[0], p[0]), out_size(c["w"], kw, s[1], p[1])
    assert (ho, wo) == (3, 3)
    x = rng.standard_normal((c["n"], c["ci"], c["h"], c["w"]))
    w = rng.standard_normal((c["co"], c["ci"], kh, kw))
    b = rng.standard_normal(c["co"])
    dy = rng.standard_normal((c["n"], c["co"], ho, wo))
    y_ref, dx_ref, dw_ref, db_ref = _huge_stride_reference(c, x, w, b, dy)
    y = _core.conv2d_forward(f32(x), None, f32(w), None, f32(b), None, None, y_ref.shape, s, p, False)
    assert_close(y, y_ref, "conv2d forward, huge stride")
    dx = _core.conv2d_backward_data(f32(w), None, f32(dy), None, None, x.shape, c["kernel"], s, p)
    assert_close(dx, dx_ref, "conv2d backward data, huge stride")
    dw, db = _core.conv2d_backward_weight(f32(x), None, f32(dy), None, w.shape, s, p, True)
    assert_close(dw, dw_ref, "conv2d backward weight, huge stride")
    assert_close(db, db_ref, "conv2d backward bias, huge stride")
    # a dx view of rows 1..3 (a sharded worker's region): the same rows of the full gradient
    dx_part = _core.conv2d_backward_data(f32(w), None, f32(dy), None, (0, 0, 1, 0), (c["n"], c["ci"], 3, c["w"]),
                                         c["kernel"], s, p)
    assert_close(dx_part, dx_ref[:, :, 1:4], "conv2d backward data, huge stride, a row slice of dx")


def _peak_rss_growth(run) -> int:
    """Bytes the resident set peaked above its level before ``run()``.  Linux's peak counter
    (VmHWM) is reset first through /proc/self/clear_refs, so an earlier test's peak cannot hide
    this one's (getrusage's ru_maxrss can only grow, and even a child process inherits it)."""
    def hwm() -> int:
        with open("/proc/self/status") as f:
            return next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))

    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")  # reset the peak resident set to the current one
        before = hwm()
    except (OSError, StopIteration):
        pytest.skip("needs Linux's /proc/self/clear_refs and VmHWM to measure a peak")
    run()
    return hwm() - before


def test_conv2d_stride_far_larger_than_the_input_allocates_little():
    """Peak resident set growth of the three kernels on HUGE_STRIDE: a padded plane sized by the
    output grid would add ~787 MB (and take seconds to fill)."""
    c = HUGE_STRIDE
    (kh, kw), s, p = c["kernel"], c["stride"], c["padding"]
    x = np.ones((c["n"], c["ci"], c["h"], c["w"]), np.float32)
    w = np.ones((c["co"], c["ci"], kh, kw), np.float32)
    dy = np.ones((c["n"], c["co"], 3, 3), np.float32)

    def run():
        _core.conv2d_forward(x, None, w, None, None, None, None, dy.shape, s, p, False)
        _core.conv2d_backward_data(w, None, dy, None, None, x.shape, (kh, kw), s, p)
        _core.conv2d_backward_weight(x, None, dy, None, w.shape, s, p, True)

    grown = _peak_rss_growth(run)
    assert grown < 200 << 20, f"peak resident set grew by {grown >> 20} MB"


# ----------------------------------------------------------------------------------------------
# the direct loops' instruction set
# ----------------------------------------------------------------------------------------------


# column counts that take every tile of the AVX-512 loops: 32-wide pairs of blocks, a 16-wide block
# after them (48, 80), an 8-wide one (40, 56, 24), and pixels / taps that do not fill a tile of 6
WIDE_CONV_CASES = [
    dict(n=2, ci=40, co=48, h=7, w=9, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=1, ci=64, co=64, h=6, w=6, kernel=(3, 3), stride=(2, 2), padding=(1, 1)),
    dict(n=2, ci=24, co=56, h=5, w=7, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),
    dict(n=1, ci=80, co=40, h=9, w=5, kernel=(5, 3), stride=(1, 2), padding=(2, 1)),
    dict(n=3, ci=32, co=80, h=4, w=4, kernel=(2, 2), stride=(3, 3), padding=(1, 0)),
]


@pytest.mark.skipif(not isa_available("avx512"), reason="this CPU has no AVX-512F")
@pytest.mark.parametrize("spec", FIXED_CONV_CASES + WIDE_CONV_CASES + list(range(40)), ids=conv_ids)
def test_avx512_loops_give_the_avx2_bits(spec):
    """The direct loops with 16-float vectors add each output's products in the AVX2 loops' order:
    forward, data gradient, weight gradient and bias gradient are bitwise the same."""
    c = conv_case(spec)
    runs = {}
    for isa in ("avx2", "avx512"):
        _core.conv_isa(isa)
        before = _core.conv_isa_calls()
        try:
            runs[isa] = _with_algorithm("direct", lambda: _conv_all(c, seed=5))
        finally:
            _core.conv_isa("auto")
        after = _core.conv_isa_calls()
        other = "avx2" if isa == "avx512" else "avx512"
        assert after[isa] > before[isa] and after[other] == before[other], (isa, before, after)
    for what, a, b in zip(("y", "dx", "dw", "db"), runs["avx2"], runs["avx512"]):
        np.testing.assert_array_equal(a, b, err_msg=what)


@pytest.mark.skipif(not isa_available("avx512"), reason="this CPU has no AVX-512F")
def test_avx512_loops_match_the_reference():
    for c in WIDE_CONV_CASES:
        x, w, b, dy = make_conv_tensors(c, seed=5)
        s, p = c["stride"], c["padding"]
        y, dx, dw, db = _with_algorithm("direct", lambda: _conv_all(c, seed=5))
        assert _core.conv_isa() == "avx512"
        assert_close(y, np.maximum(ref.conv2d_forward(x, w, b, s, p), 0.0), "forward")
        dx_ref, dw_ref, db_ref = ref.conv2d_backward(x, w, dy, s, p, bias=True)
        assert_close(dx, dx_ref, "backward data")
        assert_close(dw, dw_ref, "backward weight")
        assert_close(db, db_ref, "backward bias")


def test_conv_isa_names_and_refusals():
    assert _core.conv_isa() in ("avx512", "avx2", "none")
    with pytest.raises(ValueError, match="'auto', 'avx2' or 'avx512'"):
        _core.conv_isa("neon")
    if not isa_available("avx512"):
        with pytest.raises(ValueError, match="no AVX-512F"):
            _core.conv_isa("avx512")
    assert _core.conv_isa("auto") == _core.conv_isa()


# ----------------------------------------------------------------------------------------------
# the gradient through a fused ReLU (relu_y: the kernels mask dy as they read it)
# ----------------------------------------------------------------------------------------------
def _relu_case(c: dict, seed: int):
    """x, w, dy and the fused ReLU's output y (zeros where the ReLU clipped, one NaN), float32."""
    x, w, b, dy = (f32(a) for a in make_conv_tensors(c, seed))
    y = _core.conv2d_forward(x, None, w, None, f32(b), None, None, dy.shape, c["stride"], c["padding"], True)
    y.flat[len(y.flat) // 2] = np.nan   # a NaN output takes no gradient, as relu_backward has it
    return x, w, dy, y


@pytest.mark.parametrize("isa", ["auto", "avx2"])
@pytest.mark.parametrize("spec", FIXED_CONV_CASES + WIDE_CONV_CASES + list(range(12)), ids=conv_ids)
def test_gradients_through_a_fused_relu_mask_dy(spec, algorithm, isa):
    """With relu_y both backward kernels give the bits of the plain kernels on dy * (y > 0) (the
    direct loops mask dy while they copy it, im2col + GEMM into scratch first), and the float64
    reference's gradients of that masked dy."""
    if isa != "auto" and not isa_available(isa):
        pytest.skip(f"this CPU has no {isa}")
    c = conv_case(spec)
    x, w, dy, y = _relu_case(c, seed=11)
    s, p, k = c["stride"], c["padding"], c["kernel"]
    dz = np.where(y > 0, dy, np.float32(0))
    _core.conv_isa(isa)
    try:
        dx = _core.conv2d_backward_data(w, None, dy, None, None, x.shape, k, s, p, relu_y=y)
        dw, db = _core.conv2d_backward_weight(x, None, dy, None, w.shape, s, p, True, relu_y=y)
        np.testing.assert_array_equal(dx, _core.conv2d_backward_data(w, None, dz, None, None, x.shape, k, s, p))
        dw_plain, db_plain = _core.conv2d_backward_weight(x, None, dz, None, w.shape, s, p, True)
        np.testing.assert_array_equal(dw, dw_plain)
    finally:
        _core.conv_isa("auto")
    dx_ref, dw_ref, db_ref = ref.conv2d_backward(x.astype(np.float64), w.astype(np.float64), dz.astype(np.float64),
                                                 s, p, bias=True)
    assert_close(dx, dx_ref, "backward data through the ReLU")
    assert_close(dw, dw_ref, "backward weight through the ReLU")
    assert_close(db, db_ref, "bias gradient through the ReLU")
    np.testing.assert_array_equal(db, db_plain)   # the same values summed in the same order


def test_gradients_through_a_fused_relu_on_sub_boxes_and_groups(algorithm):
    """relu_y on views that are parts of the tensors (its lo is dy's), and on a grouped
    convolution (its kernels read dy in place: the mask goes through scratch)."""
    c = dict(n=3, ci=16, co=16, h=7, w=6, kernel=(3, 3), stride=(1, 1), padding=(1, 1))
    x, w, dy, y = _relu_case(c, seed=12)
    lo = (1, 0, 2, 1)
    part = (slice(1, 3), slice(None), slice(2, 6), slice(1, 5))
    dz = np.where(y > 0, dy, np.float32(0))
    dx = _core.conv2d_backward_data(w, None, dy[part], lo, (1, 0, 0, 0), (2, 16, 7, 6), (3, 3), 1, 1,
                                    relu_y=y[part], relu_y_lo=lo)
    want = _core.conv2d_backward_data(w, None, np.ascontiguousarray(dz[part]), lo, (1, 0, 0, 0), (2, 16, 7, 6),
                                      (3, 3), 1, 1)
    np.testing.assert_array_equal(dx, want)
    dw, _ = _core.conv2d_backward_weight(x, None, dy[part], lo, w.shape, 1, 1, False, relu_y=y[part], relu_y_lo=lo)
    want, _ = _core.conv2d_backward_weight(x, None, np.ascontiguousarray(dz[part]), lo, w.shape, 1, 1, False)
    np.testing.assert_array_equal(dw, want)
    wg = np.ascontiguousarray(w[:, :4])   # 4 groups of 4 channels
    yg = _core.conv2d_forward(x, None, wg, None, None, None, None, dy.shape, 1, 1, True, group_co=4)
    dz = np.where(yg > 0, dy, np.float32(0))
    dx = _core.conv2d_backward_data(wg, None, dy, None, None, x.shape, (3, 3), 1, 1, group_co=4, relu_y=yg)
    np.testing.assert_array_equal(dx, _core.conv2d_backward_data(wg, None, dz, None, None, x.shape, (3, 3), 1, 1,
                                                                 group_co=4))
    dw, _ = _core.conv2d_backward_weight(x, None, dy, None, wg.shape, 1, 1, False, group_co=4, relu_y=yg)
    want, _ = _core.conv2d_backward_weight(x, None, dz, None, wg.shape, 1, 1, False, group_co=4)
    np.testing.assert_array_equal(dw, want)


def test_a_relu_output_of_another_box_is_refused():
    c = dict(n=2, ci=16, co=16, h=5, w=5, kernel=(3, 3), stride=(1, 1), padding=(1, 1))
    x, w, dy, y = _relu_case(c, seed=13)
    with pytest.raises(ValueError, match="y's box must be dy's"):
        _core.conv2d_backward_data(w, None, dy, None, None, x.shape, (3, 3), 1, 1, relu_y=y[:1])
    with pytest.raises(ValueError, match="y's box must be dy's"):
        _core.conv2d_backward_weight(x, None, dy, None, w.shape, 1, 1, True, relu_y=y, relu_y_lo=(0, 0, 1, 0))


# ----------------------------------------------------------------------------------------------
# the direct loops skip the taps that read padding
# ----------------------------------------------------------------------------------------------
PADDED_CASES = [
    dict(n=2, ci=16, co=16, h=9, w=8, kernel=(5, 5), stride=(1, 1), padding=(2, 2)),   # AlexNet's conv2 shape
    dict(n=5, ci=16, co=24, h=4, w=4, kernel=(3, 3), stride=(1, 1), padding=(1, 1)),   # grouped, a short group
    dict(n=2, ci=16, co=16, h=9, w=7, kernel=(3, 3), stride=(2, 2), padding=(1, 1)),   # stride classes
    dict(n=1, ci=16, co=8, h=3, w=5, kernel=(5, 5), stride=(1, 1), padding=(4, 2)),    # rows of pure padding
]


def _check_poisoned(got: np.ndarray, want: np.ndarray, poisoned: np.ndarray, what: str) -> None:
    """got (N, C, H, W) non-finite wherever poisoned (H, W) holds; elsewhere either the same
    poison (a tile of the loops still multiplied the padding: 0 * inf) or want; and at least a
    quarter of those outputs finite (before the loops skipped padding, none was)."""
    assert not np.isfinite(got[:, :, poisoned]).any(), what
    rest, rest_want = got[:, :, ~poisoned], want[:, :, ~poisoned]
    finite = np.isfinite(rest)
    assert finite.mean() >= 0.25, f"{what}: {finite.mean():.2f} of the outputs skip the padding"
    assert_close(np.where(finite, rest, 0.0), np.where(finite, rest_want, 0.0), what)


@pytest.mark.skipif("direct" not in ALGORITHMS, reason="the direct convolution needs AVX2 and FMA")
@pytest.mark.parametrize("isa", ["avx2", "avx512"])
@pytest.mark.parametrize("spec", PADDED_CASES, ids=conv_ids)
def test_direct_loops_multiply_no_padding(spec, isa):
    """A tap of infinite weight poisons (inf * x, or 0 * inf = NaN) the outputs whose window puts a
    real input under it.  The direct loops leave out a tap for a tile of outputs when it falls on
    padding for all of them (as oneDNN leaves out padding), so the outputs of such tiles are the
    finite sums of their real taps.  Likewise for the data gradient (its windows over dy) and for
    the weight gradient with an infinite dy value (its tiles: taps, over the outputs)."""
    if not isa_available(isa):
        pytest.skip(f"this CPU has no {isa}")
    c = conv_case(spec)
    x, w, b, dy = (f32(a) for a in make_conv_tensors(c, seed=11))
    s, p, (kh, kw) = c["stride"], c["padding"], c["kernel"]
    (sh, sw), (ph, pw) = s, p
    ho, wo = dy.shape[2:]
    ty, tx = kh - 1, 0   # the poisoned tap: the window's last row, first column
    w_inf, w_zero = w.copy(), w.copy()
    w_inf[:, :, ty, tx], w_zero[:, :, ty, tx] = np.inf, 0.0
    _core.conv_isa(isa)
    try:
        y = _with_algorithm("direct", lambda: _core.conv2d_forward(x, None, w_inf, None, None, None, None,
                                                                  dy.shape, s, p))
        dx = _with_algorithm("direct", lambda: _core.conv2d_backward_data(w_inf, None, dy, None, None, x.shape,
                                                                          c["kernel"], s, p))
        dy_inf = dy.copy()
        dy_inf[:, :, 0, 0] = np.inf   # output (0, 0): its window's real taps get inf * x
        dw, _ = _with_algorithm("direct", lambda: _core.conv2d_backward_weight(x, None, dy_inf, None, w.shape, s, p,
                                                                               False))
    finally:
        _core.conv_isa("auto")
    # output (r, q) puts input (r*sh - ph + ty, q*sw - pw + tx) under the tap
    rows = (np.arange(ho) * sh - ph + ty >= 0) & (np.arange(ho) * sh - ph + ty < c["h"])
    cols = (np.arange(wo) * sw - pw + tx >= 0) & (np.arange(wo) * sw - pw + tx < c["w"])
    _check_poisoned(y, ref.conv2d_forward(x, w_zero, None, s, p), rows[:, None] & cols[None, :], "forward")
    # dx (iy, ix) takes the tap from dy (r, q) with r*sh - ph + ty = iy: poisoned where that lies in dy
    iy, ix = np.arange(c["h"]) + ph - ty, np.arange(c["w"]) + pw - tx
    rows = (iy % sh == 0) & (iy >= 0) & (iy // sh < ho)
    cols = (ix % sw == 0) & (ix >= 0) & (ix // sw < wo)
    _check_poisoned(dx, ref.conv2d_backward(x, w_zero, dy, s, p)[0], rows[:, None] & cols[None, :], "data gradient")
    # dw (ky, kx) multiplies dy (0, 0) by input (ky - ph, kx - pw): poisoned inside x
    rows = (np.arange(kh) - ph >= 0) & (np.arange(kh) - ph < c["h"])
    cols = (np.arange(kw) - pw >= 0) & (np.arange(kw) - pw < c["w"])
    dy_zero = dy.copy()
    dy_zero[:, :, 0, 0] = 0.0
    _check_poisoned(dw, ref.conv2d_backward(x, w, dy_zero, s, p)[1], rows[:, None] & cols[None, :],
                    "weight gradient")
