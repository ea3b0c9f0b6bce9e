"""Which ops' feature maps a lowering recomputes in the backward pass instead of keeping them.

    tg = sw.lower(plan, recompute="all")            # every feature map that can be recomputed
    tg = sw.lower(plan, recompute={"fc1", "relu1"})  # those of these ops
    tg.recomputed                                   # the ops that got recompute tasks
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
from shardwise.plan import Plan


def recompute_ops(plan: Plan, recompute: Any) -> np.ndarray | None:
    """The int32 op ids ``recompute`` names for ``plan``'s graph: None (keep every feature map),
    "all" (every op: the core recomputes those it can), or an iterable of op names.
    ConfigError for anything else or a name the graph does not have."""
    if recompute is None:
        return None
    ops = plan.graph.ops
    if isinstance(recompute, str):
        if recompute != "all":
            raise ConfigError(f"recompute must be None, 'all' or a set of op names, got {recompute!r}")
        return np.arange(len(ops), dtype=np.int32)
    try:
        names = list(recompute)
    except TypeError:
        raise ConfigError(f"recompute must be None, 'all' or a set of op names, got "
                          f"{type(recompute).__name__}") from None
    index = {op.name: op.index for op in ops}
    unknown = [n for n in names if not isinstance(n, str) or n not in index]
    if unknown:
        raise ConfigError(f"recompute names ops the graph {plan.graph.name!r} does not have: {unknown!r}")
    return np.asarray(sorted({index[n] for n in names}), np.int32)

