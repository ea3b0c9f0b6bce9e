"""torchvision's Vision Transformer through from_torch: nn.MultiheadAttention imported as the
attention composition (packed in-projection linear, slices, heads, matmul, softmax_dim, matmul,
out_proj), against PyTorch's float64 run in eval mode and in training (SGD, AdamW) on a
searched plan over 2 workers; the forms it refuses; the TorchScript exporter's ONNX export.

test_transformers_on_searched_plans.py trains this small ViT and vit_b_16 with SGD, Adam and
AdamW on plans searched on 2, 4 and 16 workers against PyTorch's float32 error.

torchvision initializes the classifier head of a ViT to zeros (every logit 0), so the tests
give it random weights first.
"""
from __future__ import annotations

import copy
import io

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch")

from test_torchvision_bcast import tv  # noqa: E402  (skips the module without torchvision)

ATTENTION = "encoder.layers.encoder_layer_{}.self_attention."
PYTORCH_NAMES = ("in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias")


def _small_vit(seed: int = 0, **kw):
    torch.manual_seed(seed)
    model = tv.models.VisionTransformer(image_size=32, patch_size=8, num_layers=2, num_heads=2, hidden_dim=32,
                                        mlp_dim=64, num_classes=10, **kw)
    with torch.no_grad():   # torchvision's zero head would make every logit 0
        model.heads.head.weight.normal_(0.0, 0.2)
        model.heads.head.bias.normal_(0.0, 0.2)
    return model


def _assert_close_to_logits(got: np.ndarray, want: np.ndarray, tol: float = 1e-5) -> float:
    """|got - want| within ``tol`` of the logits' scale, max(1, max |want|); the error relative to it."""
    assert got.shape == want.shape
    scale = max(1.0, float(np.abs(want).max()))
    err = float(np.abs(got - want).max()) / scale
    assert err <= tol, f"{err:.3g} of the logits' scale {scale:.3g}"
    return err


def _eval_forward(model, x: np.ndarray, workers: int = 2):
    """Import ``model`` (eval mode), load the imported weights, check ``Trainer.forward(x)``
    against PyTorch's float64 run; the graph, the weights and the trainer."""
    model = model.eval()
    g, weights = sw.from_torch(model, example_inputs=(torch.tensor(x),))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(workers)))
    t.set_weights(weights)
    t.train(False)
    with torch.no_grad():
        want = copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    _assert_close_to_logits(t.forward(x), want)
    return g, weights, t


def _images(n: int = 2, size: int = 32, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal((n, 3, size, size)).astype(np.float32)


def test_small_vit_predicts_as_pytorch_with_its_parameter_names():
    model = _small_vit()
    g, weights, t = _eval_forward(model, _images())
    kinds = [op.kind for op in g.ops]
    assert kinds.count("softmax_dim") == 2 and "multihead_attention" not in kinds
    state = model.state_dict()
    for layer in range(2):
        for name in PYTORCH_NAMES:
            key = ATTENTION.format(layer) + name
            np.testing.assert_array_equal(weights[key], state[key].numpy())
    # get_weights gives PyTorch's names back, and set_weights takes them
    got = t.get_weights()
    assert set(got) == set(weights)
    for key in weights:
        np.testing.assert_array_equal(got[key], weights[key])
    changed = dict(weights)
    key = ATTENTION.format(1) + "in_proj_weight"
    changed[key] = weights[key] * 0.5
    t.set_weights(changed)
    np.testing.assert_array_equal(t.get_weights()[key], changed[key])
    # every weight, the class token and position table too, under its state_dict key: the
    # model's state_dict loads as it is
    assert set(weights) == set(state)
    t.set_weights({k: v.numpy() for k, v in state.items()})
    for k, v in t.get_weights().items():
        np.testing.assert_array_equal(v, state[k].numpy())


@pytest.mark.slow
def test_vit_b_16_predicts_as_pytorch():
    model = tv.models.vit_b_16(image_size=32, num_classes=10)
    with torch.no_grad():
        model.heads.head.weight.normal_(0.0, 0.05)
    g, _, _ = _eval_forward(model, _images(), workers=1)
    assert sum(op.kind == "softmax_dim" for op in g.ops) == 12


class _Attend(torch.nn.Module):
    """One nn.MultiheadAttention (self-attention) and a linear layer to the classes."""

    def __init__(self, batch_first: bool, need_weights: bool = False, **kw):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(12, 3, batch_first=batch_first, **kw)
        self.fc = torch.nn.Linear(12, 5)
        self.need_weights = need_weights

    def forward(self, x):
        y, _ = self.mha(x, x, x, need_weights=self.need_weights)
        return self.fc(torch.relu(y))


@pytest.mark.parametrize("batch_first", [True, False])
@pytest.mark.parametrize("kw", [{}, {"bias": False}, {"need_weights": True}, {"dropout": 0.2}])
def test_multihead_attention_module(batch_first, kw):
    torch.manual_seed(1)
    model = _Attend(batch_first, **kw)
    shape = (3, 7, 12) if batch_first else (7, 3, 12)   # 3 sequences of 7 tokens
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    g, weights, _ = _eval_forward(model, x)
    assert ("mha.in_proj_bias" in weights) == kw.get("bias", True)
    assert ("mha.attn.dropout" in g) == ("dropout" in kw)   # dropped in training, the identity here


@pytest.mark.parametrize("batch_first", [True, False])
def test_multihead_attention_trains_as_pytorch(batch_first):
    """Three SGD steps of one attention layer on a searched plan over 2 workers, against PyTorch
    in float64; with batch_first=False the graph's first dimension is the tokens', permuted."""
    torch.manual_seed(4)
    model = _Attend(batch_first).train()
    shape = (4, 6, 12) if batch_first else (6, 4, 12)
    x = np.random.default_rng(6).standard_normal(shape).astype(np.float32)
    y = np.random.default_rng(7).integers(0, 5, shape[:2])
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=0.2, momentum=0.9))
    t.set_weights(weights)
    ref = copy.deepcopy(model).double()
    topt = torch.optim.SGD(ref.parameters(), lr=0.2, momentum=0.9)
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    got, want = [], []
    for _ in range(3):
        loss = torch.nn.functional.cross_entropy(ref(xt).reshape(-1, 5), yt.reshape(-1))
        topt.zero_grad()
        loss.backward()
        topt.step()
        want.append(loss.item())
        got.append(t.step(x, y))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    after = t.get_weights()
    for name, p in ref.named_parameters():
        np.testing.assert_allclose(after[name], p.detach().numpy(), atol=1e-5, rtol=1e-4, err_msg=name)


def test_attention_dropout_trains_alike_under_any_plan():
    """dropout > 0 drops attention probabilities in training (shardwise's masks, not PyTorch's
    stream): a function of the op and the step only, so one worker and a searched plan over two
    take the same steps, and the loss differs from the run without dropout."""
    torch.manual_seed(3)
    model = _Attend(True, dropout=0.3).train()
    x = np.random.default_rng(4).standard_normal((4, 6, 12)).astype(np.float32)
    y = np.random.default_rng(5).integers(0, 5, (4, 6))
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    assert g["mha.attn.dropout"].attrs["p"] == pytest.approx(0.3)
    losses = []
    for plan in (sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1)), sw.search(g, sw.DeviceGraph.cpu(2))):
        t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.1))
        t.set_weights(weights)
        losses.append([t.step(x, y) for _ in range(3)])
    np.testing.assert_allclose(losses[0], losses[1], rtol=1e-5)
    with torch.no_grad():   # the first step's loss without dropout (eval mode: PyTorch's float64 run)
        plain = torch.nn.functional.cross_entropy(copy.deepcopy(model).double().eval()(
            torch.tensor(x, dtype=torch.float64)).reshape(-1, 5), torch.tensor(y).reshape(-1)).item()
    assert abs(losses[0][0] - plain) > 1e-4


def test_checkpoint_keeps_the_pytorch_names(tmp_path):
    """A checkpoint holds the weights under get_weights' names (in_proj_weight) and loads back."""
    torch.manual_seed(2)
    model = _Attend(True).train()
    x = np.random.default_rng(2).standard_normal((4, 5, 12)).astype(np.float32)
    y = np.random.default_rng(3).integers(0, 5, (4, 5))
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=0.1))
    t.set_weights(weights)
    t.step(x, y)
    t.save_checkpoint(tmp_path / "ckpt")
    saved = t.get_weights()
    t.step(x, y)
    assert not np.array_equal(t.get_weights()["mha.in_proj_weight"], saved["mha.in_proj_weight"])
    t.load_checkpoint(tmp_path / "ckpt")
    for key, value in saved.items():
        np.testing.assert_array_equal(t.get_weights()[key], value)


def _train_like_pytorch(model, opt_ours, opt_torch, steps: int = 3, key_bias_atol: float = 0.0):
    """``steps`` steps of ``model`` (train mode) on a searched plan over 2 workers against PyTorch's
    float64 ones: the losses and every parameter after them.

    The key block of in_proj_bias (rows E to 2E) has a zero gradient in exact arithmetic (it adds
    q . b_k to every score of a query, which the softmax cancels): float32 leaves rounding noise
    there, which Adam's normalization turns into steps of up to lr each (PyTorch's own float32
    AdamW moves it 1.7e-3 from its float64 run here).  That block is compared within
    ``key_bias_atol`` (Adam's bound, steps * lr; 0: like every other parameter)."""
    rng = np.random.default_rng(0)
    x = _images(4, seed=2)
    y = rng.integers(0, 10, 4)
    g, weights = sw.from_torch(model.train(), (torch.tensor(x),))
    plan = sw.search(g, sw.DeviceGraph.cpu(2))
    t = sw.Trainer(g, plan, optimizer=opt_ours)
    t.set_weights(weights)
    ref = copy.deepcopy(model).double().train()
    topt = opt_torch(ref.parameters())
    xt, yt = torch.tensor(x, dtype=torch.float64), torch.tensor(y)
    got, want = [], []
    for _ in range(steps):
        loss = torch.nn.functional.cross_entropy(ref(xt), yt)
        topt.zero_grad()
        loss.backward()
        topt.step()
        want.append(loss.item())
        got.append(t.step(x, y))
    np.testing.assert_allclose(got, want, rtol=1e-4)
    after = t.get_weights()
    for name, p in ref.named_parameters():
        key = name if name in after else f"{name}.weight"   # class_token, pos_embedding: parameter ops
        w, ours = p.detach().numpy(), after[key]
        if name.endswith("in_proj_bias") and key_bias_atol:
            e = w.shape[0] // 3
            assert np.abs(ours[e:2 * e] - w[e:2 * e]).max() <= key_bias_atol
            w, ours = np.delete(w, np.s_[e:2 * e]), np.delete(ours, np.s_[e:2 * e])
        np.testing.assert_allclose(ours, w, atol=1e-4 * max(1.0, float(np.abs(w).max())), rtol=1e-4,
                                   err_msg=name)
    assert all(ATTENTION.format(k) + n in after for k in range(2) for n in PYTORCH_NAMES)


def test_small_vit_sgd_steps_equal_pytorch():
    _train_like_pytorch(_small_vit(), sw.SGD(lr=0.05, momentum=0.9),
                        lambda ps: torch.optim.SGD(ps, lr=0.05, momentum=0.9))


def test_small_vit_adamw_steps_equal_pytorch():
    _train_like_pytorch(_small_vit(), sw.AdamW(lr=1e-3, weight_decay=0.01),
                        lambda ps: torch.optim.AdamW(ps, lr=1e-3, weight_decay=0.01), key_bias_atol=3 * 1e-3)


class _Call(torch.nn.Module):
    """nn.MultiheadAttention called as ``call(mha, x)`` says."""

    def __init__(self, call, **kw):
        super().__init__()
        self.mha = torch.nn.MultiheadAttention(8, 2, batch_first=True, **kw)
        self.register_buffer("mask", torch.zeros(4, 4, dtype=torch.bool))
        self.register_buffer("pad", torch.zeros(2, 4, dtype=torch.bool))
        self.call = call

    def forward(self, x):
        return self.call(self, x)


@pytest.mark.parametrize("call,kw,why", [
    (lambda m, x: m.mha(x, x, x, attn_mask=m.mask)[0], {}, "attn_mask is not supported"),
    (lambda m, x: m.mha(x, x, x, key_padding_mask=m.pad)[0], {}, "key_padding_mask is not supported"),
    (lambda m, x: m.mha(x, x, x)[0], {"add_bias_kv": True}, "add_bias_kv=True"),
    (lambda m, x: m.mha(x, x, x)[0], {"add_zero_attn": True}, "add_zero_attn=True"),
    (lambda m, x: m.mha(x, x, x)[0], {"kdim": 6, "vdim": 6}, "kdim=6, vdim=6 differ"),
    (lambda m, x: m.mha(x, torch.relu(x), x)[0], {}, "only self-attention"),
    (lambda m, x: m.mha(x, x, x)[1].sum(2), {}, "attention weights returned by module 'mha'"),
])
def test_refused_forms_say_why(call, kw, why):
    model = _Call(call, **kw).eval()
    with pytest.raises(sw.ModelImportError, match=why):
        sw.from_torch(model, example_inputs=(torch.zeros(2, 4, 8),))


@pytest.mark.parametrize("opset", [17, 20])
def test_vit_through_the_torchscript_onnx_exporter(opset):
    """The TorchScript exporter spells the attention sequence-first: the tokens in dimension 0 and
    the batch merged with the heads, which from_onnx follows as views (the dynamo export is
    test_torchvision_onnx_zoo.py's).  At opset 20 the model predicts as PyTorch's float64 run;
    before it GELU is spelled out (Div, Erf, ...), refused naming the op.  Every parameter is
    moved off its initial value first: the exporter merges equal initializers (the zero biases
    of fresh linear layers) into one, which from_onnx refuses as tied weights."""
    pytest.importorskip("onnx")
    model = _small_vit().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.02)
    x = _images()
    f = io.BytesIO()
    torch.onnx.export(model, (torch.tensor(x),), f, dynamo=False, opset_version=opset, do_constant_folding=False)
    if opset < 20:
        with pytest.raises(sw.ModelImportError, match="mlp.*the ONNX op Div is not supported"):
            sw.from_onnx(f.getvalue())
        return
    g, weights = sw.from_onnx(f.getvalue())
    assert [op.kind for op in g.ops].count("softmax_dim") == 2
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    t.eval()
    with torch.no_grad():
        want = copy.deepcopy(model).double()(torch.tensor(x, dtype=torch.float64)).numpy()
    _assert_close_to_logits(t.forward(x), want)