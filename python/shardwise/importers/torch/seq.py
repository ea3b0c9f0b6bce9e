"""The sequence-model operations :func:`shardwise.from_torch` imports: layer norm, embedding,
transpose and permute, attention (``F.scaled_dot_product_attention``, or its composition
``softmax((q @ k.transpose(-2, -1)) * scale).masked_fill(causal mask, -inf) @ v``), indexing one
step of a sequence, and ``nn.LSTM`` unrolled over time.

Two kinds of values of the trace are kept lazy (:class:`~shardwise.importers.common.Lazy`) until
a reader decides what they become:

* :class:`Scores`: attention scores (the result of a batched matmul) times a constant and with a
  causal mask: the softmax that reads them is one ``softmax_dim`` op with that scale and mask,
  as :meth:`~shardwise.Graph.attention` composes it.  Nothing else may read them.
* :class:`Steps` and :class:`Layers`: an LSTM's output sequence (N, T, H) as its T steps, and
  its final states (layers, N, H) as one (N, H) tensor per layer; ``out[:, -1]`` and ``h_n[-1]``
  pick one without building an op.

Shapes in the comments: N samples, T steps or tokens, D features, H heads (or hidden units),
Dh = D / H.  Nothing here imports torch at module level.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from shardwise.errors import ModelImportError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import Lazy, normalize_trailing
from shardwise.importers.torch.call import (REQUIRED, Attr, Call, TorchOp, _dim, _dim_attr, _show, is_torch_tensor,
                                record_weights)

MASK_FILL_MAX = -1e9
"""The largest fill value of a causal mask taken for -inf: after the softmax, exp(-1e9 - max)
is 0 in float32 for any score below 1e8, as exp(-inf) is (torch.finfo(float32).min, the usual
fill of Hugging Face's models, qualifies)."""


# ----------------------------------------------------------------------------- lazy values
@dataclass(eq=False)
class Scores(Lazy):
    """``t`` (attention scores, a batched matmul's result (.., T_q, T_k)) times ``scale``, with
    keys after their query masked when ``causal``: the operand of a softmax over the keys."""

    t: Tensor
    scale: float = 1.0
    causal: bool = False
    where: str = ""

    def __repr__(self) -> str:
        return f"attention scores of shape {self.t.shape} (scaled or masked)"

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        raise ModelImportError(f"{where}: reads {self!r} (from {self.where}) as {what}; scaling and causal masking "
                               f"are supported only on attention scores read by a softmax over their last dimension")

    def softmax(self, c: Call, dim: Any) -> Tensor:
        r = len(self.t.shape)
        if dim is None or _dim(c, dim, r) != r - 1:
            raise c.error(f"a softmax over dim={dim!r} of {self!r} is not supported; only over the keys (dim=-1)")
        return c.graph.softmax_dim(self.t, -1, scale=self.scale, causal=self.causal, name=c.name)


@dataclass(eq=False)
class Steps(Lazy):
    """An LSTM's (N, T, H) output as its T (N, H) steps; read whole, it is built once (each step
    reshaped to (N, 1, H), then one concat along T)."""

    steps: list[Tensor]
    name: str
    built: Tensor | None = None

    @property
    def shape(self) -> tuple[int, int, int]:
        n, h = self.steps[0].shape
        return (n, len(self.steps), h)

    def __repr__(self) -> str:
        n, h = self.steps[0].shape
        return f"the LSTM output sequence {self.name!r} of shape {(n, len(self.steps), h)}"

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        if self.built is None:
            n, h = self.steps[0].shape
            parts = [g.reshape(s, (n, 1, h), name=f"{self.name}.t{t}") for t, s in enumerate(self.steps)]
            self.built = parts[0] if len(parts) == 1 else g.concat(parts, axis=1, name=self.name)
        return self.built


@dataclass(eq=False)
class Layers(Lazy):
    """An LSTM's final hidden or cell state (layers, N, H) as one (N, H) tensor per layer:
    indexing by layer (``h_n[-1]``) is all that is supported (its first dimension is not the batch)."""

    layers: list[Tensor]
    name: str

    def __repr__(self) -> str:
        n, h = self.layers[0].shape
        return f"the LSTM state {self.name!r} of shape {(len(self.layers), n, h)}"

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        raise ModelImportError(f"{where}: reads {self!r} whole as {what}; only one layer of it (h_n[-1]) is "
                               f"supported, as its first dimension is the layer, not the batch")


# ----------------------------------------------------------------------------- converters
def _normalized_dims(c: Call, x: Tensor, normalized_shape: Any) -> int:
    """How many trailing dimensions of x ``normalized_shape`` names (refusing any other shape)."""
    ns = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    k = len(ns)
    if not 1 <= k < len(x.shape) or tuple(x.shape[-k:]) != tuple(int(d) for d in ns):
        raise c.error(f"normalized_shape={ns} of an input {x.shape} is not supported (the input's last dimensions, "
                      f"not the batch)")
    return k


def _flat(t: Any, dims: int) -> Any:
    """A weight of the normalized shape as the op's (D,) (a copy when it has several dimensions)."""
    return t if t is None or dims == 1 else t.detach().reshape(-1).clone()


def _norm(c: Call, x: Tensor, normalized_shape: Any, weight: Any, bias: Any, eps: float, rms: bool) -> Tensor:
    k = _normalized_dims(c, x, normalized_shape)
    y = normalize_trailing(c, x, k, float(eps), rms=rms)
    c.set_weights(weight=_flat(weight, k), bias=_flat(bias, k))
    return y


def _layer_norm(c: Call) -> Tensor:
    """nn.LayerNorm over the last dimension, or several (a reshape merging them, the norm, a
    reshape back: shardwise.importers.common.normalize_trailing)."""
    m = c.module
    if not m.elementwise_affine or m.bias is None:
        raise c.error("a layer norm without weight or bias is not supported (elementwise_affine=True, bias=True)")
    return _norm(c, c.tensor(0), m.normalized_shape, m.weight, m.bias, float(m.eps), rms=False)


def _embedding(c: Call) -> Tensor:
    """nn.Embedding of token ids (an integer input of the model), or of the positions
    ``torch.arange(num_embeddings)``: the whole table as a ``parameter`` op (T, D), added to
    the tokens by broadcasting (GPT-2's learned positions, as sw.models.gpt builds them)."""
    m = c.module
    for attr, default in (("padding_idx", None), ("max_norm", None), ("scale_grad_by_freq", False)):
        if getattr(m, attr) != default:
            raise c.error(f"{attr}={getattr(m, attr)!r} is not supported")
    ids = c.inputs[0]
    vocab, dim = int(m.weight.shape[0]), int(m.weight.shape[1])
    if is_torch_tensor(ids):
        import torch
        if ids.dim() != 1 or not torch.equal(ids.long(), torch.arange(vocab)):
            raise c.error(f"an embedding of the constant indices {_show(ids)} is not supported; constant indices "
                          f"must be torch.arange(num_embeddings) (all {vocab} positions: the whole table)")
        y = c.graph.parameter((vocab, dim), name=c.name)
    else:
        y = c.graph.embedding(c.tensor(0, ids_ok=True), vocab, dim, name=c.name)
    c.set_weights(weight=m.weight)
    return y


def _transpose(c: Call) -> Tensor:
    x = c.tensor(0)
    r = len(x.shape)
    a, b = _dim_attr(c, "dim0", r), _dim_attr(c, "dim1", r)
    if a == b:
        return x
    if 0 in (a, b):
        raise c.error(f"transposing the batch dimension (dims {c.attrs['dim0']}, {c.attrs['dim1']} of {x.shape}) is "
                      f"not supported")
    return c.graph.transpose(x, a, b, name=c.name)


def _permute(c: Call) -> Tensor:
    x = c.tensor(0)
    dims = c.attrs["dims"]
    if not isinstance(dims, (tuple, list)) or len(dims) != len(x.shape):
        raise c.error(f"permute({dims!r}) of shape {x.shape} is not supported")
    perm = [_dim(c, d, len(x.shape), "dims") for d in dims]
    if perm[0] != 0:
        raise c.error(f"permute({tuple(dims)}) moves the batch dimension; it must stay first")
    return x if perm == list(range(len(perm))) else c.graph.permute(x, perm, name=c.name)


def _number(c: Call, v: Any, infinite: bool = False) -> float | None:
    """``v`` as a float when it is a real number (finite unless ``infinite``), else None."""
    if is_torch_tensor(v) and v.dim() == 0:
        v = v.item()
    if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(v) or (math.isinf(v) and not infinite):
        return None
    return float(v)


def _scores(c: Call, v: Any) -> Scores | None:
    """``v`` as attention scores: already :class:`Scores`, or the result of a batched matmul."""
    if isinstance(v, Scores):
        return v
    if isinstance(v, Tensor) and len(v.shape) >= 3 and c.graph.ops[v.op].kind == "matmul":
        return Scores(v, where=c.where)
    return None


def _scale(divide: bool) -> Any:
    """``scores * c``, ``scores / c``: a positive constant factor of attention scores, applied
    by the softmax that reads them."""
    def convert(c: Call) -> Scores:
        a, b = c.inputs[0], c.inputs[1]
        pairs = ((a, b),) if divide else ((a, b), (b, a))
        for x, k in pairs:
            s, f = _scores(c, x), _number(c, k)
            if s is not None and f is not None and f > 0:
                f = 1.0 / f if divide else f
                return Scores(s.t, s.scale * f, s.causal, s.where)
        raise c.error(f"{c.op} of {_show(a)} and {_show(b)} is not supported; a product with a constant is "
                      f"supported only as a positive scale of attention scores (q @ k.transpose(-2, -1)) read by "
                      f"a softmax")
    return convert


def _masked_fill(c: Call) -> Scores:
    """``scores.masked_fill(mask, -inf)`` with the causal mask (True above the diagonal: key j
    after query i), evaluated from the model's constants (``torch.triu(ones, 1)``, a buffer
    ``tril(ones)[:, :, :T, :T] == 0``, ...); the softmax reading it applies the mask."""
    s, mask, value = _scores(c, c.inputs[0]), c.inputs[1], _number(c, c.attrs["value"], infinite=True)
    if isinstance(mask, Attr) and not mask.value.requires_grad:   # a buffer, or a tensor made while tracing
        mask = mask.value
    if s is None:
        raise c.error(f"masked_fill of {_show(c.inputs[0])} is not supported; only of attention scores "
                      f"(q @ k.transpose(-2, -1)) with a causal mask")
    if not is_torch_tensor(mask):
        raise c.error(f"masked_fill with the mask {_show(mask)} is not supported; the mask must be a constant "
                      f"(computed from the model's buffers or torch.ones/tril/triu)")
    if value is None or value > MASK_FILL_MAX:
        raise c.error(f"masked_fill with value {c.attrs['value']!r} is not supported; only -inf (or a value "
                      f"<= {MASK_FILL_MAX:g}) where the causal mask is True")
    import torch
    tq, tk = s.t.shape[-2:]
    causal = torch.ones(tq, tk, dtype=torch.bool).triu(1)
    try:
        full = mask.to(torch.bool).expand(s.t.shape)
    except RuntimeError:
        raise c.error(f"the mask of shape {tuple(mask.shape)} does not broadcast to the scores {s.t.shape}") from None
    if not bool((full == causal).all()):
        raise c.error(f"masked_fill with a mask of shape {tuple(mask.shape)} that is not the causal mask (True "
                      f"exactly where the key comes after the query) is not supported")
    return Scores(s.t, s.scale, True, s.where)


def _sdpa(c: Call) -> Tensor:
    """F.scaled_dot_product_attention(q, k, v, is_causal=...): the builder's attention composition."""
    a = c.attrs
    for key, ok in (("attn_mask", a["attn_mask"] is None), ("dropout_p", a["dropout_p"] in (0, 0.0)),
                    ("enable_gqa", not a["enable_gqa"])):
        if not ok:
            raise c.error(f"{key}={a[key]!r} is not supported (no mask tensor, no dropout, no grouped query "
                          f"attention; is_causal=True gives the causal mask)")
    q, k, v = c.tensor(0), c.tensor(1), c.tensor(2)
    scale = None if a["scale"] is None else _number(c, a["scale"])
    return c.graph.attention(q, k, v, causal=bool(a["is_causal"]), scale=scale, name=c.name)


def _getitem(c: Call) -> Any:
    """``x[i]``: an element of a tuple (an LSTM's ``(out, (h, c))``), a step of a sequence
    (``out[:, t]``, ``out[:, t, :]``: a ``select`` op, or the LSTM's own step), a layer of an
    LSTM's state (``h_n[-1]``)."""
    x, index = c.inputs[0], c.attrs["index"]
    if isinstance(x, (tuple, list)) and isinstance(index, int):
        return x[index]
    if isinstance(x, Layers) and isinstance(index, int) and -len(x.layers) <= index < len(x.layers):
        return x.layers[index]
    picked = _step_index(index)
    if picked is not None and isinstance(x, Steps) and picked[0] == 1 and -len(x.steps) <= picked[1] < len(x.steps):
        return x.steps[picked[1]]
    if picked is not None and isinstance(x, Tensor) and picked[0] > 0:
        dim = picked[0]
        if dim < len(x.shape) and -x.shape[dim] <= picked[1] < x.shape[dim]:
            return c.graph.select(c.tensor(0), dim, picked[1] % x.shape[dim], name=c.name)
    from shardwise.importers.torch.operands import slice_index
    sliced = slice_index(c, x, index)   # x[:, 1:], self.pos[:, :T]: slice ops
    if sliced is not None:
        return sliced
    raise c.error(f"{c.op} of {_show(x)} with the index {index!r} is not supported; only x[:, t] (one index of a "
                  f"dimension after the batch), slices (x[:, a:b]), the elements of a returned tuple and h_n[layer] "
                  f"of an LSTM")


def _step_index(index: Any) -> tuple[int, int] | None:
    """(dim, i) for an index that picks index i of one dimension and keeps all of the others."""
    if not isinstance(index, tuple):
        return None
    ints = [(d, i) for d, i in enumerate(index) if isinstance(i, int) and not isinstance(i, bool)]
    rest = [i for i in index if not (isinstance(i, int) and not isinstance(i, bool))]
    if len(ints) != 1 or any(not (isinstance(i, slice) and i == slice(None)) for i in rest):
        return None
    return ints[0]


GATES = "ifgo"
"""PyTorch's LSTM gate order: the rows of weight_ih_l<k>, weight_hh_l<k> and the biases are
the input, forget, cell (g) and output gates' blocks of ``hidden_size`` rows, in this order."""


def lstm_layer(g: Graph, seq: Tensor, p: str, layer: int, hid: int, bias: bool) -> tuple[list[Tensor], Tensor]:
    """One layer of an LSTM over the (N, T, in) sequence ``seq``, from zero states, unrolled;
    returns its T hidden states (N, H) and its last cell state (N, H).  Both importers build
    LSTMs with it (from_torch from nn.LSTM, from_onnx from the ONNX LSTM node), so the graphs
    are the same.

    Per gate k (i, f, g, o), with hidden size H and p the module's path:

        p.l<l>.<k>.ih       linear (N, T, in) -> (N, T, H)
        p.l<l>.<k>.hh       parameter (H, H)
        p.l<l>.<k>.hh_bias  parameter (H,) (when ``bias``)
        step t: pre_k = select(ih, 1, t) + h_{t-1} @ hh^T + hh_bias         (N, H)
                c_t = lstm_cell(pre_i, pre_f, pre_g, c_{t-1}); h_t = lstm_hidden(pre_o, c_t)

    At t = 0 the states are zero: no h @ hh^T, and c_0 = sigmoid(pre_i) * tanh(pre_g), the
    product of an (N, H, 1, 1) batched matmul (the graph has no element-wise product).
    :func:`lstm_weights` gives the ops' weights."""
    n, steps = seq.shape[0], seq.shape[1]
    ih, hh, hb = {}, {}, {}
    for k in GATES:
        base = f"{p}.l{layer}.{k}"
        ih[k] = g.linear(seq, hid, bias=bias, name=f"{base}.ih")
        hh[k] = g.parameter((hid, hid), name=f"{base}.hh")
        if bias:
            hb[k] = g.parameter((hid,), name=f"{base}.hh_bias")
    h = cell = None
    out = []
    for t in range(steps):
        s = f"{p}.l{layer}.t{t}"
        pre = {}
        for k in (GATES if t else "igo"):   # at t = 0 the forget gate multiplies c = 0
            y = g.select(ih[k], 1, t, name=f"{s}.{k}")
            if h is not None:
                y = g.add(y, g.matmul(h, hh[k], transpose_b=True, name=f"{s}.{k}.hh"), name=f"{s}.{k}.sum")
            if bias:
                y = g.add(y, hb[k], name=f"{s}.{k}.bias")
            pre[k] = y
        if cell is None:
            si = g.reshape(g.sigmoid(pre["i"], name=f"{s}.sig_i"), (n, hid, 1, 1), name=f"{s}.sig_i4")
            tg = g.reshape(g.tanh(pre["g"], name=f"{s}.tanh_g"), (n, hid, 1, 1), name=f"{s}.tanh_g4")
            cell = g.reshape(g.matmul(si, tg, name=f"{s}.c4"), (n, hid), name=f"{s}.c")
        else:
            cell = g.lstm_cell(pre["i"], pre["f"], pre["g"], cell, name=f"{s}.c")
        h = g.lstm_hidden(pre["o"], cell, name=f"{s}.h")
        out.append(h)
    assert cell is not None
    return out, cell


def lstm_weights(p: str, layer: int, hid: int, w_ih: Any, w_hh: Any, b_ih: Any = None,
                 b_hh: Any = None) -> dict[str, dict[str, Any]]:
    """The weights of :func:`lstm_layer`'s ops, ``{op: {param: rows}}``: row blocks of PyTorch's
    tensors (``weight_ih_l<l>`` (4H, in), ``weight_hh_l<l>`` (4H, H), ``bias_ih_l<l>``,
    ``bias_hh_l<l>`` (4H,), gates in the order i, f, g, o; biases None for an LSTM without)."""
    out: dict[str, dict[str, Any]] = {}
    for q, k in enumerate(GATES):
        rows = slice(q * hid, (q + 1) * hid)
        base = f"{p}.l{layer}.{k}"
        out[f"{base}.ih"] = {"weight": w_ih[rows], **({"bias": b_ih[rows]} if b_ih is not None else {})}
        out[f"{base}.hh"] = {"weight": w_hh[rows]}
        if b_hh is not None:
            out[f"{base}.hh_bias"] = {"weight": b_hh[rows]}
    return out


def _lstm(c: Call) -> tuple[Steps, tuple[Layers, Layers]]:
    """nn.LSTM(batch_first=True) over (N, T, E) from zero states, unrolled: :func:`lstm_layer`
    per layer, layer l > 0 reading layer l - 1's steps as one (N, T, H) sequence.  Every
    parameter is a slice of PyTorch's (:func:`lstm_weights`), so SGD (momentum, weight decay)
    updates them as PyTorch updates its tensors."""
    m, g, p = c.module, c.graph, c.name
    if m.bidirectional or getattr(m, "proj_size", 0) or not m.batch_first:
        raise c.error(f"bidirectional={m.bidirectional}, proj_size={getattr(m, 'proj_size', 0)}, batch_first="
                      f"{m.batch_first} is not supported; only a one-way LSTM with batch_first=True (the batch "
                      f"dimension first), without projections")
    if m.num_layers > 1 and m.dropout and m.training:
        raise c.error(f"dropout={m.dropout} between layers is not supported")
    x: Any = c.tensor(0, rank=3)
    if x.shape[2] != m.input_size:
        raise c.error(f"input_size={m.input_size} but the input has shape {x.shape}")
    seq, hs, cs = x, [], []
    for layer in range(m.num_layers):
        if not isinstance(seq, Tensor):
            seq = seq.tensor(g, c.where, "input")
        out, cell = lstm_layer(g, seq, p, layer, m.hidden_size, bool(m.bias))
        biases = [getattr(m, f"bias_{w}_l{layer}") for w in ("ih", "hh")] if m.bias else [None, None]
        for op, ps in lstm_weights(p, layer, m.hidden_size, getattr(m, f"weight_ih_l{layer}"),
                                   getattr(m, f"weight_hh_l{layer}"), *biases).items():
            record_weights(c.weights, op, ps, c.where)
        hs.append(out[-1])
        cs.append(cell)
        seq = Steps(out, f"{p}.l{layer}.out")
    seq.name = f"{p}.out"
    return seq, (Layers(hs, f"{p}.h_n"), Layers(cs, f"{p}.c_n"))


def _select(c: Call) -> Tensor:
    x = c.tensor(0)
    dim = _dim_attr(c, "dim", len(x.shape))
    index = c.attrs["index"]
    if dim == 0 or isinstance(index, bool) or not isinstance(index, int) or not -x.shape[dim] <= index < x.shape[dim]:
        raise c.error(f"select(dim={c.attrs['dim']!r}, index={index!r}) of shape {x.shape} is not supported (one "
                      f"index of a dimension after the batch)")
    return c.graph.select(x, dim, index % x.shape[dim], name=c.name)


_F = "torch.nn.functional."

_PERMUTE_DOC = "the batch dimension stays first"
_SCALE_DOC = ("a positive constant times attention scores (a batched `matmul`'s result) read by a softmax over the "
              "keys: the softmax's `scale`")
_SELECT_DOC = ("one index of a dimension after the batch (`x[:, -1]`, `x[:, t, :]`); `getitem` also takes the elements "
               "of a returned tuple (`out, (h, c) = lstm(x)`) and a layer of an LSTM's state (`h_n[-1]`)")

TORCH_SEQ_OPS: tuple[TorchOp, ...] = (
    TorchOp("layer_norm", _layer_norm, modules=("LayerNorm",), op="`layer_norm` (+ `reshape`)",
            doc="over the last dimensions (`normalized_shape`; several: a `reshape` merging them, the norm, a "
                "`reshape` back), with weight and bias; any `eps`"),
    TorchOp("embedding", _embedding, modules=("Embedding",), op="`embedding`",
            doc="of an integer input (token ids); or of `torch.arange(num_embeddings)`, the whole table: a "
                "`parameter` op `(T, D)` (learned positions, added by broadcasting); no `padding_idx`, `max_norm`, "
                "`scale_grad_by_freq`"),
    TorchOp("transpose", _transpose, params=(("dim0", REQUIRED), ("dim1", REQUIRED)),
            functions=("torch.transpose",), methods=("transpose",), op="`permute`", doc=_PERMUTE_DOC),
    TorchOp("permute", _permute, params=(("dims", REQUIRED),), functions=("torch.permute",), methods=("permute",),
            variadic=True, op="`permute`", doc=_PERMUTE_DOC),
    # operator.mul, torch.mul and Tensor.mul: importers/torch/bcast.py (tensors broadcast, or this scale)
    TorchOp("div", _scale(True), inputs=2, params=(("rounding_mode", None),),
            functions=("operator.truediv", "torch.div"), methods=("div",),
            op="(the scale of attention scores)", doc=_SCALE_DOC),
    TorchOp("masked_fill", _masked_fill, inputs=2, params=(("value", REQUIRED),), functions=("torch.masked_fill",),
            methods=("masked_fill",), op="(the causal mask)",
            doc="of attention scores, with the causal mask (True exactly where the key comes after the query: "
                "`tril(ones)[..., :T, :T] == 0` from a buffer, `torch.triu(ones, 1).bool()`, ...) and `-inf` (or a "
                "value <= -1e9): the softmax's `causal=True`"),
    TorchOp("attn", _sdpa, inputs=3, params=(("attn_mask", None), ("dropout_p", 0.0), ("is_causal", False),
                                             ("scale", None), ("enable_gqa", False)),
            functions=(_F + "scaled_dot_product_attention",), op="attention: `matmul`, `softmax_dim`, `matmul`",
            doc="`attn_mask=None`, `dropout_p=0`, any `is_causal` and `scale`: `g.attention`'s composition"),
    TorchOp("getitem", _getitem, params=(("index", REQUIRED),), functions=("operator.getitem",),
            op="`select`", doc=_SELECT_DOC),
    TorchOp("select", _select, params=(("dim", REQUIRED), ("index", REQUIRED)),
            functions=("torch.select",), methods=("select",), op="`select`", doc=_SELECT_DOC),
    TorchOp("lstm", _lstm, modules=("LSTM",), op="unrolled LSTM (below)",
            doc="`batch_first=True`, one direction, no `proj_size`, no dropout between layers in training; zero "
                "initial states (called with one argument)"),
)
"""The sequence-model operations, part of :data:`~shardwise.importers.torch.ops.TORCH_OPS`."""
