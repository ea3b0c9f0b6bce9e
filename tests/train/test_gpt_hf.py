"""sw.models.gpt loads a Hugging Face GPT2LMHeadModel's weights and predicts its logits.

The config is one sw.models.gpt expresses: exact GELU (activation_function="gelu", not GPT-2's
default tanh approximation), an untied lm_head, no dropout, n_positions equal to the sequence
length (gpt's wpe is (T, D)).  HF's Conv1D layers store W as (in, out) and pack q, k and v into
one c_attn of width 3D: the state_dict is renamed, transposed and split for Trainer.set_weights.
Weights are drawn with std 0.2 (HF's 0.02 gives logits of 0.4): logits of size 4, 1e-6 off.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

import shardwise as sw

N, T, V, D, H, L = 2, 8, 64, 32, 4, 2


def hf_gpt2():
    torch = pytest.importorskip("torch")
    from torchvision_compat import import_transformers

    transformers = import_transformers()
    cfg = transformers.GPT2Config(n_layer=L, n_embd=D, n_head=H, vocab_size=V, n_positions=T, activation_function="gelu",
                                  tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                                  use_cache=False, initializer_range=0.2,
                                  bos_token_id=0, eos_token_id=0)   # GPT-2's 50256 lies outside the tiny vocabulary
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(cfg).eval()


def gpt_weights(model) -> dict[str, np.ndarray]:
    """An HF GPT-2 state_dict under sw.models.gpt's names: transformer.h.<l>.attn.c_attn (D, 3D)
    -> h.<l>.attn.q, k, v (D, D) each; every Conv1D weight transposed to (out, in)."""
    sd = {k: v.detach().numpy() for k, v in model.state_dict().items()}
    out = {"wte.weight": sd["transformer.wte.weight"], "wpe.weight": sd["transformer.wpe.weight"],
           "ln_f.weight": sd["transformer.ln_f.weight"], "ln_f.bias": sd["transformer.ln_f.bias"],
           "lm_head.weight": sd["lm_head.weight"]}
    for layer in range(L):
        hf, p = f"transformer.h.{layer}", f"h.{layer}"
        for ln in ("ln_1", "ln_2"):
            out[f"{p}.{ln}.weight"], out[f"{p}.{ln}.bias"] = sd[f"{hf}.{ln}.weight"], sd[f"{hf}.{ln}.bias"]
        qkv_w, qkv_b = sd[f"{hf}.attn.c_attn.weight"].T, sd[f"{hf}.attn.c_attn.bias"]   # (3D, D), (3D,)
        for i, name in enumerate("qkv"):
            out[f"{p}.attn.{name}.weight"] = qkv_w[i * D:(i + 1) * D]
            out[f"{p}.attn.{name}.bias"] = qkv_b[i * D:(i + 1) * D]
        for ours, theirs in (("attn.proj", "attn.c_proj"), ("mlp.fc", "mlp.c_fc"), ("mlp.proj", "mlp.c_proj")):
            out[f"{p}.{ours}.weight"] = sd[f"{hf}.{theirs}.weight"].T
            out[f"{p}.{ours}.bias"] = sd[f"{hf}.{theirs}.bias"]
    return out


def test_gpt_with_hf_gpt2_weights_predicts_its_logits():
    import torch

    model = hf_gpt2()
    g = sw.models.gpt(layers=L, d_model=D, heads=H, seq=T, vocab=V, batch=N)
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(gpt_weights(model))      # every weight the graph has, and no other (set_weights checks)
    ids = np.random.default_rng(0).integers(0, V, (N, T))
    want = copy.deepcopy(model).double()(torch.from_numpy(ids)).logits.detach().numpy()
    assert np.abs(t.forward(ids) - want).max() <= 1e-5
