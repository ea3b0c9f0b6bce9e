"""Which ops' feature maps a lowering recomputes in the backward pass instead of keeping them.

    tg = sw.lower(plan, recompute="all")            # every feature map that can be recomputed
    tg = sw.lower(plan, recompute={"fc1", "relu1"})  # those of these ops
    tg = sw.lower(plan, recompute="attention")      # attention's scores and probabilities
    tg.recomputed                                   # the ops that got recompute tasks
    tg = sw.lower(plan, recompute=sw.recompute_plan(plan, budget="16GB"))   # chosen to fit (recompute_plan.py)
    sw.Trainer(graph, plan, recompute="all")        # trains on that graph: bitwise the same weights

The rewrite is the C core's (csrc/graph/recompute.c): a chosen op's feature map is dropped after
its last forward use and a ``recompute`` task (the op's forward kernel again, on the same inputs)
writes it afresh right before the first backward task that reads it; the memory plan, the
simulator and the runtime read that graph like any other.  This module only turns a user's choice
into the op ids the core takes and checks it; docs/memory.md tells the story.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.graph import Graph
from shardwise.plan import Plan


POLICIES = ("all", "attention")


def attention_ops(graph: Graph) -> list[str]:
    """The ops of every attention in ``graph`` whose (N, H, T, T) maps memory-efficient attention
    does not store: each ``softmax_dim`` over a ``matmul``'s output (the scores), the softmax (the
    probabilities) and a ``dropout`` of them, as :meth:`Graph.attention` composes them."""
    out: list[str] = []
    for op in graph.ops:
        if op.kind != "softmax_dim" or not op.inputs or graph.ops[op.inputs[0]].kind != "matmul":
            continue
        out += [graph.ops[op.inputs[0]].name, op.name]
        out += [graph.ops[c].name for c in graph.consumers(op.index) if graph.ops[c].kind == "dropout"]
    return out


def recompute_ops(plan: Plan, recompute: Any) -> np.ndarray | None:
    """The int32 op ids ``recompute`` names for ``plan``'s graph: None (keep every feature map),
    "all" (every op: the core recomputes those it can), "attention" (:func:`attention_ops`), or
    an iterable of op names, or a RecomputePlan of this plan's graph (``sw.recompute_plan``: its
    ``ops``).  ConfigError for anything else or a name the graph does not have."""
    if recompute is None:
        return None
    ops = plan.graph.ops
    made_for = getattr(recompute, "plan", None)
    if isinstance(made_for, Plan) and isinstance(getattr(recompute, "ops", None), tuple):   # a RecomputePlan
        if made_for.graph.fingerprint() != plan.graph.fingerprint():
            raise ConfigError(f"this recompute plan was made for graph {made_for.graph.name!r}, not for "
                              f"{plan.graph.name!r}")
        recompute = recompute.ops
    if isinstance(recompute, str):
        if recompute not in POLICIES:
            raise ConfigError(f"recompute must be None, 'all', 'attention' or a set of op names, got {recompute!r}")
        if recompute == "attention":
            return recompute_ops(plan, attention_ops(plan.graph))
        return np.arange(len(ops), dtype=np.int32)
    try:
        names = list(recompute)
    except TypeError:
        raise ConfigError(f"recompute must be None, 'all', 'attention' or a set of op names, got "
                          f"{type(recompute).__name__}") from None
    index = {op.name: op.index for op in ops}
    unknown = [n for n in names if not isinstance(n, str) or n not in index]
    if unknown:
        raise ConfigError(f"recompute names ops the graph {plan.graph.name!r} does not have: {unknown!r}")
    return np.asarray(sorted({index[n] for n in names}), np.int32)

