"""torchvision's Swin Transformer and MaxViT through from_torch: window attention, its shifted
windows and relative position bias, patch merging, MaxViT's block and grid partitions.

The compositions that rebuild torchvision's wrapped functions (python/shardwise/importers/torch/
windows.py, maxvit.py) are checked one by one against PyTorch (the NumPy reference runs the
graph: the data movement must be exact), then whole models with random weights on small images:
``Trainer.forward`` in eval mode against PyTorch's float64 run (within 1e-5 of the logits'
scale), and one training step's gradients on a 2-worker searched plan against PyTorch's float64
ones, no further off than PyTorch's own float32 gradients (times 3).  swin_t and maxvit_t
themselves are slow tests (maxvit_t needs 224-pixel images: its 7x7 partitions must divide
every stage).  test_transformers_on_searched_plans.py trains swin_t and maxvit_t with SGD, Adam
and AdamW on plans searched on 2, 4 and 16 workers.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw
from shardwise import reference

torch = pytest.importorskip("torch")

from test_torchvision_norm import _torchvision  # noqa: E402

try:
    tv = _torchvision()
except ImportError:
    pytest.skip("torchvision is not installed", allow_module_level=True)

from torchvision.models import maxvit as tv_maxvit  # noqa: E402
from torchvision.models import swin_transformer as tv_swin  # noqa: E402

from shardwise.importers.windows import relative_position_bias, relative_position_index, roll  # noqa: E402


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """PyTorch on one thread while these tests run: its float64 references of these small
    models are ten times slower with a thread pool on a machine whose cores are busy."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _small_swin() -> torch.nn.Module:
    """Two stages of two blocks (the second of each shifted), 4x4 windows, 16 channels."""
    return tv_swin.SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2],
                                   window_size=[4, 4], stochastic_depth_prob=0.0, num_classes=10)


def _small_maxvit(size: int) -> torch.nn.Module:
    """Two MaxViT blocks of one layer each (MBConv, block attention, grid attention), 2x2 partitions."""
    return tv_maxvit.MaxVit(input_size=(size, size), stem_channels=8, partition_size=2, block_channels=[8, 16],
                            block_layers=[1, 1], head_dim=4, stochastic_depth_prob=0.0, num_classes=10)


def _without_random_drops(model: torch.nn.Module) -> torch.nn.Module:
    """Stochastic depth and dropout off: their draws are shardwise's, not PyTorch's stream."""
    for m in model.modules():
        if isinstance(m, (tv.ops.StochasticDepth, torch.nn.Dropout)):
            m.p = 0.0
    return model


def _run(g: sw.Graph, weights: dict, x: np.ndarray) -> np.ndarray:
    """The graph's last op before its softmax, run by the NumPy reference in float64."""
    acts = reference.forward(g, g.graph_weights(weights), x.astype(np.float64), training=False)
    return acts[g.ops[g.ops[-1].inputs[0]].name]


class _Flat(torch.nn.Module):
    """``f(x)`` flattened to (N, features), the form from_torch takes as a model's output."""

    def __init__(self, f):
        super().__init__()
        self.f = f

    def forward(self, x):
        return self.f(x).flatten(1)


# ----------------------------------------------------------------------------- the compositions
@pytest.mark.parametrize("shift,dim", [(-3, 1), (3, 1), (-1, 2), (2, 2), (7, 2), (0, 1), (-8, 2)])
def test_roll_is_torch_roll(shift, dim):
    """torch.roll as two slices and a concat, both directions, shifts beyond the size, none."""
    x = np.random.default_rng(0).standard_normal((2, 5, 6, 3))
    g = sw.Graph("roll")
    y = roll(g, g.input("x", x.shape), shift, dim, "roll")
    got = reference.forward(g, {}, x)[g.ops[y.op].name]
    np.testing.assert_array_equal(got, torch.roll(torch.tensor(x), shift, dim).numpy())


@pytest.mark.parametrize("window,heads", [((4, 4), 2), ((7, 7), 3), ((3, 5), 1), ((1, 2), 2)])
def test_relative_position_bias_gathers_torchvisions_index(window, heads):
    """The table (L_h * L_w, heads) gathered by slices of it reversed equals torchvision's gather
    by its relative_position_index (the index this module computes is torchvision's too)."""
    attn = tv_swin.ShiftedWindowAttention(4 * heads, list(window), [0, 0], heads)
    want = tv_swin._get_relative_position_bias(attn.relative_position_bias_table, attn.relative_position_index,
                                               list(window)).detach().numpy()
    np.testing.assert_array_equal(relative_position_index(*window), attn.relative_position_index.numpy())
    g = sw.Graph("bias")
    g.input("x", (1, 1))
    table = g.parameter(tuple(attn.relative_position_bias_table.shape), name="table")
    y = relative_position_bias(g, table, *window, "bias")
    weights = {"table.weight": attn.relative_position_bias_table.detach().numpy()}
    got = reference.forward(g, weights, np.zeros((1, 1), np.float32))[g.ops[y.op].name]
    assert got.shape == want.shape == (1, heads, window[0] * window[1], window[0] * window[1])
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("size,shift", [((8, 8), [2, 2]), ((6, 7), [2, 2]), ((4, 9), [2, 2]), ((5, 5), [0, 0])])
def test_shifted_window_attention(size, shift):
    """One (shifted) window attention on maps that need padding, and a shift one axis drops
    (the window covers it): padding, roll, partition, the mask and the bias against torchvision's."""
    torch.manual_seed(0)
    attn = tv_swin.ShiftedWindowAttention(8, [4, 4], shift, 2).eval()
    x = np.random.default_rng(1).standard_normal((2, *size, 8)).astype(np.float32)
    g, weights = sw.from_torch(_Flat(attn), (torch.tensor(x),))
    with torch.no_grad():
        want = attn.double()(torch.tensor(x, dtype=torch.float64)).flatten(1).numpy()
    np.testing.assert_allclose(_run(g, weights, x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("size", [(4, 6), (5, 7)])
def test_patch_merging(size):
    """PatchMerging's strided slices (step 2) after padding odd sizes to even ones."""
    torch.manual_seed(0)
    merge = tv_swin.PatchMerging(3).eval()
    x = np.random.default_rng(2).standard_normal((2, *size, 3)).astype(np.float32)
    g, weights = sw.from_torch(_Flat(merge), (torch.tensor(x),))
    assert any(op.kind == "slice" and op.attrs["step"] == 2 for op in g.ops)
    with torch.no_grad():
        want = merge.double()(torch.tensor(x, dtype=torch.float64)).flatten(1).numpy()
    np.testing.assert_allclose(_run(g, weights, x), want, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("p,grid", [(2, False), (3, False), (2, True)])
def test_maxvit_window_and_grid_partition(p, grid):
    """MaxViT's WindowPartition (and SwapAxes for the grid), then WindowDepartition of a
    different function of the windows: both directions, rank 6 in PyTorch, within 5 here."""
    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.part, self.depart = tv_maxvit.WindowPartition(), tv_maxvit.WindowDepartition()
            self.swap = tv_maxvit.SwapAxes(-2, -3)

        def forward(self, x):
            w = self.part(x, p)
            if grid:
                w = self.swap(w)
            w = torch.relu(w) * w[:, :, :1]     # something that tells the windows and tokens apart
            if grid:
                w = self.swap(w)
            return torch.cat([self.depart(w, p, 6 // p, 12 // p), x], 1).flatten(1)

    x = np.random.default_rng(3).standard_normal((2, 3, 6, 12)).astype(np.float32)
    g, weights = sw.from_torch(Net(), (torch.tensor(x),))
    with torch.no_grad():
        want = Net()(torch.tensor(x, dtype=torch.float64)).numpy()
    np.testing.assert_array_equal(_run(g, weights, x), want)


def test_refusals_name_what_is_missing():
    """A relative position index other than torchvision's, and Swin V2's cosine attention."""
    attn = tv_swin.ShiftedWindowAttention(8, [2, 2], [0, 0], 2)
    attn.relative_position_index.copy_(attn.relative_position_index.flip(0))
    with pytest.raises(sw.ModelImportError, match="relative position index"):
        sw.from_torch(_Flat(attn), (torch.zeros(1, 4, 4, 8),))
    v2 = tv_swin.SwinTransformer(patch_size=[4, 4], embed_dim=8, depths=[2], num_heads=[2], window_size=[2, 2],
                                 num_classes=3, block=tv_swin.SwinTransformerBlockV2,
                                 downsample_layer=tv_swin.PatchMergingV2)
    with pytest.raises(sw.ModelImportError, match="cpb_mlp"):   # its continuous position bias
        sw.from_torch(v2, (torch.zeros(1, 3, 16, 16),))


# ----------------------------------------------------------------------------- whole models
def _check_eval(model: torch.nn.Module, size: int, workers: int = 1, search: bool = False) -> float:
    """Trainer.forward in eval mode against PyTorch's float64 logits, predict against their
    softmax; returns the error relative to the logits' scale."""
    torch.manual_seed(0)
    model = model.eval()
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    d = sw.DeviceGraph.cpu(workers)
    t = sw.Trainer(g, sw.search(g, d) if search else sw.strategies.data_parallel(g, d))
    t.set_weights(weights)
    t.eval()
    with torch.no_grad():
        want = copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    got = t.forward(x)
    scale = float(np.abs(want).max())
    err = float(np.abs(got - want).max()) / scale
    assert got.shape == want.shape
    assert err <= 1e-5, f"forward {err:.3g} off PyTorch's float64 logits (scale {scale:.3g})"
    probs = torch.softmax(torch.tensor(want), 1).numpy()
    np.testing.assert_allclose(t.predict(x), probs, atol=1e-5)
    return err


def _grad_error(grads: dict, want: dict) -> float:
    """The largest error of any parameter's gradient, relative to that gradient's largest entry."""
    return max(float(np.abs(grads[k] - want[k]).max()) / max(float(np.abs(want[k]).max()), 1e-3) for k in want)


LR = 1000.0


def _check_gradients(model: torch.nn.Module, size: int, search: bool = True) -> tuple[float, float]:
    """One SGD step on a 2-worker plan against PyTorch's float64 gradients, no further off than
    PyTorch's float32 ones times 3.  The weights' change is LR times the gradient: with LR = 1,
    float32's rounding of w - g near w = 1 (layer norms' weights) would alone be 6e-8, more
    than a small gradient's error; a change large beside w rounds at the gradient's own scale."""
    torch.manual_seed(0)
    model = _without_random_drops(model).train()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((4, 3, size, size)).astype(np.float32)
    y = rng.integers(0, 10, 4)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    d = sw.DeviceGraph.cpu(2)
    t = sw.Trainer(g, sw.search(g, d) if search else sw.strategies.data_parallel(g, d), optimizer=sw.SGD(lr=LR))
    t.set_weights(weights)
    t.step(x, y)
    after = t.get_weights()
    names = [k for k, _ in model.named_parameters()]
    assert set(names) <= set(weights)   # the model's own names, the relative position tables' included
    got = {k: (weights[k].astype(np.float64) - after[k]) / LR for k in names}
    grads = {}
    for dtype in (torch.float64, torch.float32):
        ref = copy.deepcopy(model).to(dtype)
        torch.nn.functional.cross_entropy(ref(torch.tensor(x, dtype=dtype)), torch.tensor(y)).backward()
        grads[dtype] = {k: p.grad.double().numpy() for k, p in ref.named_parameters()}
    ours, theirs = _grad_error(got, grads[torch.float64]), _grad_error(grads[torch.float32], grads[torch.float64])
    assert ours <= 3 * theirs, f"gradients {ours:.3g} off PyTorch's float64 ones; its float32 ones {theirs:.3g}"
    return ours, theirs


@pytest.mark.parametrize("size", [32, 28])
def test_small_swin_predicts_as_pytorch(size):
    """28 pixels: 7x7 maps padded to 8x8 windows; 32: 8x8, then 4x4 with one window (no shift)."""
    _check_eval(_small_swin(), size)


def test_small_swin_on_a_searched_plan():
    _check_eval(_small_swin(), 32, workers=2, search=True)


def test_small_swin_gradients_as_accurate_as_pytorch_float32():
    _check_gradients(_small_swin(), 32)


def test_small_maxvit_predicts_as_pytorch():
    _check_eval(_small_maxvit(32), 32, workers=2)


def test_small_maxvit_gradients_as_accurate_as_pytorch_float32():
    """16 pixels: 8x8 after the stem, 4x4 and 2x2 maps, each in 2x2 windows and a 2x2 grid."""
    _check_gradients(_small_maxvit(16), 16)


@pytest.mark.slow
def test_swin_t_predicts_as_pytorch():
    """swin_t at 32 pixels: 8x8 maps padded to two 7x7 windows a side (shifted, masked), then
    one window per stage."""
    _check_eval(tv.models.swin_t(weights=None, num_classes=10), 32)


@pytest.mark.slow
def test_swin_t_gradients_as_accurate_as_pytorch_float32():
    _check_gradients(tv.models.swin_t(weights=None, num_classes=10), 32)


@pytest.mark.slow
def test_maxvit_t_predicts_as_pytorch():
    _check_eval(tv.models.maxvit_t(weights=None, num_classes=10), 224)


@pytest.mark.slow
def test_maxvit_t_gradients_as_accurate_as_pytorch_float32():
    _check_gradients(tv.models.maxvit_t(weights=None, num_classes=10), 224)
