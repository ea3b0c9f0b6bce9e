"""Hugging Face transformers models imported with ``sw.from_torch`` (torch.fx cannot trace them:
the import goes through torch.export, shardwise.importers.torch.export), built from tiny random
configs (no download).

Forward: ``Trainer.forward`` on a 2-worker plan equals the model's logits computed by a float64
copy within 1e-5.  Training: three steps of SGD (momentum, weight decay) and of AdamW on 2
workers give the losses and weights of the float64 copy trained alike within RTOL.
test_transformers_on_searched_plans.py trains these models with SGD, Adam and AdamW on plans
searched on 2, 4 and 16 workers against PyTorch's float32 error.
"""
from __future__ import annotations

import copy

import numpy as np
import pytest

from torchvision_compat import import_transformers  # noqa: E402

torch = pytest.importorskip("torch")
transformers = import_transformers()

import torch.nn.functional as F  # noqa: E402

import shardwise as sw  # noqa: E402
from strategies_random import random_plan  # noqa: E402
from training_checks import RTOL, assert_close_weights  # noqa: E402

N, T, V = 2, 8, 64


def gpt2(**overrides):
    cfg = dict(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=16, activation_function="gelu",
               tie_word_embeddings=False, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False)
    cfg.update(overrides)
    torch.manual_seed(0)
    return transformers.GPT2LMHeadModel(transformers.GPT2Config(**cfg)).eval()


def token_ids(seed: int = 0, vocab: int = V, n: int = N, t: int = T):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n, t + 1), generator=g)


def conv1d_names(model) -> set[str]:
    """Weights of Hugging Face's Conv1D layers (stored (in, out), imported transposed)."""
    from transformers.pytorch_utils import Conv1D

    return {f"{name}.weight" for name, m in model.named_modules() if isinstance(m, Conv1D)}


def state_dict_layout(model, weights: dict) -> dict[str, np.ndarray]:
    """Imported (or trained) weights in the model's state_dict layout: Conv1D weights transposed back."""
    conv = conv1d_names(model)
    return {k: (v.T if k in conv else v) for k, v in weights.items()}


def params(model) -> dict[str, np.ndarray]:
    return {k: v.detach().double().numpy().copy() for k, v in model.named_parameters()}


def logits64(model, ids) -> np.ndarray:
    out = copy.deepcopy(model).double()(ids)
    return (out.logits if hasattr(out, "logits") else out[0]).detach().numpy()


def check_forward(model, ids, plan: str = "data") -> float:
    """Import, Trainer.forward on 2 workers against the float64 model; the max error."""
    g, weights = sw.from_torch(model, (ids,))
    assert set(weights) == set(model.state_dict())
    for k, v in state_dict_layout(model, weights).items():
        np.testing.assert_array_equal(v, model.state_dict()[k].numpy())
    t = sw.Trainer(g, make_plan(g, plan))
    t.set_weights(weights)
    back = t.get_weights()   # state_dict names both ways
    assert set(back) == set(weights) and all(np.array_equal(back[k], weights[k]) for k in weights)
    err = float(np.abs(t.forward(ids.numpy()) - logits64(model, ids)).max())
    assert err <= 1e-5
    return err


def make_plan(g, kind: str) -> sw.Plan:
    if kind == "data":
        return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    if kind == "search":
        return sw.search(g, sw.DeviceGraph.cpu(2))
    return random_plan(g, sw.DeviceGraph.cpu(2), np.random.default_rng(3), reductions=True)


OPTIMIZERS = {
    "sgd": (lambda: sw.SGD(lr=0.1, momentum=0.9, weight_decay=1e-3),
            lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3)),
    # eps 1e-3: Adam's step lr g / (|g| + eps) amplifies the float32 rounding of a gradient element
    # near zero by up to lr / eps.  Such elements are sums of products that cancel (a wpe entry:
    # terms of 0.2 summing to 2.5e-7, 1e-8 off in float32; a key bias: exactly 0 in exact
    # arithmetic, as the softmax ignores q.b added to every score of a row, so pure rounding), and
    # with PyTorch's eps 1e-8 (or 1e-6) they move weights by 1e-4 to 1e-3 of their tensor's scale,
    # float32 against float64 alike (PyTorch's float32 run too).  At 1e-3 that is below 1e-6.
    "adamw": (lambda: sw.AdamW(lr=1e-2, weight_decay=1e-2, eps=1e-3),
              lambda ps: torch.optim.AdamW(ps, lr=1e-2, weight_decay=1e-2, eps=1e-3)),
}


def train_torch64(model, x, y, opt: str, steps: int = 3):
    """``steps`` steps of the float64 copy of ``model``: its losses and weights."""
    m = copy.deepcopy(model).double()
    optimizer = OPTIMIZERS[opt][1](m.parameters())
    losses = []
    for _ in range(steps):
        optimizer.zero_grad()
        out = m(x)
        logits = out.logits if hasattr(out, "logits") else out[0]
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    return losses, params(m)


def check_training(model, x, y, opt: str, plan: str) -> None:
    """Three steps on 2 workers: the losses and weights of the float64 copy trained alike."""
    g, weights = sw.from_torch(model, (x,))
    t = sw.Trainer(g, make_plan(g, plan), optimizer=OPTIMIZERS[opt][0]())
    t.set_weights(weights)
    got = [t.step(x.numpy(), y.numpy()) for _ in range(3)]
    want, want_weights = train_torch64(model, x, y, opt)
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert_close_weights(state_dict_layout(model, t.get_weights()), want_weights)


# ----------------------------------------------------------------------------- GPT-2
def test_gpt2_predicts_like_pytorch():
    ids = token_ids()[:, :-1]
    check_forward(gpt2(), ids)


def test_gpt2_graph_is_a_gpt():
    """The structure the planner sees: one linear per Conv1D (q, k, v sliced from c_attn),
    g.attention's composition with the causal mask, the first T rows of wpe."""
    g, _ = sw.from_torch(gpt2(), (token_ids()[:, :-1],))
    kinds = [op.kind for op in g.ops]
    assert kinds.count("linear") == 2 * 4 + 1
    assert kinds.count("slice") == 2 * 3 + 1          # q, k, v per layer; wpe's first T rows
    probs = [op for op in g.ops if op.kind == "softmax_dim"]
    assert len(probs) == 2 and all(op.attrs.get("causal") for op in probs)
    assert g.ops[g.op_names().index("transformer.wpe")].kind == "parameter"


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
@pytest.mark.parametrize("plan", ["data", "random"])
def test_gpt2_trains_like_pytorch(opt, plan):
    ids = token_ids(1)
    check_training(gpt2(), ids[:, :-1], ids[:, 1:], opt, plan)


# GPT-2's default configuration (tiny sizes): gelu_new, the tanh approximation of GELU written as
# its formula, and the output layer tied to the token embedding (tie_word_embeddings=True)
def gpt2_default():
    torch.manual_seed(0)
    cfg = transformers.GPT2Config(n_layer=2, n_embd=32, n_head=4, vocab_size=V, n_positions=16,
                                  bos_token_id=0, eos_token_id=0)   # inside the tiny vocabulary
    assert cfg.activation_function == "gelu_new" and cfg.tie_word_embeddings
    model = transformers.GPT2LMHeadModel(cfg).eval()
    assert model.lm_head.weight is model.transformer.wte.weight
    return model


def test_gpt2_default_config_predicts_like_pytorch():
    """One key for the tied tensor (the embedding's), the other name its alias; the logits of the
    float64 model within 1e-5 of their scale."""
    model, ids = gpt2_default(), token_ids()[:, :-1]
    g, weights = sw.from_torch(model, (ids,))
    assert set(weights) == set(model.state_dict()) - {"lm_head.weight"}
    assert g.weight_aliases == {"lm_head.weight": "transformer.wte.weight"}
    for k, v in state_dict_layout(model, weights).items():
        np.testing.assert_array_equal(v, model.state_dict()[k].numpy())
    t = sw.Trainer(g, make_plan(g, "search"))
    t.set_weights(weights)
    assert set(t.get_weights()) == set(weights)
    want = logits64(model, ids)
    err = float(np.abs(t.forward(ids.numpy()) - want).max())
    assert err <= 1e-5 * float(np.abs(want).max())


def test_gpt2_default_config_graph():
    """gelu_new is one gelu op (approximate="tanh") per layer; wte is one parameter op read by the
    look-up and by the output product (through its broadcast over the samples)."""
    g, _ = sw.from_torch(gpt2_default(), (token_ids()[:, :-1],))
    gelus = [op for op in g.ops if op.kind == "gelu"]
    assert len(gelus) == 2 and all(op.attrs == {"approximate": "tanh"} for op in gelus)
    wte = g["transformer.wte"]
    assert wte.kind == "parameter" and wte.shape == (V, 32)
    readers = sorted(g.ops[k].kind for k in g.consumers(wte.index))
    assert readers == ["embedding", "expand"]
    head = g.ops[g.consumers(g.consumers(wte.index)[-1])[0]]
    assert head.kind == "matmul" and head.attrs == {"transpose_b": True} and head.shape == (N, T, V)


def test_gpt2_tied_weights_load_under_either_name():
    """set_weights takes a state_dict with both names of the tied tensor, or either alone; two
    different arrays under the two names are refused."""
    model, ids = gpt2_default(), token_ids()[:, :-1]
    g, weights = sw.from_torch(model, (ids,))
    t = sw.Trainer(g, make_plan(g, "data"))
    full = state_dict_layout(model, {k: v.numpy() for k, v in model.state_dict().items()})
    t.set_weights(full)   # both names
    np.testing.assert_array_equal(t.get_weights()["transformer.wte.weight"], weights["transformer.wte.weight"])
    other = weights["transformer.wte.weight"] * 2
    t.set_weights({**{k: v for k, v in weights.items() if k != "transformer.wte.weight"}, "lm_head.weight": other})
    np.testing.assert_array_equal(t.get_weights()["transformer.wte.weight"], other)
    with pytest.raises(sw.ShapeError, match=r"tied weights \['lm_head.weight', 'transformer.wte.weight'\].*differ"):
        t.set_weights({**weights, "lm_head.weight": other})


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_gpt2_default_config_trains_like_pytorch(opt):
    """Three steps on a searched 2-worker plan: the tied table's gradient is the sum of the
    look-up's and the output product's, as PyTorch's."""
    ids = token_ids(1)
    check_training(gpt2_default(), ids[:, :-1], ids[:, 1:], opt, "search")


def check_tied_forward(model, aliases: dict) -> None:
    """Tied weights imported once (the other names aliases), the logits of the float64 model within
    1e-5 of their scale on a searched 2-worker plan."""
    ids = token_ids()[:, :-1]
    g, weights = sw.from_torch(model, (ids,))
    assert g.weight_aliases == aliases and set(weights) == set(model.state_dict()) - set(aliases)
    t = sw.Trainer(g, make_plan(g, "search"))
    t.set_weights(weights)
    want = logits64(model, ids)
    assert float(np.abs(t.forward(ids.numpy()) - want).max()) <= 1e-5 * float(np.abs(want).max())


def test_llama_tied_embeddings_predict_like_pytorch():
    check_tied_forward(llama(tie_word_embeddings=True), {"lm_head.weight": "model.embed_tokens.weight"})


def test_bert_masked_lm_tied_decoder_predicts_like_pytorch():
    """BERT's masked-LM decoder reads the word embeddings (a linear with a bias of its own, itself
    held under two names)."""
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=16, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
               pad_token_id=None)
    torch.manual_seed(0)
    model = transformers.BertForMaskedLM(transformers.BertConfig(**cfg)).eval()
    check_tied_forward(model, {"cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
                               "cls.predictions.decoder.bias": "cls.predictions.bias"})


def test_shared_weight_the_new_path_cannot_take_is_refused():
    """A weight read by two ops that own their weights (two layer norms): still refused."""
    class TwoNorms(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = torch.nn.LayerNorm(4), torch.nn.LayerNorm(4)
            self.b.weight = self.a.weight
            self.fc = torch.nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(self.b(self.a(x)))

    with pytest.raises(sw.ModelImportError, match="'a.weight'.*tied weights.*shared weights are not supported"):
        sw.from_torch(TwoNorms(), (torch.randn(2, 5, 4),), method="export")


def test_fx_only_keeps_the_fx_error():
    with pytest.raises(sw.ModelImportError, match="torch.fx could not trace GPT2LMHeadModel"):
        sw.from_torch(gpt2(), (token_ids()[:, :-1],), method="fx")


# ----------------------------------------------------------------------------- BERT
def bert(**overrides):
    cfg = dict(vocab_size=V, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
               max_position_embeddings=16, num_labels=3, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0,
               pad_token_id=None)
    cfg.update(overrides)
    torch.manual_seed(0)
    return transformers.BertForSequenceClassification(transformers.BertConfig(**cfg)).eval()


def test_bert_predicts_like_pytorch():
    """Sequence classification logits (N, 3); no attention mask (every position attended)."""
    check_forward(bert(), token_ids()[:, :-1])


def test_bert_graph():
    """Token types (all 0 without token_type_ids) read row 0 of their table; positions its first
    T rows; attention without a mask; the pooler reads position 0."""
    g, _ = sw.from_torch(bert(), (token_ids()[:, :-1],))
    assert g.ops[0].name == "input_ids"
    by_name = {op.name: op for op in g.ops}
    row = by_name["bert.embeddings.token_type_embeddings.row"]
    assert (row.kind, row.shape, row.attrs["start"], row.attrs["stop"]) == ("slice", (1, 32), 0, 1)
    assert by_name["bert.embeddings.position_embeddings.positions"].shape == (T, 32)
    probs = [op for op in g.ops if op.kind == "softmax_dim"]
    assert len(probs) == 2 and not any(op.attrs.get("causal") for op in probs)
    assert g.ops[-1].shape == (N, 3)


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_bert_trains_like_pytorch(opt):
    ids = token_ids(2)[:, :-1]
    labels = torch.tensor([0, 2])
    check_training(bert(), ids, labels, opt, "random")


def test_bert_attention_mask_input_and_padding_idx_are_refused():
    ids = token_ids()[:, :-1]
    with pytest.raises(sw.ModelImportError, match="input 'attention_mask'.*call without it"):
        sw.from_torch(bert(), (ids, torch.ones_like(ids)))
    with pytest.raises(sw.ModelImportError, match="padding_idx=0 is not supported.*pad_token_id=None"):
        sw.from_torch(bert(pad_token_id=0), (ids,))


# ----------------------------------------------------------------------------- Llama
def llama(**overrides):
    cfg = dict(vocab_size=V, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
               num_key_value_heads=2, max_position_embeddings=16, tie_word_embeddings=False, use_cache=False)
    cfg.update(overrides)
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(transformers.LlamaConfig(**cfg)).eval()


def test_llama_predicts_like_pytorch():
    """RMS norms, rotary embeddings, SwiGLU and grouped-query attention (4 query heads, 2 key and
    value heads), against the float64 model."""
    check_forward(llama(), token_ids()[:, :-1])


def test_llama_graph():
    """Each composition is one op: rms_norm, rotary (base from the tables: Llama's 10000) on q
    and k, repeat_kv as reshape + expand + reshape, causal attention; no slice or neg is left."""
    g, _ = sw.from_torch(llama(), (token_ids()[:, :-1],))
    kinds = [op.kind for op in g.ops]
    assert kinds.count("rms_norm") == 2 * 2 + 1 and kinds.count("rotary") == 2 * 2
    assert "slice" not in kinds and kinds.count("expand") == 2 * 2
    assert all(op.attrs["base"] == 10000.0 for op in g.ops if op.kind == "rotary")
    assert [op.shape for op in g.ops if op.kind == "rotary"][:2] == [(N, 4, T, 8), (N, 2, T, 8)]
    assert all(op.attrs.get("causal") for op in g.ops if op.kind == "softmax_dim")


def test_llama_rope_theta_is_read_from_the_tables():
    g, _ = sw.from_torch(llama(rope_theta=500000.0), (token_ids()[:, :-1],))
    assert {op.attrs["base"] for op in g.ops if op.kind == "rotary"} == {500000.0}


@pytest.mark.parametrize("opt", ["sgd", "adamw"])
def test_llama_trains_like_pytorch(opt):
    ids = token_ids(3)
    check_training(llama(), ids[:, :-1], ids[:, 1:], opt, "random")


def test_llama_scaled_rope_is_refused():
    model = llama(rope_scaling={"rope_type": "linear", "factor": 2.0})
    with pytest.raises(sw.ModelImportError, match="rotary tables other than RoPE's"):
        sw.from_torch(model, (token_ids()[:, :-1],))
