"""sw.from_torch and sw.from_onnx on sequence models: a GPT-2 style block stack (tests/torch_gpt.py,
and a variant spelling attention as nanoGPT does: scaled scores, a causal mask from a buffer,
masked_fill, softmax) and LSTMs (embedding, nn.LSTM with batch_first=True, a head on the last
step or on every step).

Imported forward outputs must equal PyTorch's (float64, the same weights) within 1e-5; three
SGD steps (momentum, weight decay) on one worker, data parallelism over 2 CPU workers and a
random plan must give PyTorch's losses and weights within 1e-4 (LSTM weights compared through
their PyTorch tensors: the imported parameters are row blocks of them); the dynamo ONNX export
of the GPT imports as the graph from_torch builds.
"""
from __future__ import annotations

import copy
import math
import warnings

import numpy as np
import pytest

import shardwise as sw
from strategies_random import random_plan
from training_checks import RTOL, assert_close_weights

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
from torch_gpt import Attention, TorchGPT  # noqa: E402

nn = torch.nn
F = torch.nn.functional

N, T, V, D, H, L = 4, 8, 64, 32, 4, 2


class MaskedAttention(Attention):
    """nanoGPT's spelling: (q @ k^T) * scale, masked_fill from a tril buffer, softmax, @ v."""

    def __init__(self, d: int, heads: int, seq: int = T) -> None:
        super().__init__(d, heads)
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq)).view(1, 1, seq, seq))

    def forward(self, x):
        n, t, d = x.size()
        q, k, v = (f(x).view(n, t, self.heads, d // self.heads).transpose(1, 2) for f in (self.q, self.k, self.v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(n, t, d))


def masked_gpt() -> nn.Module:
    model = TorchGPT(L, D, H, T, V)
    for block in model.h:
        old = block.attn
        block.attn = MaskedAttention(D, H)
        block.attn.load_state_dict(old.state_dict(), strict=False)
    return model


class LSTMNet(nn.Module):
    """Token embedding, an LSTM, a linear head on the last step (or on every step)."""

    def __init__(self, layers: int = 2, every: bool = False, bias: bool = True) -> None:
        super().__init__()
        self.every = every
        self.emb = nn.Embedding(V, 6)
        self.lstm = nn.LSTM(6, 8, num_layers=layers, batch_first=True, bias=bias)
        self.fc = nn.Linear(8, 5)

    def forward(self, ids):
        out, (h, c) = self.lstm(self.emb(ids))
        return self.fc(out) if self.every else self.fc(out[:, -1])


class LSTMState(nn.Module):
    """A float sequence in, the head on the last layer's final hidden state h_n[-1]."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm, self.fc = nn.LSTM(3, 7, num_layers=2, batch_first=True), nn.Linear(7, 4)

    def forward(self, x):
        _, (h, _) = self.lstm(x)
        return self.fc(h[-1])


def make(name: str):
    """(model, example input, labels) of one model, from a fixed seed."""
    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    ids = torch.from_numpy(rng.integers(0, V, (N, T)))
    if name in ("gpt", "gpt_masked"):
        model = TorchGPT(L, D, H, T, V) if name == "gpt" else masked_gpt()
        return model, ids, rng.integers(0, V, (N, T))
    if name == "lstm_state":
        return LSTMState(), torch.from_numpy(rng.standard_normal((N, 5, 3)).astype(np.float32)), rng.integers(0, 4, N)
    every = name == "lstm_every"
    model = LSTMNet(layers=1 if every else 2, every=every, bias=name != "lstm_nobias")
    return model, ids, rng.integers(0, 5, (N, T) if every else N)


NAMES = ["gpt", "gpt_masked", "lstm", "lstm_every", "lstm_nobias", "lstm_state"]


def torch_weights(model, weights: dict) -> dict[str, np.ndarray]:
    """The imported weights put back into PyTorch's state_dict layout: an LSTM's parameters
    (``<p>.l<l>.<gate>.ih``, ``.hh``, ``.hh_bias``) are row blocks of its four tensors."""
    out = {k: v for k, v in weights.items() if ".l0." not in k and ".l1." not in k}
    for name, m in model.named_modules():
        if isinstance(m, nn.LSTM):
            for layer in range(m.num_layers):
                parts = {"weight_ih": "ih.weight", "weight_hh": "hh.weight"}
                if m.bias:
                    parts.update({"bias_ih": "ih.bias", "bias_hh": "hh_bias.weight"})
                for tensor, key in parts.items():
                    out[f"{name}.{tensor}_l{layer}"] = np.concatenate(
                        [weights[f"{name}.l{layer}.{gate}.{key}"] for gate in "ifgo"])
    return out


def params(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy().copy() for k, v in model.named_parameters()}


def torch_forward(model, x) -> np.ndarray:
    m = copy.deepcopy(model).double()
    x = x if not x.dtype.is_floating_point else x.double()
    return torch.softmax(m(x), -1).detach().numpy()


@pytest.mark.parametrize("name", NAMES)
def test_forward_equals_pytorch(name):
    model, x, _ = make(name)
    g, weights = sw.from_torch(model, (x,))
    assert torch_weights(model, weights).keys() == params(model).keys()
    for k, v in torch_weights(model, weights).items():
        np.testing.assert_array_equal(v, params(model)[k])
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))
    t.set_weights(weights)
    np.testing.assert_allclose(t.predict(x.numpy()), torch_forward(model, x), atol=1e-5, rtol=0)


def structure(g):
    return [(op.kind, op.shape, op.inputs, op.attrs) for op in g.ops]


def assert_imports_alike(g, weights, gt, weights_t) -> None:
    """An ONNX export's import (g, weights) is from_torch's (gt, weights_t): the same ops (kinds,
    shapes, inputs, attributes) and the same weights under the same names."""
    assert structure(g) == structure(gt)
    assert sorted(weights) == sorted(weights_t)
    for k in weights_t:
        np.testing.assert_array_equal(weights[k], weights_t[k])


@pytest.mark.parametrize("name", ["gpt", "gpt_masked"])
def test_gpt_imports_as_sw_models_gpt(name):
    """Both spellings of attention become the builder's composition: the graph of sw.models.gpt,
    with the PyTorch model's state_dict keys as weights."""
    model, ids, _ = make(name)
    g, weights = sw.from_torch(model, (ids,))
    assert structure(g) == structure(sw.models.gpt_tiny(batch=N, layers=L, d_model=D, heads=H, seq=T, vocab=V))
    assert set(weights) == set(params(model))


def plans(g, kind: str) -> sw.Plan:
    if kind == "one":
        return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})
    if kind == "data":
        return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    return random_plan(g, sw.DeviceGraph.cpu(2), np.random.default_rng(3), reductions=True)


def train_torch(model, x, y, steps: int = 3):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9, weight_decay=1e-3)
    losses = []
    for _ in range(steps):
        opt.zero_grad()
        logits = model(x)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), torch.from_numpy(y).reshape(-1))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize("plan", ["one", "data", "random"])
@pytest.mark.parametrize("name", ["gpt", "lstm", "lstm_every"])
def test_three_steps_equal_pytorch(name, plan):
    model, x, y = make(name)
    g, weights = sw.from_torch(model, (x,))
    assert_trains_like_pytorch(g, weights, plan, model, x, y)


def assert_trains_like_pytorch(g, weights, plan: str, model, x, y) -> None:
    """Three SGD steps (momentum, weight decay) of g from ``weights`` under a plan (``plans``):
    the losses and weights of three steps of ``model`` (trained in place) within RTOL."""
    t = sw.Trainer(g, plans(g, plan), optimizer=sw.SGD(lr=0.1, momentum=0.9, weight_decay=1e-3))
    t.set_weights(weights)
    got = [t.step(x.numpy(), y) for _ in range(3)]
    want = train_torch(model, x, y)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(torch_weights(model, t.get_weights()), params(model))


def test_lstm_parameters_are_row_blocks_of_pytorchs():
    model, ids, _ = make("lstm")
    _, weights = sw.from_torch(model, (ids,))
    w = model.lstm.weight_hh_l1.detach().numpy()
    np.testing.assert_array_equal(weights["lstm.l1.g.hh.weight"], w[16:24])   # gates i, f, g, o of 8 rows
    np.testing.assert_array_equal(weights["lstm.l0.o.hh_bias.weight"], model.lstm.bias_hh_l0.detach().numpy()[24:])


@pytest.mark.slow   # the dynamo export takes about 9 s
def test_gpt_from_the_dynamo_onnx_export_is_from_torchs_graph(tmp_path):
    pytest.importorskip("onnx")
    pytest.importorskip("onnxscript")
    model, ids, _ = make("gpt")
    path = str(tmp_path / "gpt.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.onnx.export(copy.deepcopy(model), (ids,), path, dynamo=True, optimize=False, verbose=False)
    g, weights = sw.from_onnx(path)
    gt, weights_t = sw.from_torch(model, (ids,))
    assert_imports_alike(g, weights, gt, weights_t)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    np.testing.assert_allclose(t.predict(ids.numpy()), torch_forward(model, ids), atol=1e-5, rtol=0)


def test_select_is_one_step_of_a_sequence():
    """x[:, t] of an (N, T, E) input: the builder's select, and its gradient reaches only step t."""
    class Step(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(3, 4)

        def forward(self, x):
            return self.fc(x[:, 2]) + self.fc(x.select(1, -1)) if self.training else self.fc(x[:, 2, :])

    x = torch.randn(N, 5, 3)
    g, _ = sw.from_torch(Step().eval(), (x,))
    assert [op.kind for op in g.ops] == ["input", "select", "linear", "softmax"]
    assert g.ops[1].attrs == {"dim": 1, "index": 2} and g.ops[1].shape == (N, 3)
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=sw.SGD(lr=1.0))
    t.step(x.numpy(), np.zeros(N, dtype=np.int64))   # trains: the gradient flows back through the select
