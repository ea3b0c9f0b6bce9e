"""A GPT-2 style decoder (pre-norm transformer blocks, learned positions, causal attention).

    g = sw.models.gpt(layers=12, d_model=768, heads=12, seq=1024, vocab=50257, batch=8)  # GPT-2 small
    g = sw.models.gpt_tiny(batch=4)       # 2 layers, d_model 32, 4 heads, seq 8, vocab 64: trains on CPU

Shapes for batch N, sequence T, width D, H heads of Dh = D / H:

    ids (N, T) int64  -> wte: embedding (N, T, D) + wpe: parameter (T, D), broadcast over N
    per layer l, with p = "h.<l>":
        a = p.ln_1(x); q, k, v = p.attn.q(a), p.attn.k(a), p.attn.v(a)        linear (N, T, D) each
        q -> reshape (N, T, H, Dh) -> transpose (N, H, T, Dh)   (k, v alike)
        o = p.attn: matmul(q, k^T) (N, H, T, T), softmax_dim(scale 1/sqrt(Dh), causal), matmul(., v)
        x = x + p.attn.proj(o -> transpose (N, T, H, Dh) -> reshape (N, T, D))
        x = x + p.mlp.proj(gelu(p.mlp.fc(p.ln_2(x))))                           fc: (N, T, 4D)
    logits = lm_head(ln_f(x)) (N, T, vocab), no bias; the loss: softmax + cross-entropy over
    (N, T) next-token labels, the mean over all N*T of them.

Differences from OpenAI's GPT-2: q, k and v are three linears (GPT-2 packs them in one
``c_attn`` of width 3D: split its weight in three to load it); GELU is the exact
erf form (``torch.nn.GELU()``), not the tanh approximation; dropout is left out; and the
output projection ``lm_head`` has its own weight: **tied embeddings are not supported**
(one weight read by two ops would need a shared parameter that an op's weight slot
cannot name yet), so copy ``wte.weight`` into ``lm_head.weight`` to start from tied
weights.  Parameter names equal a torch module with the same attribute names
(``wte``, ``wpe``, ``h[l].ln_1``, ``h[l].attn.q`` ..., ``ln_f``, ``lm_head``), so
``Trainer.set_weights(model.state_dict())`` loads such a model directly.
"""
from __future__ import annotations

import functools
import math

from shardwise.errors import ShapeError
from shardwise.graph import Graph, Tensor
from shardwise.models._common import positive_int


def _positive(value: object, what: str) -> int:
    return positive_int("gpt", value, what)


def _heads(g: Graph, t: Tensor, heads: int, name: str) -> Tensor:
    """(N, T, D) -> (N, H, T, Dh)."""
    n, s, d = t.shape
    return g.transpose(g.reshape(t, (n, s, heads, d // heads), name=f"{name}.split"), 1, 2, name=f"{name}.heads")


def block(g: Graph, x: Tensor, heads: int, prefix: str) -> Tensor:
    """One pre-norm transformer block on x (N, T, D): attention then the MLP, each residual."""
    n, s, d = x.shape
    a = g.layer_norm(x, name=f"{prefix}.ln_1")
    q, k, v = (_heads(g, g.linear(a, d, name=f"{prefix}.attn.{w}"), heads, f"{prefix}.attn.{w}") for w in "qkv")
    o = g.attention(q, k, v, causal=True, scale=1.0 / math.sqrt(d // heads), name=f"{prefix}.attn")
    o = g.reshape(g.transpose(o, 1, 2, name=f"{prefix}.attn.merge"), (n, s, d), name=f"{prefix}.attn.concat")
    x = g.add(x, g.linear(o, d, name=f"{prefix}.attn.proj"), name=f"{prefix}.attn.residual")
    m = g.linear(g.layer_norm(x, name=f"{prefix}.ln_2"), 4 * d, name=f"{prefix}.mlp.fc")
    m = g.linear(g.gelu(m, name=f"{prefix}.mlp.gelu"), d, name=f"{prefix}.mlp.proj")
    return g.add(x, m, name=f"{prefix}.mlp.residual")


def gpt(layers: int = 12, d_model: int = 768, heads: int = 12, seq: int = 1024, vocab: int = 50257,
        batch: int = 8, name: str = "gpt") -> Graph:
    """A GPT-2 style language model as a graph (see the module docstring); the defaults are
    GPT-2 small (124M parameters with tied embeddings; 163M here, lm_head having its own)."""
    layers, d_model, heads = _positive(layers, "layers"), _positive(d_model, "d_model"), _positive(heads, "heads")
    seq, vocab, batch = _positive(seq, "seq"), _positive(vocab, "vocab"), _positive(batch, "batch")
    if d_model % heads:
        raise ShapeError(f"gpt: d_model {d_model} is not a multiple of heads {heads}")
    g = Graph(name)
    ids = g.input("ids", (batch, seq), dtype="int64")
    x = g.add(g.embedding(ids, vocab, d_model, name="wte"), g.parameter((seq, d_model), name="wpe"), name="embed")
    for layer in range(layers):
        x = block(g, x, heads, f"h.{layer}")
    logits = g.linear(g.layer_norm(x, name="ln_f"), vocab, bias=False, name="lm_head")
    g.softmax(logits, name="loss")
    g.layouts["megatron"] = functools.partial(megatron_dp_spec, g)
    return g


def megatron_spec(g: Graph, k: int) -> dict[str, dict[str, int]]:
    """Megatron-LM's tensor-parallel layout of a :func:`gpt` graph over ``k`` devices, as a
    spec for ``Plan.from_dict(g, devices, spec, options=CostOptions(reduction_splits=True))``:
    q, k, v and ``mlp.fc`` (and GELU) split by output columns (``l``), the attention ops by
    heads, ``attn.proj`` and ``mlp.proj`` by rows (the split reduction ``i``: partial outputs
    summed), the token embedding by vocabulary rows (``v``), ``lm_head`` and the loss by
    vocabulary columns.  Megatron-LM replicates layer norms and residual adds on every device
    of the group; a plan partitions every op, so those are split by samples (``n``) here, which
    needs the batch to be a multiple of ``k``."""
    return megatron_dp_spec(g, k, 1)


def megatron_dp_spec(g: Graph, tp: int, dp: int) -> dict[str, dict[str, int]]:
    """Megatron-LM's tensor parallelism over groups of ``tp`` devices (:func:`megatron_spec`'s
    layout in each group) with data parallelism over ``dp`` such groups: every op is also split
    ``n=dp`` by samples, so each group trains on its own slice of the batch, and ops Megatron
    replicates in a group (layer norms, residual adds) are split ``n=dp*tp``.

    Workers are numbered row-major over an op's split dimensions, the sample dimension ``n``
    (the first) slowest and a split reduction fastest, so the ``tp`` workers of one group are
    consecutive: devices ``[j*tp, (j+1)*tp)`` for group j.  On ``DeviceGraph.cluster(nodes,
    tp)`` each group is one node (tensor parallelism over NVLink / NVSwitch, data parallelism
    across nodes).  The batch must be a multiple of ``dp * tp``."""
    tp, dp = _positive(tp, "tp"), _positive(dp, "dp")

    def split(**degrees: int) -> dict[str, int]:
        return {dim: degree for dim, degree in degrees.items() if degree > 1}

    spec: dict[str, dict[str, int]] = {}
    for op in g.ops:
        name = op.name
        if name.endswith((".attn.q", ".attn.k", ".attn.v", ".mlp.fc", ".mlp.gelu", ".attn.concat")):
            spec[name] = split(n=dp, l=tp)            # (N, T, features): the feature columns
        elif name.endswith((".split", ".attn.merge")):
            spec[name] = split(n=dp, h=tp)            # (N, T, H, Dh): the heads
        elif name.endswith((".heads", ".attn.scores", ".attn.probs")) or op.kind == "matmul":
            spec[name] = split(n=dp, c=tp)            # (N, H, T, *): the heads
        elif name.endswith((".attn.proj", ".mlp.proj")):
            spec[name] = split(n=dp, i=tp)            # rows: partial sums added on the owner
        elif name == "wte":
            spec[name] = split(n=dp, v=tp)            # vocabulary-parallel embedding
        elif name in ("lm_head", "loss"):
            spec[name] = split(n=dp, l=tp)            # vocabulary columns of the logits
        elif op.kind == "parameter":
            spec[name] = split(n=math.gcd(op.shape[0], dp * tp))   # wpe (T, D): by positions, as they divide
        else:
            spec[name] = split(n=dp * tp)             # layer norms, residual adds: by samples
    return spec


def gpt_tiny(batch: int = 4, layers: int = 2, d_model: int = 32, heads: int = 4, seq: int = 8,
             vocab: int = 64) -> Graph:
    """A GPT small enough to train on CPU workers in tests: 2 layers, d_model 32, 4 heads,
    sequences of 8 tokens over a vocabulary of 64."""
    return gpt(layers=layers, d_model=d_model, heads=heads, seq=seq, vocab=vocab, batch=batch, name="gpt_tiny")
