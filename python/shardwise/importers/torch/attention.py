"""``torch.nn.MultiheadAttention`` imported by :func:`shardwise.from_torch` as a composition of
graph ops the planner sees one by one (no fused attention op): self-attention ``mha(x, x, x)``
with the packed in-projection, as torchvision's Vision Transformer calls it.

For an (N, T, E) input (``batch_first=True``; with ``batch_first=False`` the (T, N, E) input
and the output are permuted to and from that layout) with H heads of Dh = E / H, module path p:

    p.in_proj            linear (N, T, E) -> (N, T, 3E)   weight in_proj_weight (3E, E), bias in_proj_bias
    p.q, p.k, p.v        slice of the last dimension: rows [0, E), [E, 2E), [2E, 3E) of in_proj_weight
    p.<q|k|v>.heads      reshape (N, T, H, Dh), then permute p.<q|k|v>.heads_first to (N, H, T, Dh)
    p.attn               g.attention(q, k, v, causal=False): matmul, softmax_dim (scale 1/sqrt(Dh)),
                         [dropout of the probabilities when the module has dropout > 0], matmul
    p.merge              permute back to (N, T, H, Dh) (p.merge.tokens_first), reshape to (N, T, E)
    p.out_proj           linear (N, T, E) -> (N, T, E), weight out_proj.weight, bias out_proj.bias

One linear op produces q, k and v, so its weight is PyTorch's packed ``in_proj_weight`` itself
and its gradient is PyTorch's exactly (SGD and AdamW update the same tensor).  The linear's
parameter keys ``p.in_proj.weight`` / ``p.in_proj.bias`` are recorded in ``Graph.weight_names``
as ``p.in_proj_weight`` / ``p.in_proj_bias``, so the imported weights, ``Trainer.get_weights``
and ``Trainer.set_weights`` use the module's ``state_dict`` names.

PyTorch scales q by 1/sqrt(Dh) before q k^T; the composition scales the scores inside the
softmax: equal up to rounding.  The call returns (output, the attention weights); the weights
(``need_weights=True``) are not computed, and a model reading them is refused.
"""
from __future__ import annotations

from shardwise.errors import ShapeError
from shardwise.graph import Tensor
from shardwise.importers.torch.call import Call, TorchOp, record_weights


class AttentionWeights:
    """The second output of an imported nn.MultiheadAttention call, which the import does not
    compute: a model that only unpacks it (``x, _ = mha(x, x, x)``) imports, one that reads it
    is refused with this value's description."""

    def __init__(self, where: str) -> None:
        self.where = where

    def __repr__(self) -> str:
        return f"<the attention weights returned by {self.where}, which from_torch does not compute>"


def _refusal(c: Call) -> str | None:
    """Why this call of nn.MultiheadAttention cannot be imported, or None."""
    m, a = c.module, c.attrs
    if not m._qkv_same_embed_dim:
        return (f"kdim={m.kdim}, vdim={m.vdim} differ from embed_dim={m.embed_dim} (separate q_proj_weight, "
                f"k_proj_weight, v_proj_weight) is not supported; only the packed in_proj_weight")
    if m.bias_k is not None:
        return "add_bias_kv=True is not supported"
    if m.add_zero_attn:
        return "add_zero_attn=True is not supported"
    for key in ("attn_mask", "key_padding_mask"):
        if a[key] is not None:
            return f"{key} is not supported (attention without masks only)"
    if a["is_causal"]:
        return "is_causal=True is not supported (attention without masks only)"
    q, k, v = c.inputs
    if not (q is k and k is v):
        return ("query, key and value are different tensors; only self-attention, mha(x, x, x), is supported "
                "(one packed in-projection of one tensor)")
    return None


def _multihead_attention(c: Call) -> tuple[Tensor, AttentionWeights]:
    m, g, p = c.module, c.graph, c.name
    why = _refusal(c)
    if why is not None:
        raise c.error(why)
    x = c.tensor(0, rank=3)
    e, heads, dh = int(m.embed_dim), int(m.num_heads), int(m.head_dim)
    if x.shape[-1] != e:
        raise ShapeError(f"{c.where}: embed_dim={e} but the input has shape {x.shape}")
    if not m.batch_first:   # (T, N, E) -> (N, T, E): the tokens in dimension 1, as the composition reads them
        x = g.permute(x, (1, 0, 2), name=f"{p}.batch_first")
    n, t = x.shape[0], x.shape[1]
    has_bias = m.in_proj_bias is not None
    qkv = g.linear(x, 3 * e, bias=has_bias, name=f"{p}.in_proj")                      # (N, T, 3E)
    record_weights(c.weights, f"{p}.in_proj",
                   {"weight": m.in_proj_weight, **({"bias": m.in_proj_bias} if has_bias else {})}, c.where)
    g.weight_names[f"{p}.in_proj.weight"] = f"{p}.in_proj_weight"
    if has_bias:
        g.weight_names[f"{p}.in_proj.bias"] = f"{p}.in_proj_bias"
    qkv_heads = []
    for k, w in enumerate("qkv"):
        part = g.slice(qkv, 2, k * e, (k + 1) * e, name=f"{p}.{w}")                    # (N, T, E)
        part = g.reshape(part, (n, t, heads, dh), name=f"{p}.{w}.heads")               # (N, T, H, Dh)
        qkv_heads.append(g.permute(part, (0, 2, 1, 3), name=f"{p}.{w}.heads_first"))   # (N, H, T, Dh)
    o = g.attention(*qkv_heads, causal=False, name=f"{p}.attn", dropout=float(m.dropout))   # (N, H, T, Dh)
    o = g.permute(o, (0, 2, 1, 3), name=f"{p}.merge.tokens_first")                     # (N, T, H, Dh)
    o = g.reshape(o, (n, t, e), name=f"{p}.merge")                                     # (N, T, E)
    out = m.out_proj
    y = g.linear(o, e, bias=out.bias is not None, name=f"{p}.out_proj")
    record_weights(c.weights, f"{p}.out_proj",
                   {"weight": out.weight, **({"bias": out.bias} if out.bias is not None else {})}, c.where)
    if not m.batch_first:
        y = g.permute(y, (1, 0, 2), name=f"{p}.seq_first")                             # (T, N, E)
    return y, AttentionWeights(c.where)


TORCH_ATTENTION_OPS: tuple[TorchOp, ...] = (
    TorchOp("multihead_attention", _multihead_attention, inputs=3, modules=("MultiheadAttention",),
            call_params=(("key_padding_mask", None), ("need_weights", True), ("attn_mask", None),
                         ("average_attn_weights", True), ("is_causal", False)),
            op="`linear`, `slice`, `reshape`, `permute`, attention (`matmul`, `softmax_dim`, `matmul`), `linear`",
            doc="self-attention `mha(x, x, x)` (query, key and value one tensor), either `batch_first`, packed "
                "`in_proj_weight` (kdim = vdim = embed_dim), with or without biases; no `attn_mask`, "
                "`key_padding_mask`, `is_causal`, `add_bias_kv`, `add_zero_attn`; `dropout` drops the attention "
                "probabilities (shardwise's masks); `need_weights` either, the output only (below)"),
)
"""nn.MultiheadAttention, part of :data:`~shardwise.importers.torch.ops.TORCH_OPS`."""
