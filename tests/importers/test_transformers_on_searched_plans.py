"""Transformers train on searched plans: torchvision's vision transformers (a small
VisionTransformer and vit_b_16 at 32 px, swin_t at 32 px, maxvit_t at 224 px, the least its 7x7
partitions take) and Hugging Face's GPT2LMHeadModel, BertForSequenceClassification and
LlamaForCausalLM (test_hf_models.py's tiny random configurations), imported with sw.from_torch,
planned by sw.search on 2, 4 and 16 CPU workers and trained with SGD (momentum), Adam and AdamW.

The yardstick is test_torchvision_zoo.py's, with its helpers: a float64 copy of the PyTorch model
is the truth, and shardwise may be no further from it than three times PyTorch's own float32 runs
are (the minibatch as given and reversed; images also in the channels-last layout), plus the
zoo's small absolute slack for three steps and none for one.

- **Three steps** of each optimizer on the 2- and 4-worker searched plans: the losses and the
  weight updates against PyTorch's float64 trajectory (maxvit_t, whose MBConv blocks hold batch
  norms, against the one-worker trainer's, as the zoo's nets with batch norm are).
- **16 workers**: the searched plan (which must split more than the 2 or 4 samples) takes one
  step whose gradient is within three times PyTorch float32's error of float64's, and within
  twice that of the one-worker step's.

The models: no dropout and no stochastic depth (their draws are shardwise's, not PyTorch's), in
train mode; the ViTs' classifier heads get random weights first (torchvision initializes them
to zeros: every logit 0 and no gradient below the head at the first step).  Images: 4 random
ones (maxvit_t 2: a 224 px step is slow on CPUs); token ids: 2 sequences of 8.

Measured on a 2-core machine (updates' relative L2 distance on 2 / 4 workers, PyTorch float32's
in brackets): Adam: small ViT 1.1e-2 / 1.0e-2 (1.4e-2), vit_b_16 3.3e-4 / 3.5e-4 (8.9e-4), swin_t
1.9e-4 / 1.5e-4 (1.5e-4), maxvit_t 9.0e-4 / 1.9e-4 (2.1e-3), gpt2 7.6e-6 / 8.4e-6 (2.5e-5), bert
2.2e-6 / 2.4e-6 (1.8e-6), llama 2.9e-6 / 2.9e-6 (3.5e-6); SGD and AdamW alike.  Without the key
biases (key_biases below): small ViT 2.7e-6 / 2.7e-6 (2.7e-6), vit_b_16 2.2e-4 / 2.3e-4 (2.9e-4),
gpt2 2.0e-6 / 2.2e-6 (2.4e-6).  The 16-worker gradients: 2.9e-7 to 2.0e-6 of a gradient's largest
entry, PyTorch float32's 2.9e-7 to 2.3e-6 (maxvit_t 2.3e-5, float32's 2.0e-4).  sw.search on 16
workers takes 5 s on swin_t (1,246 ops) and 13 s on maxvit_t (2,151), so no time_limit is set.
The slow cases take 15 s (small ViT) to 6 min (maxvit_t) a model, 12 min in all.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")

from test_torchvision_zoo import Net, check_sixteen_workers, check_three_steps, OPTIMIZERS  # noqa: E402
from test_torchvision_norm import _torchvision  # noqa: E402
from test_torchvision_swin import _one_torch_thread, _without_random_drops  # noqa: E402,F401  (the fixture: autouse)
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


# Key biases: b_k adds q . b_k to every score of a query's row, which the softmax cancels, so its
# gradient is 0 in exact arithmetic and float32's rounding noise in PyTorch's runs as in shardwise's
# (Adam moves them by up to lr a step on it: the small ViT's updates are 1e-2 off float64's, and
# 2.7e-6 without them, PyTorch's float32 run as shardwise's).  Packed projections hold them as the
# middle third of (q, k, v).
PACKED_QKV_BIASES = ("self_attention.in_proj_bias", "attn.qkv.bias", "to_qkv.bias", "attn.c_attn.bias")
KEY_BIASES = ("attention.self.key.bias",)   # BERT's own key projection


def key_biases(model: torch.nn.Module) -> dict[str, slice]:
    """The model's key biases: parameter name -> its rows that hold them."""
    rows = {}
    for name, p in model.named_parameters():
        if name.endswith(PACKED_QKV_BIASES):
            third = p.shape[0] // 3
            rows[name] = slice(third, 2 * third)
        elif name.endswith(KEY_BIASES):
            rows[name] = slice(None)
    return rows


def imported(name: str) -> Net:
    """MODELS[name] in train mode, imported, with its minibatch."""
    build, batch = MODELS[name]
    model = build().train()
    x, y = batch()
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    missing = sorted({k for k, _ in model.named_parameters()} - set(weights))
    assert not missing, f"from_torch's weights lack {len(missing)} of the model's parameters: {missing[:4]}, ..."
    return Net(name, model, x, y, g, weights, transposed=frozenset(hf.conv1d_names(model)),
               zero_gradients=key_biases(model))


@pytest.fixture
def net(request) -> Net:
    return imported(request.param)


@pytest.mark.parametrize("net, optimizer", [
    pytest.param(n, o, id=f"{n}-{o}", marks=() if o in QUICK.get(n, ()) else slow) for n in MODELS for o in OPTIMIZERS],
    indirect=["net"])
def test_three_steps_on_searched_plans(net, optimizer):
    measured = check_three_steps(net, optimizer)
    print(f"{net.name} {optimizer}: " + ", ".join(f"{k}: " + " ".join(f"{d:.2g}" for d in v)
                                                   for k, v in measured.items()))


# The gradient is the weights' change over this learning rate: with lr 1, float32's rounding of
# w - g at a norm's weight of 1 (6e-8) is alone 34 to 180 times PyTorch float32's gradient error
# here (gpt2, llama, bert, swin_t: 1e-5 to 6e-5 of a gradient's largest entry, on one worker as on
# 16, against 3e-7 to 1.6e-6); at 1000 the change rounds at the gradient's own scale and the
# distances fall to float32's (2.9e-7 to 2e-6), so no slack is added to three times PyTorch's.
LR = 1000.0


@pytest.mark.parametrize("net", [pytest.param(n, id=n, marks=slow) for n in MODELS], indirect=True)
def test_sixteen_worker_plans_train(net):
    measured = check_sixteen_workers(net, lr=LR, slack=0.0)
    print(f"{net.name} 16 workers: " + ", ".join(f"{k} {v:.2g}" for k, v in measured.items()))
