"""torchvision's models imported from their ONNX export train like PyTorch: exported in eval mode
by PyTorch's default exporter (``dynamo=True``, ``optimize=False``, as
test_torchvision_onnx_zoo.py exports), imported with sw.from_onnx (every weight under its
``state_dict`` name), planned by sw.search on 2 and 4 CPU workers and trained three steps in
train mode (batch norms normalize with the minibatch's statistics) against PyTorch.

The models: those whose ONNX import is not the network from_torch builds
(test_torchvision_onnx_same_net.py carries test_torchvision_zoo.py's comparison over to the
rest): densenet121 and mnasnet0_5, and the vision transformers (the small VisionTransformer of
test_torchvision_onnx_zoo.py, vit_b_16 at 32 px, swin_t at 32 px, maxvit_t at 224 px: its 7x7
partitions need it), each with SGD (momentum), Adam and AdamW; and resnet18 and mobilenet_v2
with SGD.  No dropout and no stochastic depth (their draws are shardwise's, not PyTorch's), and
ViT's zero classifier head given random weights (else every logit is 0).

The yardstick is test_torchvision_zoo.py's, with its helpers: its minibatch (4 random images)
and optimizers; a float64 copy of the PyTorch model trained the same way is the truth, and the
imported model's losses and weight updates may be no further from it than three times PyTorch's
own float32 runs are (the largest of four: the minibatch as given and reversed, contiguous and
channels-last), plus 1e-5 of the first loss and 1e-3 of the updates' norm; the first step's loss
(same weights, same minibatch) within three times float32's own error of it.

Measured (updates' relative L2 distance from float64 on 2 workers, 4 workers' the same or
less; PyTorch float32's in brackets): resnet18, SGD 2.4e-5 (4.0e-5); mobilenet_v2, SGD 0.63 (0.54);
densenet121, SGD 0.018, Adam 0.029, AdamW 0.020 (0.14 each); mnasnet0_5, SGD 0.14 (0.15), Adam
and AdamW 0.28 (0.28); small_vit, SGD 1.0e-6 (1.1e-6), Adam 0.011 (0.017), AdamW 8.7e-3 (0.013);
vit_b_16, SGD 2.0e-6 (1.9e-6), Adam and AdamW 9.8e-4 (2.4e-3); swin_t, SGD 7.9e-6 (7.9e-6),
Adam and AdamW 1.5e-4 (1.4e-4); maxvit_t, SGD 1.8e-5 (1.9e-5), Adam and AdamW 8.6e-4 (2.2e-3).
The float32 runs of the batch-norm nets at 64 px part from float64 within three steps (a ReLU
input within rounding of its kink flips its gradient, as test_torchvision_zoo.py says):
mobilenet_v2's and mnasnet0_5's bounds say little beyond the first loss (mnasnet0_5's losses
2.6 off float64 with SGD, PyTorch float32's 3.8; test_torchvision_onnx_same_net.py shows its
import steps bit for bit as from_torch's does).  The rest are tight.  All are marked slow: an
export takes 5 to 60 s, maxvit_t's cases minutes each (18 minutes for its three on a busy
2-core machine).
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
pytest.importorskip("onnx", reason="onnx not installed: pip install onnx")
pytest.importorskip("onnxscript", reason="torch.onnx's dynamo exporter needs onnxscript: pip install onnxscript")

from test_torchvision_onnx_zoo import export, small_vit  # noqa: E402  (skips the module without torchvision)
from test_torchvision_zoo import (BATCH, FLOAT32_RUNS, OPTIMIZERS, M, Net, distances, model_and_batch,  # noqa: E402
                                  shardwise_steps, torch_steps)
from test_torchvision_norm import _torchvision  # noqa: E402

StochasticDepth = _torchvision().ops.StochasticDepth

# name: (constructor arguments beyond weights=None, num_classes=10; image size)
TRANSFORMERS = {
    "small_vit": ({}, 32),
    "vit_b_16": ({"image_size": 32, "dropout": 0.0}, 32),
    "swin_t": ({"dropout": 0.0}, 32),
    "maxvit_t": ({}, 224),
}
CASES = [("resnet18", "sgd"), ("mobilenet_v2", "sgd"),
         *((name, optimizer) for name in ["densenet121", "mnasnet0_5", *TRANSFORMERS] for optimizer in OPTIMIZERS)]


def transformer_and_batch(name: str):
    """TRANSFORMERS[name]'s model (seeded, train mode, no stochastic depth, a random ViT head) and
    a random minibatch (x, y) at its image size."""
    kwargs, px = TRANSFORMERS[name]
    torch.manual_seed(0)
    model = small_vit() if name == "small_vit" else getattr(M, name)(weights=None, num_classes=10, **kwargs)
    for m in model.modules():   # swin_t and maxvit_t set their own stochastic depth
        if isinstance(m, StochasticDepth):
            m.p = 0.0
    heads = getattr(model, "heads", None)
    if heads is not None:   # torchvision's zero ViT head would make every logit 0
        with torch.no_grad():
            heads.head.weight.normal_(0.0, 0.2)
            heads.head.bias.normal_(0.0, 0.2)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((BATCH, 3, px, px)).astype(np.float32)
    return model.train(), x, rng.integers(0, 10, BATCH)


_NETS: dict = {}   # name -> its Net, imported once per session (an export takes up to a minute)


def onnx_net(name: str, folder) -> Net:
    """The model and minibatch (test_torchvision_zoo.py's, or a transformer's), imported from its
    eval-mode ONNX export."""
    if name not in _NETS:
        model, x, y = transformer_and_batch(name) if name in TRANSFORMERS else model_and_batch(name)
        g, weights = sw.from_onnx(export(copy.deepcopy(model).eval(), x, str(folder / f"{name}.onnx")))
        # Swin's and MaxViT's relative position indices are constants of the graph
        state = {k for k in model.state_dict() if not k.endswith(("num_batches_tracked", "relative_position_index"))}
        assert set(weights) == state, sorted(set(weights) ^ state)[:4]
        # the net's own name for sw.search's plans (Net.plan keeps them by name): not from_torch's graph
        _NETS[name] = Net(f"{name}-onnx", model, x, y, g, weights)
    return _NETS[name]


@pytest.mark.slow
@pytest.mark.parametrize("name, optimizer", [pytest.param(n, o, id=f"{n}-{o}") for n, o in CASES])
def test_onnx_import_trains_as_pytorch(tmp_path_factory, name, optimizer):
    net = onnx_net(name, tmp_path_factory.mktemp(name))
    exact = torch_steps(net, optimizer, torch.float64)
    runs32 = [torch_steps(net, optimizer, torch.float32, *run) for run in FLOAT32_RUNS]
    loss32, weights32 = (max(d) for d in zip(*(distances(run32, exact) for run32 in runs32)))
    first32 = max(abs(run32[0][0] - exact[0][0]) for run32 in runs32)
    for workers in (2, 4):
        run = shardwise_steps(net, net.plan(workers), optimizer)
        assert np.isfinite(run[0]).all(), f"{workers} workers: losses {run[0]}"
        assert abs(run[0][0] - exact[0][0]) <= 3 * first32 + 1e-5 * abs(exact[0][0]), \
            f"{workers} workers: first loss {run[0][0]} against PyTorch float64's {exact[0][0]}; float32's error " \
            f"{first32:.3g}"
        loss, weights = distances(run, exact)
        print(f"{name}, {optimizer}, {workers} workers: losses {loss:.2g} off float64 (float32 {loss32:.2g}), "
              f"updates {weights:.2g} (float32 {weights32:.2g})")
        assert loss <= 3 * loss32 + 1e-5 * abs(exact[0][0]), \
            f"{workers} workers: losses {run[0]} off PyTorch float64's {exact[0]} by {loss:.3g}; float32's {loss32:.3g}"
        assert weights <= 3 * weights32 + 1e-3, \
            f"{workers} workers: updates {weights:.3g} off PyTorch float64's; PyTorch float32's off them by " \
            f"{weights32:.3g}"
