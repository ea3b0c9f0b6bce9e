"""C kernels for pooling and box copies, through their single-kernel entry points, for what
the runtime cannot reach: NaN, infinity, ties and signed zeros in a max pool (the runtime
refuses non-finite inputs), arbitrary boxes (the lowering's are a few), empty and
non-contiguous boxes in copies, and the entry points' argument rules.

Each kernel is checked two ways against shardwise.reference (pure NumPy, float32):
1. on the whole tensor, within 1e-4;
2. SHARDED: the output is split into random boxes over every dimension, each
   box is computed from exactly the input region it needs (halos included),
   and the assembled result equals the whole-tensor result.  Backward passes
   produce partial gradients over input regions, summed at those regions.
Bad inputs raise ValueError.  ReLU, add, the LSTM cell and hidden state, batch normalization
and softmax cross-entropy are checked through the runtime, whole and split over workers, by
the conformance harness (tests/ops/test_conformance.py).
"""
from __future__ import annotations

import itertools

import numpy as np
import pytest

from shardwise import _core
from shardwise import reference as R

from isa import isa_available

TOL = 1e-4


# ----------------------------------------------------------------------------------------------
# helpers
# ----------------------------------------------------------------------------------------------
def close(got: np.ndarray, want: np.ndarray, tol: float = TOL) -> None:
    """Within tol (absolute and relative); on failure, print the first few pairs and the worst."""
    got, want = np.asarray(got, dtype=np.float64), np.asarray(want, dtype=np.float64)
    assert got.shape == want.shape, f"shape {got.shape} != {want.shape}"
    bad = ~np.isclose(got, want, rtol=tol, atol=tol)
    if bad.any():
        idx = np.argwhere(bad)[:5]
        pairs = ", ".join(f"{tuple(i)}: {got[tuple(i)]:.6g} vs {want[tuple(i)]:.6g}" for i in idx)
        worst = np.abs(got - want).max()
        raise AssertionError(f"{bad.sum()} of {bad.size} differ (worst {worst:.3g}); {pairs}")


def rand(rng: np.random.Generator, *shape: int) -> np.ndarray:
    return rng.standard_normal(shape).astype(np.float32)


def random_cuts(rng: np.random.Generator, extent: int, max_parts: int = 4) -> list[tuple[int, int]]:
    """[lo, hi) pieces covering [0, extent), 1..max_parts of them, sizes random."""
    parts = int(rng.integers(1, min(max_parts, extent) + 1))
    cuts = sorted(rng.choice(np.arange(1, extent), size=parts - 1, replace=False).tolist()) if parts > 1 else []
    bounds = [0] + cuts + [extent]
    return list(zip(bounds[:-1], bounds[1:]))


def random_boxes(rng: np.random.Generator, shape: tuple[int, ...]) -> list[tuple[tuple[int, int], ...]]:
    """A random grid partition of a tensor of `shape` into boxes ((lo, hi) per dimension)."""
    return list(itertools.product(*[random_cuts(rng, n) for n in shape]))


def box_slice(box) -> tuple[slice, ...]:
    return tuple(slice(lo, hi) for lo, hi in box)


def los(box) -> tuple[int, ...]:
    return tuple(lo for lo, _ in box)


def extents(box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


def pool_out(n: int, k: int, s: int, p: int) -> int:
    return (n + 2 * p - k) // s + 1


def pool_region(r0: int, r1: int, k: int, s: int, p: int, n: int) -> tuple[int, int]:
    """Input rows [a, b) that output rows [r0, r1) read: [r0*s - p, (r1-1)*s - p + k - 1] clipped to [0, n)."""
    return max(r0 * s - p, 0), min((r1 - 1) * s - p + k, n)


def pool_input_box(box, k, s, p, h, w):
    """The x region of an output box of pooling: same samples and channels, rows/columns with halos."""
    (n0, n1), (c0, c1), (r0, r1), (q0, q1) = box
    return ((n0, n1), (c0, c1), pool_region(r0, r1, k[0], s[0], p[0], h), pool_region(q0, q1, k[1], s[1], p[1], w))


# ----------------------------------------------------------------------------------------------
# pooling
# ----------------------------------------------------------------------------------------------
POOL_CASES = [
    # (N, C, H, W), kernel, stride, padding
    ((2, 3, 8, 8), (2, 2), (2, 2), (0, 0)),
    ((2, 3, 9, 7), (3, 3), (2, 2), (1, 1)),
    ((1, 2, 10, 9), (3, 2), (1, 2), (1, 0)),
    ((3, 2, 7, 11), (5, 3), (3, 1), (2, 1)),
    ((2, 2, 6, 6), (3, 3), (1, 1), (0, 0)),
    ((2, 2, 9, 41), (3, 3), (2, 2), (1, 1)),   # rows of 21 windows: a full 16-lane run, then 5
    # windows read as rows (strides 1 and 2, pool_argmax.c) up to the plane's last float: runs of
    # 8 and 16 windows whose whole-vector loads end exactly there, or would end past it
    ((2, 2, 3, 17), (3, 3), (2, 2), (0, 0)),
    ((2, 2, 3, 18), (3, 3), (2, 2), (0, 0)),
    ((2, 2, 3, 34), (3, 3), (2, 2), (0, 0)),
    ((2, 2, 2, 10), (2, 3), (1, 1), (0, 0)),
    ((2, 2, 2, 11), (2, 3), (1, 1), (0, 0)),
]




@pytest.fixture(params=["auto", "avx2"])
def pool_isa(request):
    """Max pooling's backward pass finds winners 16 windows at a time with AVX-512, 8 with AVX2
    (pool_argmax.c, chosen as the direct convolution's instruction set): run the test with each
    set this CPU has (process-wide, restored after)."""
    if request.param != "auto" and not isa_available(request.param):
        pytest.skip(f"this CPU has no {request.param}")
    _core.conv_isa(request.param)
    yield request.param
    _core.conv_isa("auto")


def pool_input(rng, shape, with_ties):
    """Random input; with ties, few distinct values so windows hold several maxima."""
    if with_ties:
        return rng.integers(0, 3, size=shape).astype(np.float32)
    return rand(rng, *shape)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
@pytest.mark.parametrize("with_ties", [False, True])
def test_pool_whole_tensor_matches_reference(kind, case, with_ties, pool_isa):
    shape, k, s, p = POOL_CASES[case]
    rng = np.random.default_rng(case)
    x = pool_input(rng, shape, with_ties)
    n, c, h, w = shape
    ho, wo = pool_out(h, k[0], s[0], p[0]), pool_out(w, k[1], s[1], p[1])
    y = _core.pool2d_forward(kind, x, (0, 0, 0, 0), (0, 0, 0, 0), (n, c, ho, wo), k, s, p)
    close(y, R.pool2d_forward(x, k, s, p, kind))
    dy = rand(rng, n, c, ho, wo)
    dx = _core.pool2d_backward(kind, x, (0, 0, 0, 0), dy, (0, 0, 0, 0), (0, 0, 0, 0), shape, k, s, p)
    close(dx, R.pool2d_backward(x, dy, k, s, p, kind))


@pytest.mark.parametrize("k,st,pad", [((2, 2), (2, 2), (0, 0)), ((3, 3), (2, 2), (1, 1)), ((3, 2), (1, 2), (0, 1))])
@pytest.mark.parametrize("width", [8, 45])
def test_max_pool_nan_and_infinity_rules_inside_and_at_the_border(k, st, pad, width, pool_isa):
    """A NaN wins its window (the first NaN, in row-major window order), -inf and ties keep
    the first maximum; the same in interior windows (branch-free fast path) and windows
    clipped by padding, forward value and the position the gradient goes to."""
    rng = np.random.default_rng(11)
    shape = (2, 3, 9, width)   # 45 columns: runs of 16 lanes, some with a NaN window (the scalar rule)
    x = rng.integers(-2, 3, size=shape).astype(np.float32)
    flat = x.reshape(-1)
    flat[rng.choice(flat.size, 25, replace=False)] = np.nan
    flat[rng.choice(flat.size, 25, replace=False)] = -np.inf
    n, c, h, w = shape
    ho, wo = pool_out(h, k[0], st[0], pad[0]), pool_out(w, k[1], st[1], pad[1])
    y = _core.pool2d_forward("max", x, (0, 0, 0, 0), (0, 0, 0, 0), (n, c, ho, wo), k, st, pad)
    dy = np.arange(1, n * c * ho * wo + 1, dtype=np.float32).reshape(n, c, ho, wo)
    dx = _core.pool2d_backward("max", x, (0, 0, 0, 0), dy, (0, 0, 0, 0), (0, 0, 0, 0), shape, k, st, pad)
    want_y = np.empty_like(y)
    want_dx = np.zeros_like(x)
    for b, ch, r, q in np.ndindex(n, c, ho, wo):
        cells = [(i, j) for i in range(r * st[0] - pad[0], r * st[0] - pad[0] + k[0])
                 for j in range(q * st[1] - pad[1], q * st[1] - pad[1] + k[1]) if 0 <= i < h and 0 <= j < w]
        vals = [x[b, ch, i, j] for i, j in cells]
        nans = [m for m, v in enumerate(vals) if np.isnan(v)]
        m = nans[0] if nans else max(range(len(vals)), key=lambda m: (vals[m], -m))
        want_y[b, ch, r, q] = vals[m]
        want_dx[b, ch, cells[m][0], cells[m][1]] += dy[b, ch, r, q]
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(dx, want_dx)


def test_max_pool_signed_zeros_follow_the_first_maximum(pool_isa):
    """-0 and +0 compare equal: the first of them in row-major window order is the maximum
    (its sign is the output's) and takes the gradient."""
    rng = np.random.default_rng(4)
    x = rng.choice(np.array([-0.0, 0.0, -1.0], np.float32), size=(2, 2, 7, 7))
    y = _core.pool2d_forward("max", x, (0,) * 4, (0,) * 4, (2, 2, 3, 3), 3, 2, 0)
    dy = np.arange(1, 37, dtype=np.float32).reshape(2, 2, 3, 3)
    want_dx = np.zeros_like(x)
    for b, ch, r, q in np.ndindex(2, 2, 3, 3):
        vals = [(x[b, ch, 2 * r + i, 2 * q + j], i, j) for i in range(3) for j in range(3)]
        top = max(v for v, _, _ in vals)
        v, i, j = next(t for t in vals if t[0] == top)
        assert np.signbit(y[b, ch, r, q]) == np.signbit(v) and y[b, ch, r, q] == v
        want_dx[b, ch, 2 * r + i, 2 * q + j] += dy[b, ch, r, q]
    dx = _core.pool2d_backward("max", x, (0,) * 4, dy, (0,) * 4, (0,) * 4, x.shape, 3, 2, 0)
    np.testing.assert_array_equal(dx, want_dx)


def test_pool_max_gradient_goes_to_first_maximum():
    # one window, all equal: the whole gradient lands on the top-left element
    x = np.ones((1, 1, 2, 2), np.float32)
    dy = np.full((1, 1, 1, 1), 3.0, np.float32)
    dx = _core.pool2d_backward("max", x, (0, 0, 0, 0), dy, (0, 0, 0, 0), (0, 0, 0, 0), (1, 1, 2, 2), 2, 2, 0)
    np.testing.assert_array_equal(dx[0, 0], [[3, 0], [0, 0]])
    # padding (-inf) never wins over a real element, however negative
    x = np.full((1, 1, 1, 1), -5.0, np.float32)
    y = _core.pool2d_forward("max", x, (0, 0, 0, 0), (0, 0, 0, 0), (1, 1, 1, 1), 3, 1, 1)
    assert y[0, 0, 0, 0] == -5.0
    # avg counts padding in the divisor
    y = _core.pool2d_forward("avg", np.ones((1, 1, 1, 1), np.float32), (0, 0, 0, 0), (0, 0, 0, 0), (1, 1, 1, 1),
                             3, 1, 1)
    assert y[0, 0, 0, 0] == pytest.approx(1 / 9)


@pytest.mark.parametrize("kind", ["max", "avg"])
@pytest.mark.parametrize("case", range(len(POOL_CASES)))
def test_pool_sharded_equals_whole(kind, case):
    shape, k, s, p = POOL_CASES[case]
    n, c, h, w = shape
    ho, wo = pool_out(h, k[0], s[0], p[0]), pool_out(w, k[1], s[1], p[1])
    rng = np.random.default_rng(100 + case)
    for trial in range(6):
        x = pool_input(rng, shape, with_ties=trial % 2 == 1)
        dy = rand(rng, n, c, ho, wo)
        y_full = _core.pool2d_forward(kind, x, (0,) * 4, (0,) * 4, (n, c, ho, wo), k, s, p)
        dx_full = _core.pool2d_backward(kind, x, (0,) * 4, dy, (0,) * 4, (0,) * 4, shape, k, s, p)
        y = np.full_like(y_full, np.nan)
        dx = np.zeros_like(x)
        for box in random_boxes(rng, (n, c, ho, wo)):
            region = pool_input_box(box, k, s, p, h, w)
            xr = np.ascontiguousarray(x[box_slice(region)])
            y[box_slice(box)] = _core.pool2d_forward(kind, xr, los(region), los(box), extents(box), k, s, p)
            # backward: the partial dx over the same region, from this dy box only
            dyb = np.ascontiguousarray(dy[box_slice(box)])
            part = _core.pool2d_backward(kind, xr, los(region), dyb, los(box), los(region), extents(region), k, s, p)
            dx[box_slice(region)] += part
        np.testing.assert_array_equal(y, y_full)  # the same window reads: bitwise equal
        close(dx, dx_full, 1e-5)
        close(dx, R.pool2d_backward(x, dy, k, s, p, kind))


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pool_backward_partials_over_arbitrary_dx_boxes(kind):
    # dx boxes independent of dy boxes: every (dy box, dx box) pair contributes its part
    shape, k, s, p = POOL_CASES[1]
    n, c, h, w = shape
    ho, wo = pool_out(h, k[0], s[0], p[0]), pool_out(w, k[1], s[1], p[1])
    rng = np.random.default_rng(7)
    x = pool_input(rng, shape, with_ties=True)
    dy = rand(rng, n, c, ho, wo)
    dx = np.zeros_like(x)
    for dbox in random_boxes(rng, (n, c, ho, wo)):
        dyb = np.ascontiguousarray(dy[box_slice(dbox)])
        for xbox in random_boxes(rng, shape):
            part = _core.pool2d_backward(kind, x, (0,) * 4, dyb, los(dbox), los(xbox), extents(xbox), k, s, p)
            dx[box_slice(xbox)] += part
    close(dx, R.pool2d_backward(x, dy, k, s, p, kind))


def test_pool_avg_backward_needs_no_x():
    shape, k, s, p = POOL_CASES[1]
    rng = np.random.default_rng(3)
    x = rand(rng, *shape)
    ho, wo = pool_out(shape[2], 3, 2, 1), pool_out(shape[3], 3, 2, 1)
    dy = rand(rng, shape[0], shape[1], ho, wo)
    dx = _core.pool2d_backward("avg", None, (0,) * 4, dy, (0,) * 4, (0,) * 4, shape, k, s, p)
    close(dx, R.pool2d_backward(x, dy, k, s, p, "avg"))


# ----------------------------------------------------------------------------------------------
# copy / accumulate
# ----------------------------------------------------------------------------------------------
def random_box(rng, shape):
    box = []
    for n in shape:
        lo = int(rng.integers(0, n))
        box.append((lo, int(rng.integers(lo, n + 1))))  # may be empty
    return tuple(box)


@pytest.mark.parametrize("rank", [1, 2, 3, 4, 5])
def test_copy_and_accumulate_boxes(rank):
    rng = np.random.default_rng(rank)
    for _ in range(40):
        shape = tuple(int(v) for v in rng.integers(1, 6, size=rank))
        g = rand(rng, *shape)
        sbox, dbox = random_box(rng, shape), random_box(rng, shape)
        src = np.ascontiguousarray(g[box_slice(sbox)])
        dst0 = rand(rng, *extents(dbox))
        inter = tuple((max(a[0], b[0]), min(a[1], b[1])) for a, b in zip(sbox, dbox))
        want_copy, want_acc = dst0.copy(), dst0.copy()
        if all(lo < hi for lo, hi in inter):
            in_dst = tuple(slice(lo - d[0], hi - d[0]) for (lo, hi), d in zip(inter, dbox))
            want_copy[in_dst] = g[box_slice(inter)]
            want_acc[in_dst] += g[box_slice(inter)]
        dst = dst0.copy()
        assert _core.copy_box(src, los(sbox), dst, los(dbox)) is None
        np.testing.assert_array_equal(dst, want_copy)
        dst = dst0.copy()
        _core.accumulate_box(src, los(sbox), dst, los(dbox))
        np.testing.assert_array_equal(dst, want_acc)


def test_copy_box_from_a_non_contiguous_source():
    g = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    src = g[:, ::2, :]  # not contiguous: the entry point copies it first
    dst = np.zeros((3, 2, 5), np.float32)
    _core.copy_box(src, (0, 0, 0), dst, (0, 0, 0))
    np.testing.assert_array_equal(dst, src)


# ----------------------------------------------------------------------------------------------
# bad input
# ----------------------------------------------------------------------------------------------
Z4 = (0, 0, 0, 0)
X4 = np.zeros((1, 2, 4, 4), np.float32)
P2 = np.full((2, 3), 1 / 3, np.float32)

BAD_CALLS = {
    "pool float64 x": lambda: _core.pool2d_forward("max", X4.astype(np.float64), Z4, Z4, (1, 2, 2, 2), 2, 2, 0),
    "pool rank 3 x": lambda: _core.pool2d_forward("max", X4[0], (0, 0, 0), Z4, (1, 2, 2, 2), 2, 2, 0),
    "pool lo length": lambda: _core.pool2d_forward("max", X4, (0, 0), Z4, (1, 2, 2, 2), 2, 2, 0),
    "pool negative shape": lambda: _core.pool2d_forward("max", X4, Z4, Z4, (1, 2, -2, 2), 2, 2, 0),
    "pool bad kind": lambda: _core.pool2d_forward("min", X4, Z4, Z4, (1, 2, 2, 2), 2, 2, 0),
    "pool kernel 0": lambda: _core.pool2d_forward("max", X4, Z4, Z4, (1, 2, 2, 2), 0, 2, 0),
    "pool stride 0": lambda: _core.pool2d_forward("avg", X4, Z4, Z4, (1, 2, 2, 2), 2, (2, 0), 0),
    "pool negative pad": lambda: _core.pool2d_forward("avg", X4, Z4, Z4, (1, 2, 2, 2), 2, 2, -1),
    "pool channels not covered": lambda: _core.pool2d_forward("max", X4, Z4, (0, 1, 0, 0), (1, 2, 2, 2), 2, 2, 0),
    "pool float lo": lambda: _core.pool2d_forward("max", X4, (0, 0, 0.5, 0), Z4, (1, 2, 2, 2), 2, 2, 0),
    "pool max backward without x": lambda: _core.pool2d_backward(
        "max", None, Z4, np.zeros((1, 2, 2, 2), np.float32), Z4, Z4, (1, 2, 4, 4), 2, 2, 0),
    "pool max backward x misses channels": lambda: _core.pool2d_backward(
        "max", X4[:, :1].copy(), Z4, np.zeros((1, 2, 2, 2), np.float32), Z4, Z4, (1, 2, 4, 4), 2, 2, 0),
    "copy rank mismatch": lambda: _core.copy_box(X4, Z4, np.zeros((4, 4), np.float32), (0, 0)),
    "copy dst float64": lambda: _core.copy_box(X4, Z4, np.zeros((1, 2, 4, 4)), Z4),
    "copy dst not contiguous": lambda: _core.copy_box(X4[..., :2], Z4, np.zeros((1, 2, 4, 4), np.float32)[..., ::2],
                                                      Z4),
    "copy dst read-only": lambda: _core.copy_box(X4, Z4, np.broadcast_to(np.float32(0), (1, 2, 4, 4)), Z4),
    "accumulate lo length": lambda: _core.accumulate_box(X4, Z4, np.zeros((1, 2, 4, 4), np.float32), (0, 0)),
}


@pytest.mark.parametrize("name", sorted(BAD_CALLS))
def test_bad_input_raises_value_error(name):
    with pytest.raises(ValueError):
        BAD_CALLS[name]()


def test_both_kernel_families_read_their_arguments_by_the_same_rules():
    """kernel_args.c serves the convolution/linear and the misc entry points alike: NumPy integers
    are integers, booleans are not, coordinates beyond 2^40 and windows beyond 2^20 are refused."""
    x = np.arange(32, dtype=np.float32).reshape(1, 2, 4, 4)
    w = np.ones((3, 2, 1, 1), np.float32)
    as_numpy = tuple(np.int64(v) for v in (0, 0, 0, 0))
    pool = _core.pool2d_forward("max", x, as_numpy, as_numpy, (1, 2, 4, 4), np.int64(1), 1, 0)
    conv = _core.conv2d_forward(x, as_numpy, w, as_numpy, None, None, as_numpy, (1, 3, 4, 4),
                                stride=np.int32(1))
    np.testing.assert_array_equal(pool, x)
    np.testing.assert_allclose(conv, np.broadcast_to(x.sum(axis=1, keepdims=True), (1, 3, 4, 4)))
    for call in (lambda lo: _core.pool2d_forward("max", x, lo, (0, 0, 0, 0), (1, 2, 4, 4), 1, 1, 0),
                 lambda lo: _core.conv2d_forward(x, lo, w, None, None, None, None, (1, 3, 4, 4))):
        with pytest.raises(ValueError, match=r"lo\[0\] must be an integer"):
            call((True, 0, 0, 0))
        with pytest.raises(ValueError, match="out of range"):
            call((2**41, 0, 0, 0))
    with pytest.raises(ValueError, match=r"stride is out of range \[1, 1048576\]"):
        _core.conv2d_forward(x, None, w, None, None, None, None, (1, 3, 4, 4), stride=0)
    with pytest.raises(ValueError, match=r"stride must be an int or a pair of ints in \[1, 1048576\]"):
        _core.pool2d_forward("max", x, (0, 0, 0, 0), (0, 0, 0, 0), (1, 2, 2, 2), 2, (2, 0), 0)
    with pytest.raises(ValueError, match=r"kernel is out of range \[1, 1048576\]"):
        _core.pool2d_forward("max", x, (0, 0, 0, 0), (0, 0, 0, 0), (1, 2, 2, 2), 2**21, 2, 0)
