"""Transformers train on searched plans: torchvision's vision transformers (a small
VisionTransformer and vit_b_16 at 32 px, swin_t at 32 px, maxvit_t at 224 px, the least its 7x7
partitions take) and Hugging Face's GPT2LMHeadModel, BertForSequenceClassification and
LlamaForCausalLM (test_hf_models.py's tiny random configurations), imported with sw.from_torch,
planned by sw.search on 2, 4 and 16 CPU workers and trained with SGD (momentum), Adam and AdamW.

The yardstick is test_torchvision_zoo.py's, with its helpers: a float64 copy of the PyTorch model
is the truth, and shardwise may be no further from it than three times PyTorch's own float32 runs
are (the minibatch as given and reversed; images also in the channels-last layout), plus a small
absolute slack.

- **Three steps** of each optimizer on the 2- and 4-worker searched plans: the losses and the
  weight updates against PyTorch's float64 trajectory (maxvit_t, whose MBConv blocks hold batch
  norms, against the one-worker trainer's, as the zoo's nets with batch norm are).
- **16 workers**: the searched plan (which must split more than the 2 or 4 samples) takes one
  step whose gradient meets the same bound, and is within twice of the one-worker step's.

The models: no dropout and no stochastic depth (their draws are shardwise's, not PyTorch's), in
train mode; the ViTs' classifier heads get random weights first (torchvision initializes them
to zeros: every logit 0 and no gradient below the head at the first step).  Images: 4 random
ones (maxvit_t 2: a 224 px step is slow on CPUs); token ids: 2 sequences of 8.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")

from test_torchvision_zoo import Net, check_sixteen_workers, check_three_steps, OPTIMIZERS  # noqa: E402
from test_torchvision_norm import _torchvision  # noqa: E402
from test_torchvision_swin import _without_random_drops  # noqa: E402
from test_torchvision_vit import _small_vit  # noqa: E402
import test_hf_models as hf  # noqa: E402  (skips the module without transformers)

tv = _torchvision()
slow = pytest.mark.slow


def _random_head(model: torch.nn.Module, std: float) -> torch.nn.Module:
    """A ViT with random classifier weights instead of torchvision's zeros."""
    with torch.no_grad():
        model.heads.head.weight.normal_(0.0, std)
        model.heads.head.bias.normal_(0.0, std)
    return model


def _images(n: int, px: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(0)
    return rng.standard_normal((n, 3, px, px)).astype(np.float32), rng.integers(0, 10, n)


def _next_tokens(seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Token ids (2, 8) and, as labels, the ids that follow each."""
    ids = hf.token_ids(seed).numpy()
    return ids[:, :-1], ids[:, 1:]


def _seeded(build):
    def seeded():
        torch.manual_seed(0)
        return build()
    return seeded


# name: (the model (seeded), the minibatch (x, y))
MODELS = {
    "small_vit": (_small_vit, lambda: _images(4, 32)),
    "vit_b_16": (_seeded(lambda: _random_head(tv.models.vit_b_16(image_size=32, num_classes=10), 0.05)),
                 lambda: _images(4, 32)),
    "swin_t": (_seeded(lambda: _without_random_drops(tv.models.swin_t(weights=None, num_classes=10))),
               lambda: _images(4, 32)),
    "maxvit_t": (_seeded(lambda: _without_random_drops(tv.models.maxvit_t(weights=None, num_classes=10))),
                 lambda: _images(2, 224)),
    "gpt2": (hf.gpt2, lambda: _next_tokens(1)),
    "bert": (hf.bert, lambda: (hf.token_ids(2).numpy()[:, :-1], np.array([0, 2]))),
    "llama": (hf.llama, lambda: _next_tokens(3)),
}
# In the default run: one small model of each family, each check under ~10 s on a 2-core machine;
# the rest is marked slow.
QUICK = {"small_vit": ("adam",), "llama": ("adam",)}


@pytest.fixture
def net(request) -> Net:
    name = request.param
    build, batch = MODELS[name]
    model = build().train()
    x, y = batch()
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    missing = sorted({k for k, _ in model.named_parameters()} - set(weights))
    assert not missing, f"from_torch's weights lack {len(missing)} of the model's parameters: {missing[:4]}, ..."
    return Net(name, model, x, y, g, weights, transposed=frozenset(hf.conv1d_names(model)))


@pytest.mark.parametrize("net, optimizer", [
    pytest.param(n, o, id=f"{n}-{o}", marks=() if o in QUICK.get(n, ()) else slow) for n in MODELS for o in OPTIMIZERS],
    indirect=["net"])
def test_three_steps_on_searched_plans(net, optimizer):
    measured = check_three_steps(net, optimizer)
    print(f"{net.name} {optimizer}: " + ", ".join(f"{k}: losses {loss:.2g} updates {w:.2g}"
                                                   for k, (loss, w) in measured.items()))


@pytest.mark.parametrize("net", [pytest.param(n, id=n, marks=slow) for n in MODELS], indirect=True)
def test_sixteen_worker_plans_train(net):
    measured = check_sixteen_workers(net)
    print(f"{net.name} 16 workers: " + ", ".join(f"{k} {v:.2g}" for k, v in measured.items()))
