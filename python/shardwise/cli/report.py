"""What the command line prints about a plan: the comparison with the baselines, the simulated
times the search compared, the memory each device's plan needs, and ``plan --json``'s document.

Apart from cli.py (arguments and commands) because these are the reports themselves: pure
functions of a :class:`~shardwise.plan.Plan`, tested on their own.
"""
from __future__ import annotations

import math
from typing import Any, Sequence

from shardwise.plan import Plan


def _finite(value: Any) -> Any:
    """JSON has no inf/NaN: replace them by null, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


def comparison(plan: Plan, baselines: Sequence[Plan]) -> dict[str, Any]:
    """How the searched plan compares with the best baseline and with data parallelism."""
    best = min(baselines, key=lambda b: b.cost)
    data = next(b for b in baselines if b.name == "data")
    speedup = best.cost / plan.cost if plan.cost > 0 else math.inf
    if plan.bytes_moved > 0:
        fewer = data.bytes_moved / plan.bytes_moved
    else:
        fewer = math.inf if data.bytes_moved > 0 else 1.0
    return {"best_baseline": best.name, "best_baseline_cost": best.cost, "speedup_vs_best_baseline": speedup,
            "data_parallel_bytes_moved": data.bytes_moved, "bytes_fewer_than_data_parallel": fewer}


def comparison_line(plan: Plan, baselines: Sequence[Plan]) -> str:
    c = comparison(plan, baselines)
    if plan.bytes_moved > 0:
        ratio = f"{c['bytes_fewer_than_data_parallel']:.2f}x fewer bytes than data parallelism"
    elif c["data_parallel_bytes_moved"] > 0:
        ratio = "no bytes at all, unlike data parallelism"
    else:
        ratio = "as few bytes as data parallelism (none)"
    return (f"searched plan: {c['speedup_vs_best_baseline']:.2f}x faster than the best baseline "
            f"({c['best_baseline']}, {c['best_baseline_cost'] * 1e3:.3f} ms/iter) and moves {ratio} "
            f"({plan.bytes_moved / 1e6:.2f} MB vs {c['data_parallel_bytes_moved'] / 1e6:.2f} MB per iteration)")


def simulated_line(plan: Plan) -> str:
    """The simulated times the search compared (objective "simulate"), or "" without them."""
    times = plan.search_stats.get("simulated")
    if not times:
        return ""
    from shardwise.iteration.sim_costs import describe_costs

    others = ", ".join(f"{name} {t * 1e3:.3f} ms" for name, t in times.items())
    skipped = plan.search_stats.get("skipped_baselines") or {}
    extra = f"; not replayed (Eq. 1 far slower): {', '.join(skipped)}" if skipped else ""
    bounded = plan.search_stats.get("bounded_baselines") or {}
    if bounded:
        extra += "; not replayed (lower bound no faster): " + ", ".join(
            f"{name} >= {t * 1e3:.3f} ms" for name, t in bounded.items())
    return (f"simulated: searched plan {plan.search_stats['simulated_time'] * 1e3:.3f} ms per iteration; "
            f"{others}{extra} (costs: {describe_costs(plan.costs)})")


def plan_document(plan: Plan, baselines: Sequence[Plan], model: str, batch: int) -> dict[str, Any]:
    """What ``plan --json`` prints: ``plan.to_dict()`` plus layers, baselines, comparison, search stats."""
    doc = plan.to_dict()
    doc["model"] = {"name": model, "batch": batch, "parameters": plan.graph.num_parameters()}
    doc["layers"] = [row.as_dict() for row in plan.layer_costs()]
    doc["baselines"] = [{"name": b.name, "cost": b.cost, "breakdown": b.breakdown, "bytes_moved": b.bytes_moved}
                        for b in baselines]
    doc["comparison"] = comparison(plan, baselines)
    doc["search_stats"] = plan.search_stats
    return _finite(doc)


def memory_lines(plan: Plan, budget: int | None = None) -> dict[str, Any]:
    """Each device's memory plan (arena) beside its memory: text, a JSON list, and the devices over
    their memory (or over ``budget`` bytes, where that is less)."""
    from shardwise.iteration.memory import memory_plan

    mp = memory_plan(plan)
    rows, over = [], []
    for d, dev in enumerate(plan.devices.devices):
        need = mp.devices[d].arena_bytes
        rows.append({"device": d, "name": dev.name, "peak_bytes": need, "memory_bytes": dev.memory})
        limit = dev.memory if budget is None else min(dev.memory, budget)
        if need > limit:
            over.append(f"device {d} ({dev.name}) needs {need / 1e9:.2f} GB of its {limit / 1e9:.2f} GB"
                        + (" (the memory budget)" if limit < dev.memory else ""))
    peaks = [r["peak_bytes"] for r in rows]
    head = (f"memory (each device's memory plan, the arena the runtime allocates, beside its memory): "
            f"peak {max(peaks) / 1e9:.2f} GB" + (f" (budget {budget / 1e9:.2f} GB)" if budget is not None else ""))
    if len(rows) <= 16:
        body = ", ".join(f"{r['device']}: {r['peak_bytes'] / 1e9:.2f}/{r['memory_bytes'] / 1e9:.0f} GB" for r in rows)
    else:
        body = f"least {min(peaks) / 1e9:.2f} GB; every device has {min(r['memory_bytes'] for r in rows) / 1e9:.0f} GB or more"
    return {"text": f"{head}; {body}", "devices": rows, "over": "; ".join(over)}
