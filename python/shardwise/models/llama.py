"""A Llama style decoder (RMS norms, rotary positions, grouped-query attention, SwiGLU MLP).

    g = sw.models.llama()                  # Llama-2-7B's sizes with 8 key/value heads, batch 512 x 4096 tokens
    g = sw.models.llama(kv_heads=32, batch=1)                   # Llama-2-7B itself: 6,738,415,616 parameters
    g = sw.models.llama_tiny(batch=4)      # 2 layers, d_model 32, 4 heads, 2 kv heads, seq 8, vocab 64: trains on CPU

Shapes for batch N, sequence T, width D, H query heads and G key/value heads of Dh = D / H, F the
MLP width; per layer l, with p = "model.layers.<l>":

    ids (N, T) int64 -> model.embed_tokens: embedding (N, T, D)
    a = p.input_layernorm(x)                                            rms_norm (N, T, D)
    q = p.self_attn.q_proj(a) (N, T, H Dh) -> reshape (N, T, H, Dh) -> permute (N, H, T, Dh) -> rotary
    k = p.self_attn.k_proj(a) (N, T, G Dh) -> reshape (N, T, G, Dh) -> permute (N, G, T, Dh) -> rotary
    v = p.self_attn.v_proj(a) (N, T, G Dh) -> reshape, permute (N, G, T, Dh)
    k, v repeated to H heads (where G < H): reshape (N, G, 1, T, Dh) -> expand (N, G, H/G, T, Dh)
        -> reshape (N, H, T, Dh), so query head h reads key/value head h // (H/G)
    o = causal attention(q, k, v), scale Dh^-0.5                        (N, H, T, Dh)
    x = x + p.self_attn.o_proj(o -> permute (N, T, H, Dh) -> reshape (N, T, D))
    m = p.post_attention_layernorm(x)
    x = x + p.mlp.down_proj(silu(p.mlp.gate_proj(m)) * p.mlp.up_proj(m))           gate, up: (N, T, F)
    logits = lm_head(model.norm(x)) (N, T, vocab); the loss: softmax + cross-entropy over (N, T)
    next-token labels, the mean over all N*T of them.

The ops and their order are those ``sw.from_torch`` builds from Hugging Face's ``LlamaForCausalLM``
(through torch.export), and the parameter names are its ``state_dict`` keys
(``model.embed_tokens.weight``, ``model.layers.<l>.self_attn.q_proj.weight``, ...,
``model.norm.weight``, ``lm_head.weight``), so ``Trainer.set_weights`` loads such a model's
weights directly.  No linear has a bias (Llama's ``attention_bias=False``, ``mlp_bias=False``).
Not supported: tied embeddings (``lm_head`` has its own weight, Llama-2's layout), rotary
scaling variants, dropout.
"""
from __future__ import annotations

import functools

from shardwise.errors import ShapeError
from shardwise.graph import Graph, Tensor
from shardwise.models._common import positive_int


def llama_ffn(d_model: int) -> int:
    """Llama's default MLP width: 8/3 of d_model rounded up to a multiple of 256 (11008 for 4096)."""
    return 256 * -(-int(8 * d_model / 3) // 256)


def _heads(g: Graph, t: Tensor, heads: int, name: str) -> Tensor:
    """(N, T, heads * Dh) -> (N, heads, T, Dh)."""
    n, s, width = t.shape
    split = g.reshape(t, (n, s, heads, width // heads), name=f"{name}.split")
    return g.permute(split, (0, 2, 1, 3), name=f"{name}.heads")


def _repeat_kv(g: Graph, t: Tensor, groups: int, name: str) -> Tensor:
    """(N, G, T, Dh) -> (N, G * groups, T, Dh), each key/value head read by ``groups`` query heads
    in a row (Hugging Face's ``repeat_kv``); the identity for ``groups == 1``."""
    if groups == 1:
        return t
    n, kv, s, dh = t.shape
    t = g.reshape(t, (n, kv, 1, s, dh), name=f"{name}.unsqueeze")
    t = g.expand(t, (n, kv, groups, s, dh), name=f"{name}.expand")
    return g.reshape(t, (n, kv * groups, s, dh), name=f"{name}.repeat")


def decoder_layer(g: Graph, x: Tensor, heads: int, kv_heads: int, ffn: int, rope_base: float, eps: float,
                  prefix: str) -> Tensor:
    """One Llama decoder layer on x (N, T, D): grouped-query self-attention then the SwiGLU MLP,
    each pre-normed and residual."""
    n, s, d = x.shape
    dh = d // heads
    attn = f"{prefix}.self_attn"
    a = g.rms_norm(x, eps=eps, name=f"{prefix}.input_layernorm")
    q = _heads(g, g.linear(a, heads * dh, bias=False, name=f"{attn}.q_proj"), heads, f"{attn}.q_proj")
    k = _heads(g, g.linear(a, kv_heads * dh, bias=False, name=f"{attn}.k_proj"), kv_heads, f"{attn}.k_proj")
    v = _heads(g, g.linear(a, kv_heads * dh, bias=False, name=f"{attn}.v_proj"), kv_heads, f"{attn}.v_proj")
    q = g.rotary(q, base=rope_base, name=f"{attn}.q_rotary")
    k = g.rotary(k, base=rope_base, name=f"{attn}.k_rotary")
    k = _repeat_kv(g, k, heads // kv_heads, f"{attn}.k")
    v = _repeat_kv(g, v, heads // kv_heads, f"{attn}.v")
    # Dh ** -0.5, as Hugging Face computes it (for Dh = 8, one ulp above 1 / sqrt(8) in double)
    o = g.attention(q, k, v, causal=True, scale=dh ** -0.5, name=f"{attn}.attention")
    o = g.reshape(g.permute(o, (0, 2, 1, 3), name=f"{attn}.merge"), (n, s, d), name=f"{attn}.concat")
    x = g.add(x, g.linear(o, d, bias=False, name=f"{attn}.o_proj"), name=f"{prefix}.attn_residual")
    m = g.rms_norm(x, eps=eps, name=f"{prefix}.post_attention_layernorm")
    gate = g.silu(g.linear(m, ffn, bias=False, name=f"{prefix}.mlp.gate_proj"), name=f"{prefix}.mlp.silu")
    up = g.linear(m, ffn, bias=False, name=f"{prefix}.mlp.up_proj")
    down = g.linear(g.mul(gate, up, name=f"{prefix}.mlp.gated"), d, bias=False, name=f"{prefix}.mlp.down_proj")
    return g.add(x, down, name=f"{prefix}.mlp_residual")


def llama(layers: int = 32, d_model: int = 4096, heads: int = 32, kv_heads: int = 8, seq: int = 4096,
          vocab: int = 32000, batch: int = 512, ffn: int | None = None, rope_base: float = 10000.0,
          eps: float = 1e-5, name: str = "llama") -> Graph:
    """A Llama style language model as a graph (see the module docstring).  ``ffn`` defaults to
    :func:`llama_ffn` of ``d_model``; ``rope_base`` is Hugging Face's ``rope_theta`` and ``eps``
    its ``rms_norm_eps``.  The defaults are Llama-2-7B's sizes with grouped-query attention over 8
    key/value heads (``kv_heads=heads`` is Llama-2-7B's multi-head attention)."""
    layers, d_model = positive_int("llama", layers, "layers"), positive_int("llama", d_model, "d_model")
    heads, kv_heads = positive_int("llama", heads, "heads"), positive_int("llama", kv_heads, "kv_heads")
    seq, vocab, batch = (positive_int("llama", v, w) for v, w in ((seq, "seq"), (vocab, "vocab"), (batch, "batch")))
    ffn = llama_ffn(d_model) if ffn is None else positive_int("llama", ffn, "ffn")
    if d_model % heads:
        raise ShapeError(f"llama: d_model {d_model} is not a multiple of heads {heads}")
    if heads % kv_heads:
        raise ShapeError(f"llama: heads {heads} is not a multiple of kv_heads {kv_heads}")
    if (d_model // heads) % 2:
        raise ShapeError(f"llama: the head dimension d_model / heads = {d_model // heads} must be even (rotary "
                         "embeddings rotate pairs)")
    g = Graph(name)
    ids = g.input("input_ids", (batch, seq), dtype="int64")
    x = g.embedding(ids, vocab, d_model, name="model.embed_tokens")
    for layer in range(layers):
        x = decoder_layer(g, x, heads, kv_heads, ffn, rope_base, eps, f"model.layers.{layer}")
    logits = g.linear(g.rms_norm(x, eps=eps, name="model.norm"), vocab, bias=False, name="lm_head")
    g.softmax(logits, name="loss")
    g.layouts["megatron"] = functools.partial(llama_megatron_dp_spec, g)
    return g


def llama_megatron_dp_spec(g: Graph, tp: int, dp: int = 1,
                           sequence_parallel: bool | None = None) -> dict[str, dict[str, int]]:
    """Megatron-LM's tensor parallelism over groups of ``tp`` devices with data parallelism over
    ``dp`` groups, for a :func:`llama` graph, as a spec for ``Plan.from_dict(g, devices, spec,
    options=CostOptions(reduction_splits=True))`` (the layout of ``sw.models.megatron_dp_spec``
    for GPT graphs, with Llama's op names): q, k, v, ``gate_proj`` and ``up_proj`` (and SiLU, the
    gating product) by output columns (``l``); every op between them and ``o_proj`` by heads
    (query heads, and key/value heads before they are repeated, so query head h and its
    key/value head h // (H/G) sit on the same worker); ``o_proj`` and ``down_proj`` by rows (the
    split reduction ``i``: partial outputs summed); the token embedding by vocabulary rows,
    ``lm_head`` and the loss by vocabulary columns; RMS norms and residual adds, which Megatron
    replicates in a group, by samples ``n=dp*tp``.  Every op is also split ``n=dp``.

    Workers are numbered row-major over an op's split dimensions, samples slowest and a split
    reduction fastest, so group j is devices ``[j*tp, (j+1)*tp)``: one node of
    ``DeviceGraph.cluster(nodes, tp)``.  Needs ``tp`` to divide the key/value heads and the
    batch to be a multiple of ``dp * tp``.

    ``sequence_parallel``: split the RMS norms, residual adds and the token ids ``n=dp`` by
    samples and ``c=tp`` by positions in the sequence instead (Megatron-LM's sequence
    parallelism, "Reducing Activation Recomputation in Large Transformer Models"): the batch
    then needs to be a multiple of ``dp`` only, and the sequence of ``tp``.  None (the default):
    only when the batch is not a multiple of ``dp * tp``."""
    tp, dp = positive_int("llama_megatron_dp_spec", tp, "tp"), positive_int("llama_megatron_dp_spec", dp, "dp")
    batch, seq = g.ops[0].shape[:2]   # the token ids (N, T), the graph's first op
    if sequence_parallel is None:
        sequence_parallel = batch % (dp * tp) != 0

    def split(**degrees: int) -> dict[str, int]:
        return {dim: degree for dim, degree in degrees.items() if degree > 1}

    spec: dict[str, dict[str, int]] = {}
    for op in g.ops:
        name = op.name
        if name.endswith(("_proj.split", ".merge")):
            spec[name] = split(n=dp, h=tp)            # (N, T, heads, Dh): the heads
        elif name.endswith((".unsqueeze", ".expand")) or op.kind in ("permute", "rotary", "matmul", "softmax_dim") \
                or name.endswith(".repeat"):
            spec[name] = split(n=dp, c=tp)            # (N, heads, ...): the (key/value) heads
        elif name.endswith((".o_proj", ".down_proj")):
            spec[name] = split(n=dp, i=tp)            # rows: partial sums added on the owner
        elif name.endswith(("_proj", ".concat", ".mlp.silu", ".mlp.gated")):
            spec[name] = split(n=dp, l=tp)            # (N, T, features): the feature columns
        elif name == "model.embed_tokens":
            spec[name] = split(n=dp, v=tp)            # vocabulary-parallel embedding
        elif name in ("lm_head", "loss"):
            spec[name] = split(n=dp, l=tp)            # vocabulary columns of the logits
        elif sequence_parallel:
            spec[name] = split(n=dp, c=tp)            # RMS norms, residual adds, ids: by samples and positions
        else:
            spec[name] = split(n=dp * tp)             # RMS norms, residual adds: by samples
    return spec


def llama_tiny(batch: int = 4, layers: int = 2, d_model: int = 32, heads: int = 4, kv_heads: int = 2, seq: int = 8,
               vocab: int = 64, ffn: int = 64) -> Graph:
    """A Llama small enough to train on CPU workers in tests: 2 layers, d_model 32, 4 query heads
    sharing 2 key/value heads, an MLP of width 64, sequences of 8 tokens over a vocabulary of 64."""
    return llama(layers=layers, d_model=d_model, heads=heads, kv_heads=kv_heads, seq=seq, vocab=vocab,
                 batch=batch, ffn=ffn, name="llama_tiny")
