"""``plan.explain("fc6")``: an op's chosen configuration beside its runners-up (the cheapest
placement of each other split), by Eq. 1, and a sentence on why it wins.

Every configuration the search could give the op is costed with the rest of the plan held
fixed: the op's own compute and synchronization, and the transfers on its in- and out-edges
(the only terms of Eq. 1 that change), from the same C tables the search uses.

    e = plan.explain("fc6", top=5)
    print(e); e.rows[0].config, e.rows[0].total
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from shardwise.errors import ConfigError
from shardwise.planning.problem import config_arrays, dim_names, make_problem, worker_counts

if TYPE_CHECKING:
    from shardwise.plan import OpConfig, Plan


@dataclass(frozen=True)
class ConfigCost:
    """One configuration of the op: Eq. 1 of the whole plan with it, and the op's share."""

    config: "OpConfig"
    total: float       # Eq. 1 of the plan with this configuration for the op
    compute: float     # the op's t_c
    transfer: float    # transfers on the op's in- and out-edges
    sync: float        # the op's t_s
    chosen: bool


@dataclass(frozen=True)
class Explanation:
    op: str
    kind: str
    rows: list[ConfigCost]     # the chosen configuration first, then the cheapest other splits
    considered: int            # configurations costed
    costs_used: str
    placements_merged: int = 0   # runners-up left out: the same split as a shown one on other devices
    precision: str = "fp32"      # the number format the plan is costed in (CostOptions.precision)

    @property
    def reason(self) -> str:
        """One sentence: why the chosen configuration beats the best other split, by the terms
        of Eq. 1 that differ (its compute, the transfers on its edges, its synchronization)."""
        chosen = self.rows[0]
        others = [r for r in self.rows[1:] if not _same_split(r.config, chosen.config)]
        if not others:
            return f"{self.op} has no other split to compare with."
        best = others[0]
        terms = [(name, (getattr(chosen, name) - getattr(best, name)) * 1e3)
                 for name in ("compute", "transfer", "sync")]
        lower = [f"{_TERM[n]} {-d:.3f} ms lower" for n, d in terms if d < -1e-9]
        higher = [f"{_TERM[n]} {d:.3f} ms higher" for n, d in terms if d > 1e-9]
        gap = (best.total - chosen.total) * 1e3
        if gap < 0:
            return (f"{chosen.config} costs {-gap:.3f} ms more under Eq. 1 than {best.config}; the plan was chosen "
                    "by another objective (the simulated iteration) or written by hand.")
        if not lower and not higher:
            return f"{chosen.config} and {best.config} cost the same under Eq. 1; the search kept the first."
        body = "; ".join(x for x in (", ".join(lower), ", ".join(higher)) if x)
        return (f"{chosen.config} wins over the best other split, {best.config}, by {gap:.3f} ms: "
                f"{body}.")

    def __str__(self) -> str:
        chosen = self.rows[0]
        head = (f"{'':2}{'configuration':<34} {'plan Eq. 1 ms':>13} {'vs chosen':>10} {'compute':>9} "
                f"{'transfer':>9} {'sync':>9}")
        lines = [f"{self.op} ({self.kind}): {self.considered} configurations costed with the rest of the plan "
                 f"fixed (costs: {self.costs_used}, precision {self.precision}); transfer: the op's in- and "
                 f"out-edges, ms", head,
                 "-" * len(head)]
        for r in self.rows:
            delta = (r.total - chosen.total) * 1e3
            lines.append(f"{'*' if r.chosen else ' ':2}{str(r.config):<34} {r.total * 1e3:13.3f} {delta:+10.3f} "
                         f"{r.compute * 1e3:9.3f} {r.transfer * 1e3:9.3f} {r.sync * 1e3:9.3f}")
        if self.placements_merged:
            lines.append(f"({self.placements_merged} more placements of the shown splits on other devices left out)")
        lines.append(self.reason)
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:   # IPython / Jupyter
        p.text(str(self))


def explain(plan: "Plan", op_name: str, top: int = 5) -> Explanation:
    from shardwise.planning.costs import apply_profile
    from shardwise.plan import OpConfig, reduction_config, reduction_pair
    from shardwise.planning.search import _enumerate

    if op_name not in plan.configs:
        raise ConfigError(f"no op named {op_name!r} in this plan")
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"top must be a positive int, got {top!r}")
    graph, devices = plan.graph, plan.devices
    target = graph[op_name]
    problem = make_problem(graph, devices, plan.options)
    _enumerate(problem, devices, worker_counts(len(devices)))
    deg, dev = problem.configs(target.index)
    red = problem.reductions(target.index)
    rank = len(target.shape)
    options = [OpConfig(dim_names(rank), tuple(int(x) for x in deg[k][:rank]),
                        tuple(int(x) for x in dev[k] if x >= 0), reduction_config(target, red[k]))
               for k in range(len(deg))]
    chosen = plan.configs[op_name]
    if chosen not in options:
        options.append(chosen)   # a hand-written configuration outside the searched space
    for op in graph.ops:
        configs = options if op is target else [plan.configs[op.name]]
        problem.set_configs(op.index, *config_arrays([c.degrees for c in configs], [c.devices for c in configs]),
                            np.array([reduction_pair(op, c) for c in configs], dtype=np.int32))
    problem.build_tables()
    if plan.costs is not None:
        apply_profile(problem, graph, devices, plan.costs)
    fixed = 0.0
    transfer = np.zeros(len(options))
    for e, (src, dst, _) in enumerate(problem.edges()):
        t, _b = problem.edge_table(e)
        if src == target.index:
            transfer += t[:, 0]
        elif dst == target.index:
            transfer += t[0, :]
        else:
            fixed += float(t[0, 0])
    for op in graph.ops:
        if op is not target:
            tc, ts, _ = problem.node_costs(op.index)
            fixed += float(tc[0]) + float(ts[0])
    tc, ts, _ = problem.node_costs(target.index)
    rows = [ConfigCost(c, fixed + float(tc[k]) + float(ts[k]) + float(transfer[k]), float(tc[k]),
                       float(transfer[k]), float(ts[k]), c == chosen) for k, c in enumerate(options)]
    first = next(r for r in rows if r.chosen)
    # runners-up: the cheapest placement of each other split (the same split on other devices
    # costs alike on a uniform machine and says nothing new)
    best_of: dict[Any, ConfigCost] = {}
    for r in sorted((r for r in rows if not r.chosen), key=lambda r: r.total):
        key = _split_key(r.config)
        if key != _split_key(first.config) and key not in best_of:
            best_of[key] = r
    others = list(best_of.values())[:top]
    merged = len(rows) - 1 - len(best_of)
    from shardwise.iteration.sim_costs import describe_costs

    return Explanation(op_name, target.kind, [first] + others, len(rows), describe_costs(plan.costs), merged,
                       plan.options.precision)


_TERM = {"compute": "compute", "transfer": "transfers on its edges", "sync": "synchronization"}


def _split_key(c: "OpConfig") -> tuple:
    return (c.degrees, c.reduction)


def _same_split(a: "OpConfig", b: "OpConfig") -> bool:
    return _split_key(a) == _split_key(b)
