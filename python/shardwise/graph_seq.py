"""Graph builders of sequence models (transformers), mixed into :class:`~shardwise.graph.Graph`.

    g = sw.Graph("block")
    ids = g.input("ids", (8, 128), dtype="int64")             # token ids (N, T)
    x = g.embedding(ids, vocab=1000, dim=256, name="wte")      # (N, T, D)
    h = g.layer_norm(x, name="ln_1")
    q = g.transpose(g.reshape(g.linear(h, 256, name="q"), (8, 128, 4, 64)), 1, 2)   # (N, H, T, Dh)
    o = g.attention(q, k, v, causal=True, name="attn")          # (N, H, T, Dh)

Each builder validates its inputs, derives the op's description
(:mod:`shardwise.ops.seq`) and adds the op; names and arguments follow PyTorch's
(``torch.nn.LayerNorm``, ``torch.nn.Embedding``, ``torch.softmax``, ``Tensor.reshape``,
``Tensor.permute``, ``Tensor.transpose``) so that importers can map them one to one.
"""
from __future__ import annotations

import math
import numbers
from typing import TYPE_CHECKING, Any, Sequence

from shardwise.ops import seq as ops_seq
from shardwise.errors import GraphError, ShapeError
from shardwise.shapes import check_shape

if TYPE_CHECKING:
    from shardwise.graph import Op, Tensor
    from shardwise.ops.desc import OpDesc

# What an input op may hold: float32 data, or integer token ids (carried as exact float32s).
INPUT_DTYPES = ("float32", "int64")
LAYER_NORM_EPS = 1e-5          # torch.nn.LayerNorm's default
RMS_NORM_EPS = 1.1920928955078125e-07   # torch.nn.RMSNorm's eps=None: torch.finfo(float32).eps
_FLOAT32_MAX = 3.4028234663852886e38


def _positive_float(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) \
            or not 0 < value <= _FLOAT32_MAX:
        raise GraphError(f"{what} must be a positive finite float32, got {value!r}")
    return float(value)


def _int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise ShapeError(f"{what} must be an int, got {value!r}")
    return int(value)


class SequenceBuilders:
    """The builders of layer norm, embedding, softmax over a dimension, reshape, permute,
    transpose, select and attention (a composition of matmul, softmax_dim and matmul)."""

    ops: list["Op"]

    # provided by Graph
    def _tensor(self, t: Any, what: str = "input") -> "Tensor":  # pragma: no cover - Graph's
        raise NotImplementedError

    def _add(self, op_kind: str, inputs: Sequence["Tensor"], desc: "OpDesc", name: str | None,
             **attrs: Any) -> "Tensor":  # pragma: no cover - Graph's
        raise NotImplementedError

    def layer_norm(self, x: "Tensor", eps: float = LAYER_NORM_EPS, name: str | None = None) -> "Tensor":
        """Layer normalization over the last dimension with weight (D) and bias (D)
        (``torch.nn.LayerNorm(D, eps)``), any leading dimensions: (N, D), (N, T, D)."""
        x = self._tensor(x)
        eps = _positive_float(eps, "layer_norm eps")
        return self._add("layer_norm", [x], ops_seq.layer_norm(x.shape), name, eps=eps)

    def rms_norm(self, x: "Tensor", eps: float = RMS_NORM_EPS, name: str | None = None) -> "Tensor":
        """RMS normalization over the last dimension with a weight (D) and no bias
        (``torch.nn.RMSNorm(D, eps)``): x / sqrt(mean(x^2) + eps) * w, any leading dimensions.
        ``eps`` defaults to float32's machine epsilon, as PyTorch's ``eps=None``."""
        x = self._tensor(x)
        eps = _positive_float(eps, "rms_norm eps")
        return self._add("rms_norm", [x], ops_seq.rms_norm(x.shape), name, eps=eps)

    def rotary(self, x: "Tensor", base: float = 10000.0, name: str | None = None) -> "Tensor":
        """Rotary position embedding (RoPE, "RoFormer: Enhanced Transformer with Rotary Position
        Embedding") of queries or keys (N, H, T, Dh), in the rotate-half layout of Llama:
        ``x * cos(t f) + rotate_half(x) * sin(t f)`` with t the position (dimension -2, from 0),
        f_j = base^(-2 (j mod Dh/2) / Dh) and rotate_half(x) = (-x2, x1) of the halves of Dh.
        No weights; the tables are computed by the kernels (in double)."""
        x = self._tensor(x)
        if isinstance(base, bool) or not isinstance(base, numbers.Real) or not (math.isfinite(base) and base > 1):
            raise GraphError(f"rotary base must be a finite number > 1, got {base!r}")
        return self._add("rotary", [x], ops_seq.rotary(x.shape), name, base=float(base))

    def embedding(self, ids: "Tensor", vocab: int | None = None, dim: int | None = None, name: str | None = None,
                  table: "Tensor | None" = None) -> "Tensor":
        """Token embedding (``torch.nn.Embedding(vocab, dim)``): integer ids (N, T) -> (N, T, dim),
        weight (vocab, dim).  ``ids`` must be an input op built with ``dtype="int64"``: the
        runtime checks every id against the vocabulary before a step, and no gradient flows
        into ids.  Its weight gradient is a scatter-add in row order (deterministic).

        ``table``: the (vocab, dim) table read as a data input instead of a weight of the op's
        own, the output of a :meth:`parameter` op that other ops read too (tied embeddings: a
        language model's output layer ``matmul(h, table, transpose_b=True)``).  The table's
        gradient then flows to the parameter op, which sums it with its other readers'.
        ``vocab`` and ``dim`` default to the table's shape."""
        ids = self._tensor(ids, "embedding ids")
        if table is not None:
            table = self._tensor(table, "embedding table")
            if len(table.shape) != 2:
                raise ShapeError(f"embedding table must be (vocab, dim), got shape {table.shape}")
            vocab = table.shape[0] if vocab is None else vocab
            dim = table.shape[1] if dim is None else dim
            if (vocab, dim) != table.shape:
                raise ShapeError(f"embedding table of shape {table.shape} for vocab {vocab}, dim {dim}")
        elif vocab is None or dim is None:
            raise GraphError("embedding needs vocab and dim (or a table)")
        src = self.ops[ids.op]
        if src.kind != "input" or src.attrs.get("dtype") != "int64":
            raise GraphError(f"embedding ids must be an input op built with dtype='int64', got {src.kind} "
                             f"{src.name!r}")
        vocab, dim = _int(vocab, "embedding vocab"), _int(dim, "embedding dim")
        if vocab > 2**24:
            raise ShapeError(f"embedding vocab {vocab:,} is more than the 2**24 ids the runtime carries exactly")
        if table is not None:
            return self._add("embedding", [ids, table], ops_seq.embedding(ids.shape, vocab, dim, table_input=True),
                             name, vocab=vocab, dim=dim)
        return self._add("embedding", [ids], ops_seq.embedding(ids.shape, vocab, dim), name,
                         vocab=vocab, dim=dim)

    def softmax_dim(self, x: "Tensor", dim: int = -1, scale: float = 1.0, causal: bool = False,
                    name: str | None = None) -> "Tensor":
        """Softmax of ``scale * x`` over dimension ``dim`` (``torch.softmax(scale * x, dim)``), an
        op inside a network (the loss is :meth:`softmax`).  ``causal=True`` masks attention
        scores (.., T_q, T_k) as ``torch.nn.functional.scaled_dot_product_attention(...,
        is_causal=True)``: key j > query i gets probability 0 (needs ``dim=-1``)."""
        x = self._tensor(x)
        if not isinstance(causal, bool):
            raise GraphError(f"softmax_dim causal must be True or False, got {causal!r}")
        scale = _positive_float(scale, "softmax_dim scale")
        desc = ops_seq.softmax_dim(x.shape, dim, causal)
        return self._add("softmax_dim", [x], desc, name, dim=dim % len(x.shape), scale=scale, causal=causal)

    def reshape(self, x: "Tensor", shape: Sequence[int], name: str | None = None) -> "Tensor":
        """``x.reshape(shape)`` in row-major order; one entry may be -1.  Each group of
        dimensions must split one dimension ((N, T, D) -> (N, T, H, Dh)) or merge several into
        one ((N, T, H, Dh) -> (N, T, D)), so that splits of the result keep to contiguous
        blocks of x."""
        x = self._tensor(x)
        try:
            dims = [_int(d, "reshape size") for d in shape]
        except TypeError:
            raise ShapeError(f"reshape shape must be a sequence of ints, got {shape!r}") from None
        if dims.count(-1) > 1:
            raise ShapeError(f"reshape: at most one size may be -1, got {tuple(dims)}")
        if -1 in dims:
            known = math.prod(d for d in dims if d != -1)
            total = math.prod(x.shape)
            if known <= 0 or total % known:
                raise ShapeError(f"reshape: cannot reshape {x.shape} to {tuple(dims)}")
            dims[dims.index(-1)] = total // known
        out = check_shape(dims, "reshape shape")
        return self._add("reshape", [x], ops_seq.reshape(x.shape, out), name, shape=out)

    def permute(self, x: "Tensor", dims: Sequence[int], name: str | None = None) -> "Tensor":
        """``x.permute(dims)``: output dimension i is x's dimension ``dims[i]`` (negative
        indices count from the end)."""
        x = self._tensor(x)
        r = len(x.shape)
        try:
            given = [_int(d, "permute dim") for d in dims]
        except TypeError:
            raise ShapeError(f"permute dims must be a sequence of ints, got {dims!r}") from None
        if any(not -r <= d < r for d in given):
            raise ShapeError(f"permute: dims {tuple(given)} out of range for rank {r}")
        perm = tuple(d % r for d in given)
        return self._add("permute", [x], ops_seq.permute(x.shape, perm), name, dims=perm)

    def transpose(self, x: "Tensor", dim0: int, dim1: int, name: str | None = None) -> "Tensor":
        """``x.transpose(dim0, dim1)``: a :meth:`permute` swapping two dimensions."""
        x = self._tensor(x)
        r = len(x.shape)
        a, b = _int(dim0, "transpose dim0"), _int(dim1, "transpose dim1")
        if not (-r <= a < r and -r <= b < r):
            raise ShapeError(f"transpose: dims ({dim0}, {dim1}) out of range for rank {r}")
        perm = list(range(r))
        perm[a % r], perm[b % r] = perm[b % r], perm[a % r]
        return self.permute(x, perm, name=name)

    def select(self, x: "Tensor", dim: int, index: int, name: str | None = None) -> "Tensor":
        """``x.select(dim, index)``: x without dimension ``dim`` (not the batch), at ``index``
        (``x[:, t]`` of an (N, T, E) sequence is ``select(x, 1, t)``, an (N, E) step)."""
        x = self._tensor(x)
        dim, index = _int(dim, "select dim"), _int(index, "select index")
        desc = ops_seq.select(x.shape, dim, index)
        return self._add("select", [x], desc, name, dim=dim % len(x.shape), index=index)

    def attention(self, q: "Tensor", k: "Tensor", v: "Tensor", causal: bool = True, scale: float | None = None,
                  name: str | None = None, dropout: float = 0.0) -> "Tensor":
        """Scaled dot-product attention over (N, H, T, Dh) queries, keys and values
        (``torch.nn.functional.scaled_dot_product_attention``), as a composition the planner
        sees op by op:

            scores = matmul(q, k, transpose_b=True)                 "<name>.scores"  (N, H, T, T)
            probs  = softmax_dim(scores, -1, scale, causal)         "<name>.probs"
            probs  = dropout(probs, dropout)                        "<name>.dropout" (when dropout > 0)
            out    = matmul(probs, v)                               "<name>"         (N, H, T, Dh)

        ``scale`` defaults to 1 / sqrt(Dh).  ``dropout`` drops attention probabilities in
        training (``nn.MultiheadAttention(dropout=p)``, ``dropout_p``), the identity in eval
        mode.  Splits of N, H and the query rows T propagate through all of them (Megatron-LM's
        head split is a split of H)."""
        q, k, v = self._tensor(q, "attention q"), self._tensor(k, "attention k"), self._tensor(v, "attention v")
        if len(q.shape) < 2 or q.shape != k.shape or k.shape[:-1] != v.shape[:-1]:
            raise ShapeError(f"attention expects q and k of one shape (.., T, Dh) and v (.., T, Dv), got "
                             f"{q.shape}, {k.shape}, {v.shape}")
        scale = 1.0 / math.sqrt(q.shape[-1]) if scale is None else scale
        scores = self.matmul(q, k, transpose_b=True,  # type: ignore[attr-defined]
                             name=f"{name}.scores" if name else None)
        probs = self.softmax_dim(scores, -1, scale, causal, name=f"{name}.probs" if name else None)
        if dropout:
            probs = self.dropout(probs, dropout, name=f"{name}.dropout" if name else None)  # type: ignore[attr-defined]
        return self.matmul(probs, v, name=name)  # type: ignore[attr-defined]
