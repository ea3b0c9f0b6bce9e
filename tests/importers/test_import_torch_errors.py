"""sw.from_torch: what it refuses and how it says so, and the import's own rules (names,
pruning, in-place ops, the op table and its documentation).

Every refusal must be a ModelImportError naming the operation as the user wrote it and
where: the module path for a module call, the module and the source line for a function
call.  Equality of imported models with PyTorch is tests/importers/test_import_torch.py.
"""
from __future__ import annotations

import os
import warnings

import numpy as np
import pytest

import shardwise as sw

torch = pytest.importorskip("torch", reason="PyTorch not installed: pip install torch==2.13.0")
nn = torch.nn
F = torch.nn.functional

HERE = os.path.basename(__file__)
DOC = os.path.join(os.path.dirname(__file__), "..", "..", "docs", "importing.md")


class Head(nn.Module):
    """``body`` then a linear classifier: the body is what a case tests."""

    def __init__(self, body: nn.Module, features: int) -> None:
        super().__init__()
        self.body, self.fc = body, nn.Linear(features, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.body(x), 1))


class Fn(nn.Module):
    """``forward`` is ``fn(self, x)``: one function call to test, inside module ``inner``."""

    def __init__(self, fn, features: int) -> None:
        super().__init__()
        self.inner = _Inner(fn)
        self.fc = nn.Linear(features, 3)

    def forward(self, x):
        return self.fc(torch.flatten(self.inner(x), 1))


class _Inner(nn.Module):
    def __init__(self, fn) -> None:
        super().__init__()
        self.fn = fn
        self.p = nn.Parameter(torch.ones(4))
        self.register_buffer("buf", torch.ones(4, 4))

    def forward(self, x):
        return self.fn(self, x)


def conv_body(**kw) -> nn.Module:
    return nn.Sequential(nn.Conv2d(4, 4, 3, padding=1, **kw), nn.ReLU())


class Tied(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(4, 4), nn.Linear(4, 4)
        self.b.weight = self.a.weight
        self.out = nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.b(self.a(x)))


class Twice(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc, self.out = nn.Linear(4, 4), nn.Linear(4, 3)

    def forward(self, x):
        return self.out(self.fc(self.fc(x)))


class Branchy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        if x.sum() > 0:
            return self.fc(x)
        return self.fc(-x)


class Pair(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, x):
        return self.fc(x), x


class ViewWrite(nn.Module):
    """An in-place ReLU on a view of x, then x read again: x has changed in PyTorch."""

    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 3), nn.Linear(16, 3)

    def forward(self, x):
        y = x.view(x.size(0), -1)
        y.relu_()
        return self.fc1(torch.flatten(x, 1)) + self.fc2(y)


class SeqLSTM(nn.Module):
    """An LSTM with the batch second (PyTorch's default), which from_torch refuses."""

    def __init__(self, **kw) -> None:
        super().__init__()
        self.rnn, self.fc = nn.LSTM(4, 8, **kw), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc(self.rnn(x)[0][-1])


class LSTMWithState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.fc = nn.LSTM(4, 8, batch_first=True), nn.Linear(8, 3)

    def forward(self, x):
        h = torch.zeros(1, x.shape[0], 8)
        return self.fc(self.rnn(x, (h, h))[0][:, -1])


class LSTMState(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.rnn, self.fc = nn.LSTM(4, 8, batch_first=True), nn.Linear(2 * 8, 3)

    def forward(self, x):
        _, (h, _) = self.rnn(x)
        return self.fc(h.reshape(x.shape[0], 16))


class NotCausal(nn.Module):
    def forward(self, x):
        s = x @ x.transpose(-2, -1)
        return torch.softmax(s.masked_fill(torch.eye(4, dtype=torch.bool), float("-inf")), -1).flatten(1)


IMG = (2, 4, 4, 4)
VEC = (2, 4)

# (id, model, example input shape, fragments the message must contain)
REFUSED = [
    ("elu module", lambda: Head(nn.Sequential(nn.Linear(4, 4), nn.ELU()), 4), VEC,
     ["nn.ELU", "'body.1'"]),
    ("lstm module", SeqLSTM, (3, 2, 4), ["nn.LSTM", "'rnn'"]),
    ("batchnorm1d", lambda: Head(nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)), 4), VEC,
     ["nn.BatchNorm1d", "'body.1'"]),
    ("torch function", lambda: Fn(lambda m, x: torch.exp(x), 4), VEC,
     ["torch.exp", "'inner'", HERE, "torch.exp(x)"]),
    ("F function", lambda: Fn(lambda m, x: F.softplus(x), 4), VEC, ["torch.nn.functional.softplus", "'inner'", HERE]),
    ("Tensor method", lambda: Fn(lambda m, x: x.exp(), 4), VEC, ["Tensor.exp", "'inner'", HERE]),
    ("uneven dilated same padding", lambda: Head(nn.Sequential(nn.Conv2d(4, 4, 2, padding="same", dilation=3)), 64),
     IMG, ["padding='same'", "dilation (3, 3)", "unevenly", "'body.0'", "nn.Conv2d"]),
    ("reflect padding", lambda: Head(conv_body(padding_mode="reflect"), 64), IMG, ["padding_mode", "'body.0'"]),
    ("dropout p=1", lambda: Fn(lambda m, x: F.dropout(x, 1.0), 4), VEC, ["dropout", "p=1.0", "'inner'", HERE]),
    ("bn eps", lambda: Head(nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4, eps=0.0)), 64), IMG,
     ["eps=0.0", "'body.1'", "nn.BatchNorm2d", "a positive number"]),
    ("bn without affine", lambda: Head(nn.Sequential(nn.Conv2d(4, 4, 1), nn.BatchNorm2d(4, affine=False)), 64), IMG,
     ["affine=False", "'body.1'"]),
    # max pooling takes ceil mode's partial window, average pooling does not (its divisor differs)
    ("ceil mode window", lambda: Head(nn.AvgPool2d(3, 2, ceil_mode=True), 4 * 4), (2, 4, 6, 6),
     ["ceil_mode=True", "'body'", "nn.AvgPool2d"]),
    ("uneven adaptive pool", lambda: Head(nn.AdaptiveMaxPool2d(3), 4 * 9), IMG, ["output size must divide", "'body'"]),
    ("add a constant", lambda: Fn(lambda m, x: x + 1, 4), VEC, ["adding the constant 1", "'inner'", HERE]),
    ("multiply", lambda: Fn(lambda m, x: x * 2, 4), VEC, ["operator.mul (x * y)", "'inner'", HERE]),
    ("indexing", lambda: Fn(lambda m, x: x[:, [0, 1]], 2), VEC, ["operator.getitem (x[...])", "'inner'", HERE]),
    ("buffer as a matrix", lambda: Fn(lambda m, x: x @ m.buf, 4), VEC, ["'inner.buf'", "buffer", "'inner'", HERE]),
    ("add a buffer", lambda: Fn(lambda m, x: x + m.buf, 4), VEC, ["'inner.buf'", "constant", "'inner'", HERE]),
    ("log_softmax inside", lambda: Head(nn.Sequential(nn.Linear(4, 4), nn.LogSoftmax(1)), 4), VEC,
     ["only as the model's output", "'body.1'"]),
    ("reshape of the batch", lambda: Fn(lambda m, x: x.view(4, 2), 2), VEC, ["(2, 4) to (4, 2)", "'inner'", HERE]),
    ("bidirectional lstm", lambda: SeqLSTM(bidirectional=True, batch_first=True), (2, 3, 4),
     ["bidirectional=True", "nn.LSTM", "'rnn'"]),
    ("lstm states given", LSTMWithState, (2, 3, 4), ["nn.LSTM", "'rnn'", "2 positional"]),
    ("lstm state whole", LSTMState, (2, 3, 4), ["h_n[-1]", "'rnn.h_n'"]),
    ("attention mask", lambda: Fn(lambda m, x: F.scaled_dot_product_attention(x, x, x, attn_mask=x[:, 0]), 4),
     (2, 3, 4), ["attn_mask", "'inner'", HERE]),
    ("non-causal masked_fill", NotCausal, (2, 2, 4, 4), ["not the causal mask", "NotCausal.forward"]),
    ("scaled activations", lambda: Fn(lambda m, x: torch.relu(x) / 2.0, 4), VEC,
     ["operator.truediv (x / y)", "'inner'", HERE, "attention scores"]),
    ("integer input read by a linear", lambda: nn.Linear(4, 3), None, ["'input'", "torch.int64", "nn.Embedding"]),
    ("module called twice", Twice, VEC, ["'fc'", "more than once"]),
    ("tied weights", Tied, VEC, ["'b'", "'a'", "tied"]),
    ("in-place on a view", ViewWrite, (2, 4, 2, 2), ["y.relu_()", "in-place", "view"]),
    ("control flow", Branchy, VEC, ["torch.fx could not trace", "Branchy"]),
    ("two outputs", Pair, VEC, ["Pair.forward returns tuple"]),
    ("image logits", lambda: nn.Conv2d(4, 3, 1), IMG, ["returns shape (2, 3, 4, 4)"]),
    ("unknown GELU form", lambda: Fn(lambda m, x: F.gelu(x, approximate="fast"), 4), VEC,
     ["approximate='fast'", "'none' and 'tanh'", "'inner'", HERE]),
]


@pytest.mark.parametrize("factory,shape,fragments", [pytest.param(*c[1:], id=c[0]) for c in REFUSED])
def test_refused_with_the_op_and_where(factory, shape, fragments):
    model = factory()
    x = torch.randn(*shape) if shape is not None else torch.zeros(*VEC, dtype=torch.long)
    with pytest.raises(sw.ModelImportError) as info:
        sw.from_torch(model, (x,))
    for fragment in fragments:
        assert fragment in str(info.value), f"{fragment!r} not in: {info.value}"


def test_model_import_error_is_a_graph_error():
    assert issubclass(sw.ModelImportError, sw.GraphError)
    assert issubclass(sw.ModelImportError, sw.ShardwiseError)


@pytest.mark.parametrize("model,inputs,fragment", [
    (lambda x: x, (torch.zeros(2, 4),), "takes a torch.nn.Module"),
    (nn.Linear(4, 3), (torch.zeros(2, 4, dtype=torch.bool),), "torch.bool"),
    (nn.Linear(4, 3), (), "example_inputs"),
    (nn.Linear(4, 3), (torch.zeros(2, 4), torch.zeros(2, 4)), "example_inputs has 2"),
    (nn.Linear(4, 3), ([1.0, 2.0],), "not a tensor"),
])
def test_bad_arguments(model, inputs, fragment):
    with pytest.raises(sw.ModelImportError, match=fragment):
        sw.from_torch(model, inputs)


def test_shape_mismatch_names_the_module():
    model = nn.Sequential(nn.Linear(4, 4), nn.Linear(5, 3))
    with pytest.raises(sw.ShapeError, match="'1'"):
        sw.from_torch(model, (torch.zeros(2, 4),))


# ----------------------------------------------------------------------------- the import's rules
# (that importing shardwise, import_torch included, does not load torch: tests/core/test_api.py)
def test_single_tensor_example_input_and_input_names():
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b = nn.Linear(4, 3), nn.Linear(5, 3)

        def forward(self, image, meta):
            return self.a(image) + self.b(meta)

    g, _ = sw.from_torch(Two(), (torch.zeros(2, 4), torch.zeros(2, 5)))
    assert [op.name for op in g.ops if op.kind == "input"] == ["image", "meta"]
    g1, _ = sw.from_torch(nn.Sequential(nn.Linear(4, 3)), torch.zeros(2, 4))
    assert g1.ops[0].shape == (2, 4)


def test_two_inputs_predict_like_pytorch():
    class Two(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv, self.meta = nn.Conv2d(3, 4, 3, padding=1), nn.Linear(5, 4 * 8 * 8)
            self.fc = nn.Linear(2 * 4 * 8 * 8, 3)

        def forward(self, image, meta):
            h = torch.flatten(F.relu(self.conv(image)), 1)
            return self.fc(torch.cat([h, self.meta(meta)], 1))

    torch.manual_seed(0)
    model = Two()
    rng = np.random.default_rng(0)
    image, meta = rng.standard_normal((4, 3, 8, 8)).astype(np.float32), rng.standard_normal((4, 5)).astype(np.float32)
    g, weights = sw.from_torch(model, (torch.tensor(image), torch.tensor(meta)))
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)))
    t.set_weights(weights)
    with torch.no_grad():
        want = torch.softmax(model.double()(torch.tensor(image).double(), torch.tensor(meta).double()), 1).numpy()
    np.testing.assert_allclose(t.predict({"image": image, "meta": meta}), want, atol=1e-5, rtol=0)


def test_unused_results_are_left_out():
    """A branch the output does not depend on builds no op (and has no weights); a size read
    from it still works."""
    class Aux(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.aux, self.fc = nn.Conv2d(4, 4, 3), nn.Linear(64, 3)

        def forward(self, x):
            side = F.relu(self.aux(x))
            return self.fc(x.view(side.size(0), -1))

    g, weights = sw.from_torch(Aux(), (torch.zeros(*IMG),))
    assert [op.kind for op in g.ops] == ["input", "flatten", "linear", "softmax"]
    assert set(weights) == {"fc.weight", "fc.bias"}


def test_in_place_ops_reach_every_name():
    """``h.relu_()`` with its result unused, behind an ``nn.Identity`` alias: later reads of
    either name see the ReLU; nothing reads the tensor before it."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.same, self.fc2 = nn.Linear(4, 4), nn.Identity(), nn.Linear(8, 3)

        def forward(self, x):
            h = self.fc1(x)
            alias = self.same(h)
            h.relu_()
            return self.fc2(torch.cat([h, alias], 1))

    g, _ = sw.from_torch(M(), (torch.zeros(*VEC),))
    relu = [op for op in g.ops if op.kind == "relu"]
    assert len(relu) == 1 and g.ops[relu[0].inputs[0]].name == "fc1"
    assert g["cat"].inputs == (relu[0].index, relu[0].index)


@pytest.mark.parametrize("write,kind", [
    (lambda m, h: h.sigmoid_(), "sigmoid"),
    (lambda m, h: torch.tanh_(h), "tanh"),
    (lambda m, h: F.leaky_relu_(h, 0.3), "leaky_relu"),
    (lambda m, h: F.silu(h, inplace=True), "silu"),
    (lambda m, h: m.lrelu(h), "leaky_relu"),   # nn.LeakyReLU(inplace=True)
])
def test_in_place_activations_reach_later_reads(write, kind):
    """An in-place activation whose result is not used: the later read of ``h`` is its output."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.fc1, self.fc2, self.lrelu = nn.Linear(4, 4), nn.Linear(4, 3), nn.LeakyReLU(0.3, inplace=True)

        def forward(self, x):
            h = self.fc1(x)
            write(self, h)
            return self.fc2(h)

    g, _ = sw.from_torch(M(), (torch.zeros(*VEC),))
    assert [op.kind for op in g.ops] == ["input", "linear", kind, "linear", "softmax"]
    assert g["fc2"].inputs == (g.ops[2].index,)
    if kind == "leaky_relu":
        assert g.ops[2].attrs["negative_slope"] == 0.3


def test_a_parameter_read_twice_trains_like_pytorch():
    """``x @ self.w`` in two places is one parameter op whose gradient sums both reads."""
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(4, 4) * 0.5)
            self.fc = nn.Linear(4, 3)

        def forward(self, x):
            return self.fc(F.relu(x @ self.w) + (x @ self.w))

    torch.manual_seed(0)
    model = M()
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 3, 6)
    g, weights = sw.from_torch(model, (torch.tensor(x),))
    assert [op.kind for op in g.ops].count("parameter") == 1
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=0.1, momentum=0.9))
    t.set_weights(weights)
    model = model.double()
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    for _ in range(3):
        loss = F.cross_entropy(model(torch.tensor(x).double()), torch.tensor(y))
        opt.zero_grad()
        loss.backward()
        opt.step()
        assert t.step(x, y) == pytest.approx(loss.item(), rel=1e-4)
    np.testing.assert_allclose(t.get_weights()["w"], model.w.detach().numpy(), atol=1e-4)


def test_relu_after_conv_or_linear_is_fused():
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(inplace=True), nn.Flatten(), nn.Linear(16, 4), nn.ReLU(),
                          nn.Linear(4, 3))
    g, _ = sw.from_torch(model, (torch.zeros(2, 3, 4, 4),))
    assert [op.kind for op in g.ops] == ["input", "conv2d", "flatten", "linear", "linear", "softmax"]
    assert g["0"].attrs["activation"] == "relu" and g["3"].attrs["activation"] == "relu"
    assert g["5"].attrs["activation"] is None


def test_dropout_without_effect_is_left_out():
    model = nn.Sequential(nn.Linear(4, 4), nn.Dropout(p=0.0), nn.Linear(4, 3))
    g, _ = sw.from_torch(model, (torch.zeros(*VEC),))
    assert [op.kind for op in g.ops] == ["input", "linear", "linear", "softmax"]


def test_batch_norm_momentum_and_running_statistics_are_imported():
    """A model trained a little in PyTorch, imported: its running statistics come with the
    weights, its momentum with the graph; eval predictions and further training match."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4, momentum=0.3), nn.ReLU(),
                          nn.Flatten(), nn.Linear(4 * 4 * 4, 3))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    rng = np.random.default_rng(0)
    batches = [(torch.tensor(rng.standard_normal((8, 3, 4, 4)), dtype=torch.float32),
                torch.tensor(rng.integers(0, 3, 8))) for _ in range(5)]
    for x, y in batches[:3]:   # running statistics away from their initial 0 and 1
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # nothing to warn about, in eval mode too
        g, weights = sw.from_torch(model.eval(), (torch.zeros(8, 3, 4, 4),))
    assert weights["1.num_batches_tracked"] == 3 and weights["1.num_batches_tracked"].dtype == np.int64
    t = sw.Trainer(g, sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2)), optimizer=sw.SGD(lr=0.1))
    t.set_weights(weights)
    x_test = rng.standard_normal((5, 3, 4, 4)).astype(np.float32)
    with torch.no_grad():
        want = torch.softmax(model(torch.tensor(x_test)), 1).numpy()
    np.testing.assert_allclose(t.eval().predict(x_test), want, atol=1e-5, rtol=0)
    model.train()
    t.train()
    for x, y in batches[3:]:   # momentum 0.3 carried: the running statistics keep matching
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()
        t.step(x.numpy(), y.numpy())
    got = t.get_weights()
    for key in ("running_mean", "running_var"):
        np.testing.assert_allclose(got[f"1.{key}"], getattr(model[1], key).numpy(), atol=1e-5, rtol=0)


def test_batch_norm_without_a_momentum_is_refused():
    model = nn.Sequential(nn.Conv2d(3, 4, 1), nn.BatchNorm2d(4, momentum=None), nn.Flatten(), nn.Linear(16, 3))
    with pytest.raises(sw.ModelImportError, match="momentum=None"):
        sw.from_torch(model, (torch.zeros(2, 3, 2, 2),))


def test_the_model_is_left_unchanged():
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(inplace=True), nn.Linear(4, 3))
    before = {k: v.clone() for k, v in model.state_dict().items()}
    _, weights = sw.from_torch(model, (torch.zeros(*VEC),))
    weights["0.weight"][:] = 7.0   # the returned arrays are copies
    for k, v in model.state_dict().items():
        assert torch.equal(v, before[k])


# ----------------------------------------------------------------------------- the op table
def test_table_spellings_resolve_once():
    from shardwise.importers.torch.convert import resolve
    from shardwise.importers.torch.ops import TORCH_OPS, TorchOp

    index = resolve(torch)
    assert index.modules[nn.Conv2d].name == "conv" and index.functions[F.relu].name == "relu"
    with pytest.raises(ValueError, match="listed by both"):
        resolve(torch, TORCH_OPS + (TorchOp("again", lambda c: None, modules=("Conv2d",)),))


def test_the_documentation_lists_every_spelling():
    from shardwise.importers.torch.ops import TORCH_OPS

    with open(DOC, encoding="utf-8") as f:
        doc = f.read()
    spellings = [s for entry in TORCH_OPS
                 for s in (*(m if "." in m else f"nn.{m}" for m in entry.modules), *(f.replace("torch.nn.functional.", "F.")
                                                                  for f in entry.functions),
                           *(f"x.{m}(" for m in entry.methods))]
    missing = [s for s in spellings if f"`{s}" not in doc]
    assert not missing, f"docs/importing.md does not list {missing}"
