"""``sw.from_torch`` through torch.export (shardwise.importers.torch.export), on small PyTorch
models with Python control flow that torch.fx cannot trace: ``method="auto"`` falls back to
torch.export, the forward equals PyTorch's in float64 within 1e-5, and what the export path
refuses raises ModelImportError naming the node, the ATen op and the module."""
from __future__ import annotations

import copy
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

import shardwise as sw  # noqa: E402

N, T, V, D = 2, 6, 20, 8


class Branchy(nn.Module):
    """Token embeddings, learned positions (a table longer than T), a branch on the sequence
    length (torch.fx cannot trace it), causal attention with an explicit boolean mask."""

    def __init__(self, mask: str = "causal", scale: float = 1.0) -> None:
        super().__init__()
        self.emb, self.pos = nn.Embedding(V, D), nn.Embedding(16, D)
        self.q, self.k, self.v, self.out = (nn.Linear(D, D) for _ in range(4))
        self.mask, self.scale = mask, scale

    def forward(self, ids):
        t = ids.shape[1]
        x = self.emb(ids) + self.pos(torch.arange(t))
        if t > 4:   # control flow on a size: fx traces sizes as proxies, export as numbers
            x = F.gelu(x)
        q, k, v = (m(x).view(ids.shape[0], t, 2, D // 2).transpose(1, 2) for m in (self.q, self.k, self.v))
        mask = torch.ones(t, t, dtype=torch.bool).tril() if self.mask == "causal" else \
            torch.ones(t, t, dtype=torch.bool).triu()
        y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        y = y.transpose(1, 2).reshape(ids.shape[0], t, D)
        return self.out(y * self.scale if self.scale != 1.0 else y)


def ids():
    return torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(0))


def test_auto_falls_back_to_export_and_predicts_like_pytorch():
    torch.manual_seed(0)
    model = Branchy().eval()
    with pytest.raises(sw.ModelImportError, match="torch.fx could not trace Branchy"):
        sw.from_torch(model, (ids(),), method="fx")
    g, weights = sw.from_torch(model, (ids(),))
    g2, _ = sw.from_torch(model, (ids(),), method="export")
    assert [op.kind for op in g.ops] == [op.kind for op in g2.ops]
    assert set(weights) == set(model.state_dict())
    assert g.ops[0].name == "ids"
    assert [op.attrs.get("causal") for op in g.ops if op.kind == "softmax_dim"] == [True]
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    want = copy.deepcopy(model).double()(ids()).detach().numpy()
    assert np.abs(t.forward(ids().numpy()) - want).max() <= 1e-5


def test_a_mask_other_than_causal_is_refused():
    with pytest.raises(sw.ModelImportError, match=r"aten\.scaled_dot_product_attention.*other than none or the causal"):
        sw.from_torch(Branchy(mask="upper"), (ids(),), method="export")


def test_a_constant_in_the_computation_is_refused():
    with pytest.raises(sw.ModelImportError, match=r"node 'mul' \(aten\.mul, the model's forward.*"
                                                  r"the second operand is 0\.5, not a tensor"):
        sw.from_torch(Branchy(scale=0.5), (ids(),), method="export")


def test_an_unsupported_op_is_named():
    class Exp(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return torch.exp(self.fc(x))

    with pytest.raises(sw.ModelImportError, match=r"node 'exp' \(aten\.exp, the model's forward, test_import_export\.py:\d+ "
                                                  r"`return torch\.exp\(self\.fc\(x\)\)`\): aten\.exp is not supported"):
        sw.from_torch(Exp(), (torch.randn(2, 4),), method="export")


class TiedHead(nn.Module):
    """An embedding whose table is also the output layer's weight (tied, with a bias of its own),
    a tanh GELU between them; the module names the head's weight first."""

    def __init__(self) -> None:
        super().__init__()
        self.head = nn.Linear(D, V)
        self.emb = nn.Embedding(V, D)
        self.emb.weight = self.head.weight

    def forward(self, ids):
        return self.head(F.gelu(self.emb(ids), approximate="tanh"))


def test_tied_weights_train_like_pytorch():
    """A weight read by an embedding and a linear: one parameter op under the first name in
    named_parameters order (the other an alias); three SGD steps on 2 workers give PyTorch
    float64's losses and weights, the table's gradient summed over both readers."""
    torch.manual_seed(0)
    model, x = TiedHead(), ids()
    y = torch.randint(0, V, (N, T), generator=torch.Generator().manual_seed(2))
    g, weights = sw.from_torch(model, (x,), method="export")
    assert set(weights) == {"head.weight", "head.bias"} and g.weight_aliases == {"emb.weight": "head.weight"}
    assert g["head"].kind == "parameter" and [op.kind for op in g.ops].count("embedding") == 1
    t = sw.Trainer(g, sw.search(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=0.5, momentum=0.9))
    t.set_weights(weights)
    got = [t.step(x.numpy(), y.numpy()) for _ in range(3)]
    m = copy.deepcopy(model).double()
    opt = torch.optim.SGD(m.parameters(), lr=0.5, momentum=0.9)
    want = []
    for _ in range(3):
        opt.zero_grad()
        loss = F.cross_entropy(m(x).reshape(-1, V), y.reshape(-1))
        loss.backward()
        opt.step()
        want.append(loss.item())
    np.testing.assert_allclose(got, want, rtol=1e-5)
    trained = t.get_weights()
    for k, v in m.named_parameters():
        np.testing.assert_allclose(trained[k], v.detach().numpy(), rtol=1e-5, atol=1e-6, err_msg=k)


class FormulaGELU(nn.Module):
    """GELU's tanh approximation written out, as Hugging Face's NewGELUActivation writes it
    (``k`` other than 0.044715: another function, which must not pass for it)."""

    def __init__(self, k: float = 0.044715) -> None:
        super().__init__()
        self.k = k

    def forward(self, x):
        return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + self.k * torch.pow(x, 3.0))))


class FormulaNet(nn.Module):
    def __init__(self, k: float = 0.044715) -> None:
        super().__init__()
        self.fc1, self.act, self.fc2 = nn.Linear(D, 16), FormulaGELU(k), nn.Linear(16, 5)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_tanh_gelu_formula_is_one_gelu_op():
    """The eight ATen calls of the formula become one gelu(approximate="tanh"); the logits equal the
    float64 model's within 1e-5 (scaled weights: the exact form would be 1e-3 off)."""
    torch.manual_seed(0)
    model = FormulaNet()
    with torch.no_grad():
        model.fc1.weight.mul_(4.0)
    x = torch.randn(N, T, D)
    g, weights = sw.from_torch(model, (x,), method="export")
    assert [op.kind for op in g.ops] == ["input", "linear", "gelu", "linear", "softmax"]
    assert g.ops[2].attrs == {"approximate": "tanh"}
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    want = copy.deepcopy(model).double()(x.double()).detach().numpy()
    assert np.abs(t.forward(x.numpy()) - want).max() <= 1e-5 * max(1.0, np.abs(want).max())


def test_tanh_gelu_formula_with_other_constants_is_refused():
    with pytest.raises(sw.ModelImportError, match=r"module 'act'.*a constant number in the computation is not "
                                                  r"supported \(FormulaGELU: GELU's tanh approximation is imported from "
                                                  r"F\.gelu\(x, approximate='tanh'\) or from exactly .* this one is "
                                                  r"written otherwise"):
        sw.from_torch(FormulaNet(k=0.05), (torch.randn(N, T, D),), method="export")


def test_method_is_checked():
    with pytest.raises(sw.ModelImportError, match="method must be 'auto', 'fx' or 'export'"):
        sw.from_torch(Branchy(), (ids(),), method="trace")


def test_a_conversion_to_float64_is_refused():
    class Double(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x).to(torch.float64)

    with pytest.raises(sw.ModelImportError, match=r"aten\.to.*a conversion to torch\.float64 is not supported"):
        sw.from_torch(Double(), (torch.randn(2, 4),), method="export")


def test_moving_the_batch_dimension_is_refused():
    class Swap(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(x.transpose(0, 1))

    with pytest.raises(sw.ModelImportError, match=r"aten\.transpose.*a transpose of the batch dimension \(0\)"):
        sw.from_torch(Swap(), (torch.randn(2, 5, 4),), method="export")


def test_a_constant_table_outside_a_rotary_embedding_is_refused():
    class Table(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc = nn.Linear(4, 4)
            self.register_buffer("table", torch.linspace(0, 1, 4))

        def forward(self, x):
            return torch.tanh(self.fc(x) * self.table)

    with pytest.raises(sw.ModelImportError, match=r"aten\.tanh.*a product by a constant tensor, accepted only as part "
                                                  r"of a rotary position embedding"):
        sw.from_torch(Table(), (torch.randn(2, 4),), method="export")
