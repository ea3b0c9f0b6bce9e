"""The sequence-model ops :func:`shardwise.from_onnx` imports: ``Gather`` of a table (embeddings,
learned positions), ``LayerNormalization``, reshapes and transposes beyond flattening, batched
``MatMul`` and linear layers on (N, T, D), and scaled dot-product attention as PyTorch's
(dynamo) exporter writes it::

    q' = Mul(q, sqrt(s)); k' = Mul(Reshape(Transpose(Reshape(k))), sqrt(s))     k transposed
    probs = Softmax(Add(MatMul(q', k'), mask), axis=-1)                         mask: 0 / -inf causal
    out = MatMul(probs, v)

which becomes the composition :meth:`~shardwise.Graph.attention` builds (``matmul(q, k,
transpose_b=True)``, ``softmax_dim(scale, causal)``, ``matmul``), the graph ``from_torch`` builds
from the same model.  As in :mod:`shardwise.importers.torch.seq`, values on the way are lazy:

* :class:`~shardwise.importers.onnx.views.View`: reshapes and transposes of a graph tensor
  that move the batch dimension (the exporter's ``(N, H, T, Dh) -> (N H, T, Dh)`` around the
  transpose of k; attention spelled sequence-first), which say exactly which elements they
  read, so a MatMul can tell the transpose of the last two dimensions, and a reader that needs
  a tensor gets one built of exact ops (:mod:`~shardwise.importers.onnx.views`);
* :class:`Scaled`: a tensor times a positive constant, read by a MatMul;
* :class:`Scores`: a MatMul's result with a scale and a causal mask, read by a Softmax.

Nothing here imports onnx.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardwise.errors import ShardwiseError
from shardwise.graph import Tensor
from shardwise.importers.onnx.const import Const, FoldError, reshape_target
from shardwise.importers.onnx.ops import ONNX_OPS, OnnxCall, _linear, _show
from shardwise.importers.common import Lazy, normalize_trailing
from shardwise.importers.onnx.views import (View, flat_index, materialize, resolve, same_layout, split_batch, take_view,
                                            transposed_of)
from shardwise.importers.windows import constant

__all__ = ["View", "resolve", "same_layout"]   # where import_onnx_rnn and groupnorm take them from

MASK_FILL_MAX = -1e9   # as import_torch_seq: an additive mask value taken for -inf


@dataclass(eq=False)
class Scaled:
    """``t`` times a positive constant ``factor`` (the exporter scales q and k before their product)."""

    t: Any            # Tensor or View
    factor: float


@dataclass(eq=False)
class Scores:
    """Attention scores ``t`` (a matmul's result) times ``scale``, causally masked when ``causal``."""

    t: Any            # Tensor, or a View of one whose batch is merged with other dimensions
    scale: float
    causal: bool = False


def _view(c: OnnxCall, x: Any, make: Callable[[np.ndarray], np.ndarray], what: str) -> Any:
    """The view ``make`` takes of ``x`` (:func:`~shardwise.importers.onnx.views.take_view`)."""
    return take_view(c.where, x, make, what, c.graph, c.name)


def _reshape(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    def convert(c: OnnxCall) -> Any:
        x = c.inputs[0]
        if isinstance(x, (Tensor, View)) and len(c.inputs) > 1 and isinstance(c.inputs[1], Const):
            try:
                shape = reshape_target(x.shape, c.const_ints(1, "shape"),
                                       bool(c.attrs.get_int("allowzero", 0)))
            except FoldError as exc:
                raise c.error(str(exc)) from None
            if isinstance(x, Tensor) and (shape == x.shape or (len(shape) == 2 and len(x.shape) > 2
                                                                and shape[0] == x.shape[0])):
                return previous(c)   # the identity, or a flatten to (N, features)
            if isinstance(x, Tensor) and len(shape) >= 2 and shape[0] == x.shape[0]:
                try:
                    return c.graph.reshape(x, shape, name=c.name)
                except ShardwiseError:   # a reshape the builder cannot describe: it may still be part of a view
                    pass
            return _view(c, x, lambda a: a.reshape(shape), "reshaping")
        return previous(c)
    return convert


def _transpose(c: OnnxCall) -> Any:
    x = c.inputs[0]
    if not isinstance(x, (Tensor, View)):
        raise c.error(f"Transpose of {_show(x)} is not supported")
    r = len(x.shape)
    perm = c.attrs.get_ints("perm", list(range(r))[::-1])
    if sorted(p % r for p in perm) != list(range(r)) or any(not -r <= p < r for p in perm):
        raise c.error(f"perm={perm} is not a permutation of the {r} dimensions of {_show(x)}")
    perm = [p % r for p in perm]
    if perm == list(range(r)):
        return x
    if isinstance(x, Tensor) and perm[0] == 0:
        return c.graph.permute(x, perm, name=c.name)
    return _view(c, x, lambda a: np.transpose(a, perm), "transposing")


def _scalar(v: Any) -> float | None:
    if isinstance(v, Const) and v.value.size == 1 and v.value.dtype.kind == "f":
        f = float(v.value.reshape(-1)[0])
        return f if math.isfinite(f) and f > 0 else None
    return None


def _mul(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Mul(x, constant): a :class:`Scaled` operand of a MatMul; anything else as before (SiLU)."""
    def convert(c: OnnxCall) -> Any:
        a, b = c.inputs[0], c.inputs[1]
        for x, k in ((a, b), (b, a)):
            f = _scalar(k)
            if f is not None and isinstance(x, (Tensor, View, Scaled)) and len(getattr(x, "shape", (0, 0, 0))) >= 3:
                return Scaled(x.t, x.factor * f) if isinstance(x, Scaled) else Scaled(x, f)
        return previous(c)
    return convert


def _matmul(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """MatMul: a linear layer on (N, T, D) when its weight is a transposed initializer (the
    dynamo exporter's nn.Linear), a batched product of two computed tensors (attention),
    reading a transposed operand transposed; else as before."""
    def convert(c: OnnxCall) -> Any:
        a, b = c.inputs[0], c.inputs[1]
        if isinstance(b, Const) and b.transposed and isinstance(a, (Tensor, View)) and c.bias_add is None:
            w = c.weight(1, "weight", rank=2)
            return _linear(c, a, (w, w.value.T), None)
        if isinstance(a, Const) or isinstance(b, Const):
            return previous(c)
        scale = 1.0
        ops = []
        for v in (a, b):
            if isinstance(v, Scaled):
                scale *= v.factor
                v = v.t
            if not isinstance(v, (Tensor, View)):
                raise c.error(f"MatMul of {_show(a)} and {_show(b)} is not supported")
            ops.append(v)
        merge = None
        merged = [v for v in ops if isinstance(v, View) and v.shape and v.shape[0] != v.base.shape[0]]
        if merged:   # the batch merged with other dimensions (Swin's windows): the product on (N, k, ...)
            batch = merged[0].base.shape[0]
            k = merged[0].shape[0] // batch
            if any(v.shape[0] != batch * k for v in ops):
                raise c.error(f"MatMul of {_show(a)} and {_show(b)} is not supported (first dimensions that are not "
                              f"the same multiple of the batch)")
            ops = [_view(c, v, lambda arr: arr.reshape((batch, k) + arr.shape[1:]), "splitting the batch") for v in ops]
            merge = lambda t: _view(c, t, lambda arr: arr.reshape((batch * k,) + arr.shape[2:]),  # noqa: E731
                                    "merging the batch")
        (x, ta), (y, tb) = (_operand(c, v, k) for k, v in enumerate(ops))
        if len(x.shape) == 2 and scale == 1.0 and not (ta or tb):
            return previous(c)
        out = c.graph.matmul(x, y, transpose_a=ta, transpose_b=tb, name=c.name)
        if merge is not None:
            out = merge(out)
        return out if scale == 1.0 else Scores(out, scale)
    return convert


def _einsum(matmul: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Einsum of a batched matrix product, ``"...ik,...kj->...ij"`` with either operand's last two
    letters swapped (MaxViT's ``"BGHID,BGHJD->BGHIJ"``, q k^T): the MatMul of the operands (a
    swapped one read as a transposed view)."""
    def convert(c: OnnxCall) -> Any:
        eq = c.attrs.get_str("equation", "").replace(" ", "")
        terms = eq.split("->")
        ins = terms[0].split(",") if len(terms) == 2 else []
        ok = len(ins) == 2 == len(c.inputs) and all(t.isalpha() and len(set(t)) == len(t) for t in ins + terms[1:])
        if ok:
            (a, b), out = ins, terms[1]
            lead = out[:-2]
            i, j = out[-2:] if len(out) >= 2 else ("", "")
            k = (set(a[-2:]) - {i}).pop() if len(a) >= 2 and i in a[-2:] and len(set(a[-2:]) - {i}) == 1 else ""
            ok = (len(out) >= 2 and a[:-2] == b[:-2] == lead and sorted(a[-2:]) == sorted(i + k)
                  and sorted(b[-2:]) == sorted(k + j) and k not in (i, j) and i != j)
        if not ok:
            raise c.error(f"Einsum {eq!r} is not supported (a batched matrix product '...ik,...kj->...ij', either "
                          f"operand's last two letters swapped)")
        def swap(v: Any) -> Any:
            return _view(c, v, lambda arr: np.swapaxes(arr, -1, -2), "transposing")

        values = list(c.inputs)
        for n, (term, want) in enumerate(((a, i + k), (b, k + j))):
            if term[-2:] != want:
                v = values[n]
                values[n] = Scaled(swap(v.t), v.factor) if isinstance(v, Scaled) else swap(v)
        c.inputs = values
        return matmul(c)
    return convert


def _operand(c: OnnxCall, v: Any, k: int) -> tuple[Tensor, bool]:
    """MatMul operand ``k`` as (tensor, read transposed): a view of the transpose of a tensor's
    last two dimensions reads that tensor transposed; another view is built as a tensor
    (:func:`~shardwise.importers.onnx.views.materialize`), transposed where its last axis steps
    further through the base than the one before it does (k^T, whose tensor is k)."""
    t = transposed_of(v)
    if isinstance(t, Lazy):   # a transposed LSTM output: the whole sequence, read transposed
        t = t.tensor(c.graph, c.where, "a MatMul operand")
    if t is not None:
        return t, True
    if not isinstance(v, View):
        return v, False
    if len(v.shape) >= 2 and min(v.shape[-2:]) > 1:
        index = flat_index(v)
        if index[..., 0, 1].flat[0] - index[..., 0, 0].flat[0] > index[..., 1, 0].flat[0] - index[..., 0, 0].flat[0]:
            swapped = _view(c, v, lambda a: np.swapaxes(a, -1, -2), "transposing")
            if isinstance(swapped, Tensor):
                return swapped, True
            return materialize(c.graph, swapped, f"{c.name}.in{k}", c.where), True
    return materialize(c.graph, v, f"{c.name}.in{k}", c.where), False


def _add(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Add: of a causal mask (0 on and below the diagonal, -inf above) to attention scores; of a
    position table (T, D) to (N, T, D); else as before."""
    def convert(c: OnnxCall) -> Any:
        a, b = c.inputs[0], c.inputs[1]
        for x, m in ((a, b), (b, a)):
            if isinstance(m, Const) and isinstance(x, (Scores, Tensor)) and (isinstance(x, Scores) or (
                    len(x.shape) >= 3 and c.graph.ops[x.op].kind == "matmul")):
                s = x if isinstance(x, Scores) else Scores(x, 1.0)
                tq, tk = s.t.shape[-2:]
                mask = np.broadcast_to(m.value, m.value.shape) if m.value.ndim >= 2 else None
                if mask is None or mask.shape[-2:] != (tq, tk):
                    break
                above = np.broadcast_to(np.triu(np.ones((tq, tk), dtype=bool), 1), mask.shape)
                if not (np.array_equal(mask <= MASK_FILL_MAX, above) and np.array_equal(mask == 0, ~above)):
                    raise c.error("adding a mask to attention scores that is not the causal mask (0 on and below the "
                                  "diagonal, -inf above) is not supported")
                return Scores(s.t, s.scale, True)
        for x, m in ((a, b), (b, a)):
            if isinstance(x, Scores) and not x.causal and isinstance(m, Tensor) and m.shape[:1] == (1,) \
                    and 2 <= len(m.shape) <= len(x.t.shape):
                # scores plus a bias of the model (Swin's and MaxViT's relative positions, (1, H, T, T)):
                # the scores times their scale (a constant made from the bias), then the sum, on
                # (N, k, H, T, T) where the batch was merged with the windows
                t, merge = split_batch(c.graph, x.t, c.name, c.where)
                if x.scale != 1.0:
                    t = c.graph.mul(t, constant(c.graph, m, x.scale, f"{c.name}.scale"), name=f"{c.name}.scaled")
                return merge(c.graph.add(t, m, name=c.name))
        if isinstance(a, Tensor) and isinstance(b, Tensor) and a.shape != b.shape:
            big, small = (a, b) if len(a.shape) > len(b.shape) else (b, a)
            if len(small.shape) >= 2 and len(big.shape) == len(small.shape) + 1 and big.shape[1:] == small.shape:
                return c.graph.add(big, small, name=c.name)
        return previous(c)
    return convert


def _softmax(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Softmax over the keys of attention scores (their scale and mask), or over any axis inside
    the network: a softmax_dim op; as the model's output over the classes, the loss as before."""
    def convert(c: OnnxCall) -> Any:
        x = c.inputs[0]
        axis = c.attrs.get_int("axis", -1)
        if isinstance(x, Scores) and c.op_type == "Softmax":
            r = len(x.t.shape)
            if axis % r != r - 1:
                raise c.error(f"Softmax(axis={axis}) of attention scores is not supported (only over the keys, -1)")
            t, merge = split_batch(c.graph, x.t, c.name, c.where)
            # the exporter scales q and k each by sqrt(scale), float32 roundings apart from scale:
            # the scale of the product is 1 / sqrt(Dh) when it is that within float32's precision
            dh = c.graph.ops[t.op]
            default = 1.0 / math.sqrt(c.graph.ops[dh.inputs[0]].shape[-1]) if dh.kind == "matmul" else None
            scale = default if default is not None and abs(x.scale - default) <= 1e-6 * default else x.scale
            return merge(c.graph.softmax_dim(t, -1, scale=scale, causal=x.causal, name=c.name))
        if isinstance(x, View) and c.op_type == "Softmax" and x.shape and x.shape[0] != x.base.shape[0]:
            r = len(x.shape)
            if axis % r == 0:
                raise c.error(f"Softmax(axis={axis}) over the batch is not supported")
            t, merge = split_batch(c.graph, x, c.name, c.where)   # (N, k, ...): one axis more
            return merge(c.graph.softmax_dim(t, axis % r + 1, name=c.name))
        if c.op_type == "Softmax" and isinstance(x, Tensor) and not (c.is_output and axis % len(x.shape)
                                                                      == len(x.shape) - 1):
            return c.graph.softmax_dim(x, axis % len(x.shape), name=c.name)
        if isinstance(x, Tensor) and c.is_output and len(x.shape) == 3 and axis % 3 == 2:
            return c.graph.softmax(x, name=c.name)
        return previous(c)
    return convert


def _gather(c: OnnxCall) -> Tensor:
    """Gather(table, ids) of a float initializer (vocab, D): an embedding of token ids (an
    integer input of the model), or with constant indices 0..vocab-1 the whole table as a
    ``parameter`` op (learned positions)."""
    x, ids = c.inputs[0], c.inputs[1]
    if isinstance(x, (Tensor, View)) and isinstance(ids, Const) and ids.value.dtype.kind in "iu":
        return _take(c, x, ids.value)
    table = c.weight(0, "table", rank=2)
    if c.attrs.get_int("axis", 0) != 0:
        raise c.error(f"Gather(axis={c.attrs['axis']}) of a table is not supported (rows: axis 0)")
    vocab, dim = table.value.shape
    ids = c.inputs[1]
    if isinstance(ids, Const):
        if ids.value.ndim != 1 or not np.array_equal(ids.value, np.arange(vocab)):
            raise c.error(f"Gather of the table {table.source!r} by constant indices other than 0..{vocab - 1} is "
                          f"not supported (the whole table: learned positions)")
        y = c.graph.parameter((int(vocab), int(dim)), name=c.name)
    else:
        if not isinstance(ids, Tensor):
            raise c.error(f"Gather of {table.source!r} by {_show(ids)} is not supported")
        y = c.graph.embedding(ids, int(vocab), int(dim), name=c.name)
    c.set_weights(weight=(table, table.value))
    return y


def _take(c: OnnxCall, x: Any, ids: np.ndarray) -> Any:
    """Gather of a computed tensor (or a view) by constant indices (the dynamo exporter's
    ``as_strided``: a flat view gathered back into a shape): the view they pick, which a
    reader gets as a tensor where it keeps the batch in dimension 0."""
    rank = len(x.shape)
    axis = c.attrs.get_int("axis", 0)
    if not -rank <= axis < rank:
        raise c.error(f"Gather(axis={axis}) is out of range for {_show(x)}")
    n = x.shape[axis % rank]
    if ids.size and (ids.min() < -n or ids.max() >= n):
        raise c.error(f"Gather(axis={axis}) by indices out of range for {_show(x)}")
    return _view(c, x, lambda a: np.take(a, ids.astype(np.int64), axis=axis % rank), "gathering")


def _unsqueeze(c: OnnxCall) -> Any:
    """Unsqueeze of a computed tensor (or a view): a reshape adding the dimensions of size 1,
    a view where one comes before the batch."""
    x = c.inputs[0]
    if not isinstance(x, (Tensor, View)):
        raise c.error(f"Unsqueeze of {_show(x)} is not supported")
    raw = c.attrs.get_ints("axes") if "axes" in c.attrs else c.const_ints(1, "axes")
    if not raw:
        raise c.error("Unsqueeze without axes is not supported")
    r = len(x.shape) + len(raw)
    if any(not -r <= a < r for a in raw) or len({a % r for a in raw}) != len(raw):
        raise c.error(f"axes={raw} are not distinct axes of the rank-{r} result")
    axes = sorted(a % r for a in raw)
    if isinstance(x, Tensor) and axes[0] > 0:
        shape = list(x.shape)
        for a in axes:
            shape.insert(a, 1)
        return c.graph.reshape(x, tuple(shape), name=c.name)
    return _view(c, x, lambda a: np.expand_dims(a, tuple(axes)), "unsqueezing")


def _norm(c: OnnxCall, rms: bool) -> Tensor:
    """LayerNormalization (or RMSNormalization, ``rms``) over the axes from ``axis`` on: over the
    last one the op itself, over several a reshape, the op and a reshape back
    (:func:`~shardwise.importers.common.normalize_trailing`).  The scale and bias are copied for
    this op (shared_ok): exporters merge equal initializers, such as every fresh norm's scale
    of ones, into one read by several nodes."""
    x = c.tensor(0)
    kind = "RMSNormalization" if rms else "LayerNormalization"
    r = len(x.shape)
    axis = c.attrs.get_int("axis", -1)
    if not -r <= axis < r or axis % r == 0:
        raise c.error(f"{kind}(axis={axis}) of an input {x.shape} is not supported (axes after the batch's)")
    dims = r - axis % r
    want = tuple(x.shape[-dims:])
    scale = c.weight(1, "scale")
    weights = [("scale", scale)]
    if not rms:
        if len(c.inputs) < 3 or c.inputs[2] is None:
            raise c.error("LayerNormalization without a bias is not supported")
        weights.append(("bias", c.weight(2, "bias")))
    for what, w in weights:
        if w.value.shape != want:
            raise c.error(f"its {what} has shape {tuple(w.value.shape)}, not {want} for the input {x.shape}")
    # epsilon is a float32 attribute: 1e-5 arrives as 9.99999974e-06; its shortest float32
    # spelling gives back the model's value (the graph from_torch builds)
    eps = float(str(np.float32(c.attrs.get_float("epsilon", 1e-5))))
    y = normalize_trailing(c, x, dims, eps, rms=rms)
    params = {"weight" if what == "scale" else what: (w, w.value.reshape(-1).copy()) for what, w in weights}
    c.set_weights(shared_ok=True, **params)
    return y


def _layer_norm(c: OnnxCall) -> Tensor:
    return _norm(c, rms=False)


def _rms_norm(c: OnnxCall) -> Tensor:
    return _norm(c, rms=True)


def register() -> None:
    """Add the sequence ops to :data:`~shardwise.importers.onnx.ops.ONNX_OPS` (wrapping the
    converters of MatMul, Mul, Add, Reshape and Softmax, which keep their other uses)."""
    if "Gather" in ONNX_OPS:
        return
    ONNX_OPS.update({
        "Gather": _gather,
        "LayerNormalization": _layer_norm,
        "Transpose": _transpose,
        "Reshape": _reshape(ONNX_OPS["Reshape"]),
        "Mul": _mul(ONNX_OPS["Mul"]),
        "MatMul": _matmul(ONNX_OPS["MatMul"]),
        "Add": _add(ONNX_OPS["Add"]),
        "Softmax": _softmax(ONNX_OPS["Softmax"]),
        "LogSoftmax": _softmax(ONNX_OPS["LogSoftmax"]),
        "RMSNormalization": _rms_norm,
        "Unsqueeze": _unsqueeze,
    })
    ONNX_OPS["Einsum"] = _einsum(ONNX_OPS["MatMul"])


register()
