"""``plan.compare()``: a plan beside the data, model and OWT baselines, simulated and by Eq. 1.

    print(plan.compare())
    c = plan.compare(); c.rows[0].simulated, c.speedup, c.reasons
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Sequence

if TYPE_CHECKING:
    from shardwise.plan import Plan


@dataclass(frozen=True)
class ComparedPlan:
    """One row: a plan's simulated iteration, its Eq. 1 cost and that cost's terms (seconds)."""

    name: str
    simulated: float
    eq1: float
    compute: float
    transfer: float
    sync: float
    bytes_moved: float

    @property
    def hidden(self) -> float:
        """Seconds of Eq. 1 that the simulated iteration overlaps away (Eq. 1 - simulated)."""
        return self.eq1 - self.simulated


@dataclass(frozen=True)
class Comparison:
    """The rows (the plan first), the costs used, and why the plan wins or loses."""

    rows: list[ComparedPlan]
    costs_used: str
    reasons: list[str] = field(default_factory=list)

    @property
    def plan(self) -> ComparedPlan:
        return self.rows[0]

    @property
    def best_baseline(self) -> ComparedPlan:
        return min(self.rows[1:], key=lambda r: r.simulated)

    @property
    def speedup(self) -> float:
        """Simulated time of the fastest baseline / the plan's (> 1: the plan is faster)."""
        return self.best_baseline.simulated / self.plan.simulated if self.plan.simulated > 0 else float("inf")

    def __str__(self) -> str:
        head = (f"{'plan':<16} {'simulated ms':>13} {'Eq. 1 ms':>10} {'compute':>9} {'transfer':>9} {'sync':>9} "
                f"{'hidden':>9} {'MB moved':>10}")
        lines = [head, "-" * len(head)]
        for r in self.rows:
            lines.append(f"{r.name:<16} {r.simulated * 1e3:13.3f} {r.eq1 * 1e3:10.3f} {r.compute * 1e3:9.3f} "
                         f"{r.transfer * 1e3:9.3f} {r.sync * 1e3:9.3f} {r.hidden * 1e3:9.3f} {r.bytes_moved / 1e6:10.2f}")
        lines.append(f"costs: {self.costs_used}; compute/transfer/sync: the Eq. 1 terms; hidden: Eq. 1 - simulated "
                     "(what overlap saves)")
        lines += self.reasons
        return "\n".join(lines)

    def _repr_pretty_(self, p: Any, cycle: bool) -> None:   # IPython / Jupyter
        p.text(str(self))


def compare(plan: "Plan", baselines: Sequence["Plan"] | None = None, costs: Any = None) -> Comparison:
    """Simulate ``plan`` and ``baselines`` (default: data, model and OWT parallelism on the
    plan's devices) with the plan's costs (or ``costs``), memory unchecked."""
    from shardwise.iteration.simulate import simulate
    from shardwise.iteration.sim_costs import describe_costs, resolve_costs
    from shardwise.planning.strategies import baselines as default_baselines

    costs = resolve_costs(plan, costs)
    if baselines is None:
        others = default_baselines(plan.graph, plan.devices, plan.options)
        for b in others:
            b.costs = costs   # their Eq. 1 terms with the same costs as the plan's
    else:
        others = list(baselines)
    rows = []
    for p in [plan] + others:
        sim = simulate(p, check_memory=False, costs=costs if costs is not None else "roofline")
        b = p.breakdown
        rows.append(ComparedPlan(p.name, sim.iteration_time, p.cost, b["compute"], b["transfer"], b["sync"],
                                 p.bytes_moved))
    return Comparison(rows, describe_costs(costs), _reasons(rows))


def _reasons(rows: list[ComparedPlan]) -> list[str]:
    """Why the plan beats (or trails) the fastest baseline, in the terms that differ most."""
    if len(rows) < 2:
        return []
    plan, best = rows[0], min(rows[1:], key=lambda r: r.simulated)
    if plan.simulated <= 0 or best.simulated <= 0:
        return []
    ratio = best.simulated / plan.simulated
    verdict = "faster than" if ratio > 1 + 1e-9 else ("as fast as" if ratio > 1 - 1e-9 else "slower than")
    lines = [f"{plan.name} is {verdict} the fastest baseline, {best.name} "
             f"({best.simulated * 1e3:.3f} ms simulated, {ratio:.2f}x)"]
    terms = [("compute", plan.compute - best.compute), ("transfer", plan.transfer - best.transfer),
             ("sync", plan.sync - best.sync), ("overlap", -(plan.hidden - best.hidden))]
    parts = []
    for name, delta in sorted(terms, key=lambda t: t[1]):
        if abs(delta) < 1e-3 * max(best.simulated, 1e-12):
            continue
        if name == "overlap":
            parts.append(f"overlap hides {abs(delta) * 1e3:.3f} ms {'more' if delta < 0 else 'less'}")
        else:
            parts.append(f"{name} {'-' if delta < 0 else '+'}{abs(delta) * 1e3:.3f} ms")
    if parts:
        lines.append(f"against {best.name}: " + ", ".join(parts) + " (Eq. 1 terms; overlap: Eq. 1 - simulated)")
    return lines
