"""The simulated objective: the plan :func:`shardwise.planning.search` returns by default.

Eq. 1 adds compute, transfer and synchronization; a real iteration overlaps them
(the simulator replays that).  So the Eq. 1 optimum can simulate slower than data
parallelism, whose gradient synchronization hides behind the backward pass.  The
search under the simulated objective therefore goes in three steps:

1. the exact Eq. 1 optimum (node, edge and variable elimination), as before;
2. candidates: that optimum and the data, model and OWT baselines, each replayed by
   the simulator; the fastest is kept, so the result never simulates slower than a
   baseline.  On machines above :data:`SIMULATE_ALL_UP_TO` devices, a baseline whose
   Eq. 1 cost is more than :data:`BASELINE_EQ1_FACTOR` times the best simulated time so
   far is not replayed (its replay would take seconds to minutes: model parallelism
   over 1,024 devices lowers to tens of millions of copies); ``search_stats`` lists
   which were skipped.  There, too, a baseline whose lower bound (the busiest device or link,
   the longest dependency path of its task graph: :func:`shardwise.iteration.simulate.iteration_time`)
   already reaches the best simulated time is not replayed (``bounded_baselines``);
3. local search under the simulator, from the fastest candidate: a move gives the ops
   from some op on (or up to it, or that op alone; ops in topological order) the
   configurations another candidate has for them; the first move that
   simulates faster is taken, until no move helps or the replays reach
   :data:`TASK_BUDGET` tasks in all (a deterministic budget: the same inputs give the
   same plan on any machine).  A proposal whose lower bound already reaches the current
   time is rejected without its replay (``local_search_bounded``); its tasks still count
   against the budget, so the bound changes the time taken, never the plan.  When one replay
   of the seed alone is beyond the budget (a model parallel seed over hundreds of devices),
   there is no local search (``local_search_skipped``).

On machines of more than ``FUSED_RINGS_ABOVE`` devices every replay lowers its ring all-reduces
fused (one task per ring link, docs/simulator.md "Large machines"): ResNet-50 data parallel on 64
GPUs replays 97,000 tasks instead of 2.7 million.

A baseline that is the same plan as a candidate already replayed (data parallelism is often the
Eq. 1 optimum) takes that candidate's time instead of a replay (``duplicate_baselines``).

Eq. 1 stays available as ``objective="eq1"`` and stays exact for Eq. 1.

Under a memory constraint (``sw.search``'s ``memory``) the seed is the optimum that fits, and
a baseline or a move that would be taken is first checked with its memory plan: one that does
not fit is passed over (``search_stats["rejected_for_memory"]``).
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Sequence

from shardwise.plan import OpConfig, Plan
from shardwise.planning.problem import share_problem
from shardwise.planning.strategies import baselines

# machines up to this many devices replay every baseline
SIMULATE_ALL_UP_TO = 16
# above it, a baseline is replayed only when its Eq. 1 cost is within this factor of the best
# simulated time: Eq. 1 / simulated measured at most 11.1 over the zoo's baselines and Eq. 1
# optima on 4-16 devices (model parallelism of ResNet-50 on 16 P100s), so a baseline skipped this
# way would have to simulate nearly twice as favourably as any measured to win
BASELINE_EQ1_FACTOR = 20.0
# tasks the local search may replay in all (the C simulator replays about 5 * 10^5 tasks/s with
# its preparation: about half a second)
TASK_BUDGET = 300_000

Configs = dict[str, OpConfig]


def simulated_time(plan: Any, costs: Any, bound: float = float("inf")) -> tuple[float, int, bool]:
    """(iteration seconds, tasks lowered, bounded) of ``plan`` (or its task graph) under the simulator, memory
    unchecked; bounded: the plan's lower bound reached ``bound``, so it was not replayed and
    the seconds are that bound (the plan is no faster than ``bound``)."""
    from shardwise.iteration.simulate import iteration_time

    return iteration_time(plan, costs, bound)


def choose(seed: Plan, costs: Any, report: Callable[[str, float], None] | None = None,
           fits: Callable[[Plan], bool] | None = None, never_fit: Sequence[str] = (),
           seed_graph: Any = None) -> Plan:
    """The plan of the simulated objective, from ``seed`` (the Eq. 1 optimum, or the optimum
    under the memory constraint).  ``fits``: when given, a baseline or a move is kept only if
    its memory plan fits (checked when it would be taken: it simulates faster); ``seed`` must fit.
    ``never_fit``: names of baselines known not to fit (their footprint alone exceeds the budget):
    when the seed is too large for a local search they can neither be taken nor seed a move, so
    they are neither lowered nor costed (``search_stats["over_budget_baselines"]``, in the order
    of ``baselines()``).  ``seed_graph``: ``seed``'s task graph as the simulator lowers it, when
    the search has one (replayed as it is)."""
    import time

    graph, devices, options = seed.graph, seed.devices, seed.options
    t0 = time.perf_counter()
    seed_time, seed_tasks, _ = simulated_time(seed if seed_graph is None else seed_graph, costs)
    no_local_search = seed_tasks > TASK_BUDGET   # one replay beyond the whole budget
    simulated = {"eq1 optimum": seed_time}
    skipped: dict[str, float] = {}
    over_budget: list[str] = []   # known not to fit, no local search: not lowered
    bounded: dict[str, float] = {}
    rejected: dict[str, float] = {}   # candidates that would have been taken but do not fit in memory
    duplicates: dict[str, str] = {}   # baseline -> the candidate it equals, not replayed again
    pool: list[tuple[str, Configs, float]] = [("eq1 optimum", dict(seed.configs), seed_time)]
    in_pool = {_key(graph, seed.configs): "eq1 optimum"}   # each candidate's plan -> its name
    candidates = baselines(graph, devices, options)
    if no_local_search and fits is not None:
        # known not to fit, and no local search for them to seed: neither lowered nor costed (an
        # Eq. 1 evaluation on 1,024 GPUs takes a tenth of a second), listed in baselines()'s order
        over_budget = [b.name for b in candidates if b.name in never_fit]
        candidates = [b for b in candidates if b.name not in never_fit]
    for b in sorted(candidates, key=lambda p: p.cost):
        b.costs = costs
        share_problem(b, seed)   # one C problem for every candidate: the same graph, devices and options
        best = min(t for _, _, t in pool)
        key = _key(graph, b.configs)
        if key in in_pool:   # the same plan as a candidate already replayed (data parallelism is often
            duplicates[b.name] = in_pool[key]   # the Eq. 1 optimum): its time is known
            continue
        if len(devices) > SIMULATE_ALL_UP_TO and b.cost > BASELINE_EQ1_FACTOR * best:
            skipped[b.name] = b.cost
            continue
        large = len(devices) > SIMULATE_ALL_UP_TO
        t, _, no_faster = simulated_time(b, costs, bound=best if large else float("inf"))
        if no_faster:   # its lower bound reaches the best: it cannot be kept (ties keep the earlier),
            bounded[b.name] = t   # but its configurations still seed the local search's moves
        else:
            simulated[b.name] = t
            if fits is not None and t < best * (1 - 1e-9) and not fits(b):
                rejected[b.name] = t   # faster than every candidate so far, but does not fit
                continue
        pool.append((b.name, dict(b.configs), t))
        in_pool[key] = b.name
    if report:
        report("simulate the Eq. 1 optimum and the baselines", time.perf_counter() - t0)
    start_name, current, current_time = min(pool, key=lambda c: c[2])
    t1 = time.perf_counter()
    tried = accepted = pruned = rejected_moves = 0
    replayed = 0
    seen = set(in_pool)   # replayed already, none faster than the start
    improved = not no_local_search
    while improved and replayed < TASK_BUDGET:
        improved = False
        for proposal in _moves(graph, current, [c for _, c, _ in pool]):
            if replayed >= TASK_BUDGET:
                break
            key = _key(graph, proposal)
            if key in seen:
                continue
            seen.add(key)
            plan = share_problem(Plan(graph, devices, proposal, options, name="proposal", costs=costs), seed)
            need = current_time * (1 - 1e-9)   # a proposal is taken only when faster than this
            t, tasks, no_faster = simulated_time(plan, costs, bound=need)
            tried += 1
            pruned += no_faster
            replayed += tasks   # lowered tasks, replayed or not: the same budget, the same plan
            if not no_faster and t < need:
                if fits is not None and not fits(plan):
                    rejected_moves += 1
                    continue
                current, current_time = proposal, t
                accepted += 1
                improved = True
                break
    if report:
        report(f"local search under the simulator ({tried} replays)", time.perf_counter() - t1)
    stats = dict(seed.search_stats, objective="simulate", simulated=simulated, simulated_time=current_time,
                 simulated_eq1_optimum=seed_time, skipped_baselines=skipped, bounded_baselines=bounded,
                 start=start_name, local_search_tried=tried, local_search_accepted=accepted,
                 local_search_bounded=pruned, local_search_tasks=replayed, duplicate_baselines=duplicates,
                 local_search_skipped=no_local_search, over_budget_baselines=over_budget,
                 rejected_for_memory=rejected, local_search_rejected_for_memory=rejected_moves,
                 gain_over_eq1_optimum=seed_time / current_time if current_time > 0 else 1.0)
    return share_problem(Plan(graph, devices, current, options, name="searched", search_stats=stats, costs=costs),
                         seed)


def _moves(graph, current: Configs, others: list[Configs]) -> Iterator[Configs]:
    """Proposals from ``current``, for every other candidate: its configurations from op i on
    (and up to op i) for every op i where it differs, then op i alone."""
    names = [op.name for op in graph.ops]
    for other in others:
        differ = [i for i, n in enumerate(names) if current[n] != other[n]]
        for i in differ:
            yield _with(current, other, names[i:])
            yield _with(current, other, names[:i + 1])
        for i in differ:
            yield _with(current, other, names[i:i + 1])


def _key(graph, configs: Configs) -> tuple[OpConfig, ...]:
    return tuple(configs[op.name] for op in graph.ops)


def _with(current: Configs, other: Configs, names: list[str]) -> Configs:
    out = dict(current)
    for n in names:
        out[n] = other[n]
    return out
