"""``plan --memory-budget``: a plan within a per-device budget, by the search alone or with swapping.

The search keeps every device within ``min(its memory, budget)`` (:mod:`shardwise.planning.search_memory`).
When no plan of the search space fits, the command does what a user asking for a budget wants
next: it takes the fastest plan that ignores memory and offloads feature maps to host memory
until each device's arena fits the budget (:func:`shardwise.swap_plan`, AccUDNN's planner), and
prints what that costs in the simulator.  Only when swapping cannot reach the budget either does
the command fail, naming both limits.
"""

from __future__ import annotations

import argparse
from typing import Any, Callable

from shardwise.plan import Plan
from shardwise.sizes import format_bytes
from shardwise.planning.search_memory import PlanDoesNotFitError
from shardwise.iteration.swap import SwapPlan, parse_budget, swap_plan


def plan_within_budget(run_search: Callable[..., Plan], budget: int,
                       note: Callable[[str], None]) -> tuple[Plan, SwapPlan | None]:
    """``run_search(memory=...)`` under ``budget`` bytes per device; the swap fallback when no plan fits.

    Returns (plan, None) when the search finds a plan within the budget, else (the fastest plan
    ignoring memory, its swap plan).  Raises :class:`PlanDoesNotFitError` when neither works."""
    try:
        return run_search(memory=budget), None
    except PlanDoesNotFitError as refused:
        note(f"shardwise: no plan fits {format_bytes(budget)} per device without swapping ({refused}); "
             "planning activation swapping to host memory")
        plan = run_search(memory=False)
        try:
            return plan, swap_plan(plan, budget)
        except ValueError as exc:
            raise PlanDoesNotFitError(
                f"no plan fits {format_bytes(budget)} per device: the plan closest to fitting needs "
                f"{format_bytes(refused.needed)} on device {refused.device}, and swapping activations to host "
                f"memory cannot reach the budget either: {exc}. Raise --memory-budget, use more devices "
                f"(--devices) or a smaller minibatch (--batch)", refused.device, refused.needed,
                refused.available) from None


def swap_report(plan: Plan, sp: SwapPlan) -> dict[str, Any]:
    """Text lines and a JSON document for a swap plan: its table, and the simulated overhead."""
    plain, swapped = sp.iteration_time, sp.swapped_iteration_time   # sw.simulate's, without and with the swap tasks
    overhead = swapped / plain - 1.0 if plain > 0 else 0.0
    text = (sp.summary() + "\n" +
            f"swap: simulated iteration {swapped * 1e3:.3f} ms with swapping, {plain * 1e3:.3f} ms without "
            f"({overhead * 100:+.1f}%): a stall of {sp.total_stall * 1e3:.3f} ms "
            "(Trainer(g, plan, swap=sw.swap_plan(plan, budget)) trains within the budget)")
    doc = {"feature_maps_offloaded": len(sp.entries),
           "devices": [{"device": d, "budget_bytes": sp.budget[d], "peak_bytes": sp.peak_bytes[d],
                        "unswapped_bytes": sp.unswapped_peak[d], "offloaded_bytes": sp.offloaded_bytes[d],
                        "host_bytes": sp.host_bytes[d], "stall_s": sp.stall_time[d]} for d in sorted(sp.peak_bytes)],
           "iteration_time": swapped, "unswapped_iteration_time": plain, "overhead": overhead}
    return {"text": text, "doc": doc}


def budget_bytes(text: str) -> int:
    """``--memory-budget``'s value in bytes (sizes as :func:`shardwise.parse_budget` reads them)."""
    try:
        return parse_budget(text, "--memory-budget")
    except (TypeError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
