"""sw.models.llama: Hugging Face's LlamaForCausalLM built by hand from the graph ops.

A tiny Llama (2 layers, d_model 32, 4 query heads sharing 2 key/value heads) loads the
state_dict of an HF LlamaForCausalLM of the same config with Trainer.set_weights, predicts its
float64 logits within 1e-5 and trains 3 SGD steps like its float64 copy; the graph is op for op
the one sw.from_torch imports from that model; a searched 4-worker plan trains like one worker;
and the 7B-shaped graph has Llama-2-7B's parameter count.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import ShapeError

from training_checks import RTOL, assert_close_weights

N, T, V, D, H, KV, L, F = 2, 8, 64, 32, 4, 2, 2, 64


def hf_llama(rope_base: float = 10000.0, eps: float = 1e-5):
    """An HF LlamaForCausalLM of the tiny sizes, seeded; sdpa attention, no dropout, untied head.
    Weights drawn with std 0.2, not HF's 0.02: logits of size 4 rather than 0.4, so that the 1e-5
    bound on them says more (the error measured is about 2e-6)."""
    torch = pytest.importorskip("torch")
    from torchvision_compat import import_transformers

    transformers = import_transformers()
    cfg = transformers.LlamaConfig(vocab_size=V, hidden_size=D, intermediate_size=F, num_hidden_layers=L,
                                   num_attention_heads=H, num_key_value_heads=KV, max_position_embeddings=16,
                                   rope_theta=rope_base, rms_norm_eps=eps, attention_dropout=0.0,
                                   tie_word_embeddings=False, use_cache=False, attn_implementation="sdpa",
                                   initializer_range=0.2)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(cfg).eval()


def tiny(rope_base: float = 10000.0, eps: float = 1e-5) -> sw.Graph:
    return sw.models.llama(layers=L, d_model=D, heads=H, kv_heads=KV, seq=T, vocab=V, batch=N, ffn=F,
                           rope_base=rope_base, eps=eps)


def tokens(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, V, (N, T + 1))


def state_dict(model) -> dict[str, np.ndarray]:
    return {k: v.detach().numpy() for k, v in model.state_dict().items()}


@pytest.mark.parametrize("rope_base, eps", [(10000.0, 1e-5), (500000.0, 1e-6)])
def test_tiny_llama_predicts_hf_logits(rope_base, eps):
    import torch

    model = hf_llama(rope_base, eps)
    g = tiny(rope_base, eps)
    t = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}))
    t.set_weights(state_dict(model))
    ids = tokens(0)[:, :-1]
    want = copy.deepcopy(model).double()(torch.from_numpy(ids)).logits.detach().numpy()
    got = t.forward(ids)
    assert got.shape == (N, T, V)
    assert np.abs(got - want).max() <= 1e-5


@pytest.mark.parametrize("plan", ["one", "data"])
def test_tiny_llama_trains_like_hf(plan):
    import torch
    import torch.nn.functional as F_

    model = hf_llama()
    g = tiny()
    p = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}) if plan == "one" else \
        sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    t = sw.Trainer(g, p, optimizer=sw.SGD(lr=0.5))
    t.set_weights(state_dict(model))
    data = tokens(1)
    ids, labels = data[:, :-1], data[:, 1:]
    m = copy.deepcopy(model).double()
    opt = torch.optim.SGD(m.parameters(), lr=0.5)
    want = []
    for _ in range(3):
        opt.zero_grad()
        logits = m(torch.from_numpy(ids)).logits
        loss = F_.cross_entropy(logits.reshape(-1, V), torch.from_numpy(labels).reshape(-1))
        loss.backward()
        opt.step()
        want.append(loss.item())
    got = [t.step(ids, labels) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(t.get_weights(), {k: v.detach().numpy() for k, v in m.named_parameters()})
    assert got[2] < got[0]


def test_tiny_llama_is_the_graph_from_torch_imports():
    """Op for op (kind, output shape and every attribute: eps, rotary base, attention scale and
    causal mask, reshape and expand shapes) the graph sw.from_torch builds from the HF model
    through torch.export; so also its FLOPs and parameters, and the weights the import returns
    (the state_dict) are the names and shapes this graph takes.  Only op names other than the
    weighted ops' differ (the importer numbers its reshapes)."""
    import torch

    model = hf_llama()
    imported, weights = sw.from_torch(model, (torch.from_numpy(tokens(0)[:, :-1]),))
    g = tiny()
    assert [(op.kind, op.shape, op.attrs) for op in g.ops] == [(op.kind, op.shape, op.attrs) for op in imported.ops]
    assert [op.inputs for op in g.ops] == [op.inputs for op in imported.ops]
    assert g.flops() == imported.flops() and g.num_parameters() == imported.num_parameters()
    weighted = [op.name for op in g.ops if op.has_weights]
    assert weighted == [op.name for op in imported.ops if op.has_weights]
    assert {f"{name}.weight" for name in weighted} == set(weights) == set(model.state_dict())


def test_searched_plan_on_four_workers_trains_like_one_worker():
    g = sw.models.llama_tiny(batch=4)
    data = np.random.default_rng(2).integers(0, V, (4, T + 1))
    ids, labels = data[:, :-1], data[:, 1:]
    plan = sw.search(g, sw.DeviceGraph.cpu(4))
    assert len({w for op in g.ops for w in plan[op.name].devices}) > 1   # it uses several workers
    one = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=sw.SGD(lr=0.5))
    many = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.5))
    np.testing.assert_allclose([many.step(ids, labels) for _ in range(2)], [one.step(ids, labels) for _ in range(2)],
                               rtol=RTOL)
    assert_close_weights(many.get_weights(), one.get_weights())


def llama_parameters(vocab: int, d: int, layers: int, heads: int, kv_heads: int, ffn: int) -> int:
    """Parameters of a Llama, counted from its layout: embedding and head (vocab, d) each; per layer
    q and o (d, d), k and v (kv_heads * d / heads, d), gate, up and down (ffn x d), two norms (d);
    the final norm (d)."""
    kv = kv_heads * (d // heads)
    per_layer = 2 * d * d + 2 * kv * d + 3 * ffn * d + 2 * d
    return 2 * vocab * d + layers * per_layer + d


def test_7b_shapes_have_llama2_7bs_parameter_count():
    mha = sw.models.llama(kv_heads=32, ffn=11008, batch=1)
    assert llama_parameters(32000, 4096, 32, 32, 32, 11008) == 6_738_415_616   # Llama-2-7B, as published
    assert mha.num_parameters() == 6_738_415_616
    gqa = sw.models.llama()              # the defaults: 8 key/value heads, ffn from d_model, batch 512 x 4096
    assert sw.models.llama_ffn(4096) == 11008
    assert gqa.num_parameters() == llama_parameters(32000, 4096, 32, 32, 8, 11008) == 5_933_109_248
    assert gqa["loss"].shape == (512, 4096, 32000)
    assert gqa["model.layers.0.self_attn.k_proj"].shape == (512, 4096, 1024)
    assert gqa["model.layers.31.self_attn.attention.scores"].shape == (512, 32, 4096, 4096)
    assert "expand" not in {op.kind for op in mha.ops}        # as HF's repeat_kv: nothing to repeat
    assert sum(op.kind == "expand" for op in gqa.ops) == 2 * 32


def test_llama_ffn_is_8_thirds_rounded_up_to_256():
    assert [sw.models.llama_ffn(d) for d in (32, 256, 4096, 5120)] == [256, 768, 11008, 13824]


def test_llama_is_in_the_zoo():
    assert sw.models.get("llama_tiny").num_parameters() == sw.models.llama_tiny().num_parameters()
    assert sw.models.get("llama", layers=1, batch=1, seq=16, d_model=64, heads=4, kv_heads=2, vocab=100).ops[-1].shape \
        == (1, 16, 100)


def test_llama_refuses_bad_sizes():
    with pytest.raises(ShapeError, match="heads 4 is not a multiple of kv_heads 3"):
        sw.models.llama(d_model=32, heads=4, kv_heads=3)
    with pytest.raises(ShapeError, match="d_model 30 is not a multiple of heads 4"):
        sw.models.llama(d_model=30, heads=4)
    with pytest.raises(ShapeError, match="head dimension .* must be even"):
        sw.models.llama(d_model=36, heads=4, kv_heads=4)
    with pytest.raises(ShapeError, match="llama: kv_heads must be a positive int"):
        sw.models.llama(kv_heads=0)
    with pytest.raises(ShapeError, match="llama: ffn must be a positive int"):
        sw.models.llama(ffn=2.5)
