"""The search: the Eq. 1 optimum over every op's configurations.

    plan = search(g, d)                          # node/edge elimination (exact)
    plan = search(g, d, algorithm="exhaustive")  # brute force, small graphs only
    plan = search(g, d, algorithm="tofu")        # Tofu's recursive CriticalDP (shardwise.planning.tofu)

Configurations per op come from the C core (aligned contiguous device blocks, plus the
structure groups of heterogeneous machines from :mod:`shardwise.machine.device_sets`,
worker counts from :func:`shardwise.planning.problem.worker_counts`); cost tables are
built in C with the GIL released; the search itself runs in C.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Sequence

import numpy as np

from shardwise.machine.device_sets import aligned_blocks, device_sets
from shardwise.machine.devices import DeviceGraph
from shardwise.errors import ConfigError, SearchError, SearchWarning
from shardwise.graph import Graph
from shardwise.planning.costs import ComputeCosts, apply_profile
from shardwise.plan import OpConfig, Plan, reduction_config
from shardwise.planning.precision import check_precision
from shardwise.planning.problem import (CostOptions, ProblemInputs, dim_names, make_problem, search_threads,
                                       worker_counts)
from shardwise.planning import problem_cache
from shardwise.planning import objective as objective_module
from shardwise.planning import search_scale
from shardwise.planning import search_memory
from shardwise.planning.search_scale_memory import MemoryStage
from shardwise.planning.strategies import baselines, layout_baselines
from shardwise.progress import ProgressReport, check_progress

# above this many configurations on every aligned block, or about this many min-plus steps to
# eliminate them (the cube of the configuration counts), a machine of identical devices is
# searched by search_scale (each partition once, pruning, then the placements)
SCALE_ABOVE = 40_000
SCALE_WORK = 2e9
ENUMERATE_FIRST = 16   # machines of at most this many devices count those configurations by enumerating them
# other machines: above this much memory for the transfer tables of every aligned block, or
# this many min-plus steps to eliminate them (about 20 s), each partition is placed on the first
# devices only (with a warning)
MAX_TABLE_BYTES = 2 * 2**30
MAX_ELIMINATION_WORK = 4e10

ALGORITHMS = ("elimination", "exhaustive", "tofu")
# elimination: min-plus steps of variable elimination on the residual graph (about a second
# per 10^9); exhaustive: strategies tried
DEFAULT_MAX_EVALUATIONS = {"elimination": 1e9, "exhaustive": 2e7}


Progress = Callable[[str, float], None]


# A plan within this fraction of a proven lower bound is reported as found, not as a gap: the
# bound and the plan's cost are sums of the same terms in other orders (swin_t on 16 devices:
# 4.4e-8 apart).
NEGLIGIBLE_GAP = 1e-6


def _run_live(problem: Any, label: str, work: Callable[[], Any], report: ProgressReport) -> Any:
    """Run ``work`` (which releases the GIL) on a thread while ``report`` shows the C core's
    (done, total) counter as a bar with an ETA (terminals and notebooks; "auto": once the
    call has run a second)."""
    if not report.bars:
        return work()
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["result"] = work()
        except BaseException as exc:  # re-raised on the calling thread
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"shardwise {label}", daemon=True)
    thread.start()
    try:
        while thread.is_alive():
            thread.join(0.2)
            if thread.is_alive():
                done, total = problem.progress()
                report.advance(done, total or None, label)
    finally:
        report.close()
    if "error" in box:
        raise box["error"]
    return box.get("result")


def _enumerate(problem: Any, devices: DeviceGraph, counts: Sequence[int]) -> bool:
    """Configurations on the aligned blocks of every count, and on a machine whose structure
    makes other groups of devices distinct (nodes, kinds, link speeds), on those groups and
    their blocks too (:mod:`shardwise.machine.device_sets`).  True when those are the aligned
    blocks alone."""
    sets = device_sets(devices, counts)
    if set(sets) == set(aligned_blocks(len(devices), counts)):
        problem.enumerate(np.asarray(counts, dtype=np.int32))
        return True
    problem.enumerate_sets([np.asarray(s, dtype=np.int32) for s in sets])
    return False


@problem_cache.holding
def search(graph: Graph, devices: DeviceGraph, algorithm: str = "elimination", *,
           sync: str = "parameter_server", options: CostOptions | None = None,
           costs: ComputeCosts | None = None, max_evaluations: float | None = None,
           worker_counts_: Sequence[int] | None = None,
           progress: bool | str | Progress = "auto", refine: str | None = None, refine_steps: int = 200,
           refine_seed: int = 0, time_limit: float | None = None, objective: str | None = None,
           memory: bool | float | str = True, pareto: bool = False,
           precision: str | None = None, recompute: bool = False) -> Plan | list[search_memory.FrontPlan]:
    """Find the fastest strategy: by default the one with the fastest simulated iteration
    among the Eq. 1 optimum, the baselines and their combinations; with ``objective="eq1"``
    the exact optimum of Eq. 1 of "Exploring Hidden Dimensions in Parallelizing
    Convolutional Neural Networks".

    ``objective``: ``"simulate"`` (the default for ``algorithm="elimination"``) starts from the
    exact Eq. 1 optimum, replays it and the data, model and OWT baselines in the simulator,
    keeps the fastest (so the plan never simulates slower than a baseline) and improves it by a
    bounded, deterministic local search under the simulator (:mod:`shardwise.planning.objective`, docs/cost-model.md);
    ``search_stats`` records every simulated time.  ``"eq1"`` (the default for the other
    algorithms) returns the Eq. 1 optimum itself.  Both synchronization models are lowered,
    simulated and memory-planned alike (``sync="ring"``: a ring all-reduce of gradient chunks;
    ``sync="zero"``: the same ring with each chunk updated by one replica and the optimizer
    state sharded, :mod:`shardwise.iteration.lower`).

    ``algorithm``: ``"elimination"`` (Algorithm 1: node, edge and leaf
    eliminations, then variable elimination of what is left along a min-fill
    order; exact while that takes at most ``max_evaluations`` min-plus steps
    (default 10^9, about a second) with no table above 2^27 entries, i.e. for
    residual graphs of small treewidth; above that bound it returns the best plan
    it finds, with ``search_stats["exact"] = False``, the ``lower_bound`` and a
    :class:`SearchWarning` giving the gap) or ``"exhaustive"``
    (brute force over every strategy; refuses graphs with more than
    ``max_evaluations`` strategies) or ``"tofu"`` (Tofu's partitioning over all of
    ``devices``, minimizing bytes moved rather than Eq. 1: :func:`shardwise.planning.tofu.partition`
    with reduction cuts, which become partition-n-reduce configurations; the returned Plan
    is costed by Eq. 1 like any other, and ``max_evaluations``, ``worker_counts_`` and
    ``refine`` do not apply).  ``sync``: ``"parameter_server"`` (default,
    as the papers), ``"ring"`` or ``"zero"``.  ``costs``: measured compute times (a
    :class:`ProfileTable`) replacing the roofline.  ``refine="simulate"``: start from
    the elimination optimum and improve it under the simulator by local search
    (``refine_steps`` proposals, Metropolis acceptance as in FlexFlow's MCMC); the
    result never simulates slower than its seed.  ``progress``: "auto" (the default) shows,
    once the search has run a second, each stage's time on stderr and a bar with an ETA for the
    long stages (terminals and notebooks; a log gets the stage lines); True from the start;
    False nothing; or pass a callable ``(stage, seconds)`` that gets every stage.

    A search of the same graph on the same machine with the same options as one of the last two
    reuses its configurations and cost tables (:mod:`shardwise.planning.problem_cache`; the plan is
    the same, bit for bit; ``search_stats["kept_tables"]``).

    The search space: every op's partitions on aligned contiguous blocks of devices and,
    on machines whose devices differ, on the groups their structure makes distinct (each
    node, each device kind, each class of devices linked at a given speed, and aligned
    blocks within them; :mod:`shardwise.machine.device_sets`, docs/cost-model.md).  A plan on
    other device sets can be written by hand; the search does not consider it.  On machines of identical devices in uniform nodes (the
    ``cluster`` and ``cpu`` presets) large searches go in stages that keep the
    optimum: each partition once, pruning by a relaxation's lower bounds, then a
    proof that no other placement does better (``search_stats["scale"]``).  On other
    machines too large to search on every block, each partition sits on the first
    devices only, with a :class:`SearchWarning`.  ``time_limit``: seconds after which
    a staged search stops between stages with the best plan found so far, its lower
    bound and a :class:`SearchWarning`; under memory, its branch and bound stops there too
    once it holds a plan that fits (it goes on until it has one).

    ``memory``: True (the default): every device's memory plan (:func:`shardwise.memory_plan`)
    fits its ``memory``; a number of bytes or a string such as ``"8GB"``: that budget on every
    device (at most its memory); False: memory is not looked at.  When the Eq. 1 optimum fits
    it is returned as before; otherwise the exact optimum under the per-device footprint
    constraint (:mod:`shardwise.planning.search_memory`, docs/memory.md), checked with its memory plan;
    ``search_stats["memory"]`` says how it was found.  On machines searched in stages the
    constrained search prunes with the cost of a plan that fits and searches what is left, each
    partition on the first devices, then on every aligned block when few enough
    (:mod:`shardwise.planning.search_scale_memory`); ``search_stats["memory"]["placements"]``
    says which of the two spaces the plan is the optimum of.  When no plan fits:
    :class:`~shardwise.planning.search_memory.PlanDoesNotFitError` (a ValueError) naming the smallest
    shortfall.  The simulated objective and ``refine`` keep only candidates that fit.

    ``precision``: the number format the plan is costed in, ``"fp32"`` (the default),
    ``"bf16"`` or ``"fp16"`` (mixed precision: 2-byte activations, gradients and messages,
    float32 master weights and optimizer state, the devices' dense peaks for matrix products and
    convolutions; :mod:`shardwise.planning.precision`, docs/cost-model.md); the same as
    ``options=CostOptions(precision=...)``.  Execution stays float32.

    ``recompute=True``: when the Eq. 1 optimum does not fit, recomputation may make it (or one of
    the two cheapest baselines) fit: :func:`shardwise.recompute_plan` chooses which feature maps
    to recompute in the backward pass, greedily (bytes kept per recompute second; not an
    optimum).  That plan is returned instead of the constrained optimum when nothing fits without
    recomputation or when its Eq. 1 time plus the simulated time of its recomputes is less;
    ``search_stats["memory"]["recompute"]`` then names the ops, the method (greedy), the added
    seconds and the arenas, the simulated objective and ``refine`` do not move it, and
    ``sw.Trainer(graph, plan)`` trains with that recomputation.  On a machine large enough for the
    staged search, which searches under memory without recomputation, recomputation is tried
    only when nothing fits without it (on the Eq. 1 optimum and the two cheapest baselines).

    ``pareto=True``: instead of one plan, the time / peak-memory Pareto front: a list of
    :class:`~shardwise.planning.search_memory.FrontPlan` (``plan``, ``time`` (Eq. 1 s), ``peak_bytes``
    (the largest arena), ``memory`` (its MemoryPlan)), fastest first, each needing less memory
    than the one before; every plan fits ``memory``.  Times are Eq. 1's (the objective the
    search is exact for), whatever ``objective`` says.
    """
    if not isinstance(graph, Graph):
        raise ConfigError(f"search needs a Graph, got {type(graph).__name__}")
    if not isinstance(devices, DeviceGraph):
        raise ConfigError(f"search needs a DeviceGraph, got {type(devices).__name__}")
    if algorithm not in ALGORITHMS:
        raise ConfigError(f"unknown search algorithm {algorithm!r}; expected one of {ALGORITHMS}")
    if objective not in (None, "simulate", "eq1"):
        raise ConfigError(f"unknown objective {objective!r}; expected 'simulate' or 'eq1'")
    if refine not in (None, "simulate"):
        raise ConfigError(f"unknown refinement {refine!r}; expected None or 'simulate'")
    if isinstance(refine_steps, bool) or not isinstance(refine_steps, int) or refine_steps < 0:
        raise ConfigError(f"refine_steps must be a non-negative int, got {refine_steps!r}")
    if time_limit is not None and (isinstance(time_limit, bool) or not isinstance(time_limit, (int, float))
                                   or not 0 < time_limit < float("inf")):
        raise ConfigError(f"time_limit must be a positive number of seconds or None, got {time_limit!r}")
    if precision is not None:
        check_precision(precision)
        if options is not None and options.precision != precision:
            raise ConfigError(f"precision={precision!r} disagrees with options.precision={options.precision!r}; "
                              f"give it once")
    options = options or CostOptions(sync=sync, precision=precision or "fp32")
    if not isinstance(pareto, bool):
        raise ConfigError(f"pareto must be True or False, got {pareto!r}")
    if not isinstance(recompute, bool) or (recompute and pareto):
        raise ConfigError(f"recompute must be True or False (and not with pareto=True), got {recompute!r}")
    mem_limit = search_memory.budgets(devices, memory)
    check_progress(progress)
    report = ProgressReport("search", progress)
    if objective is None:
        objective = "simulate" if algorithm == "elimination" else "eq1"
    fits = None if mem_limit is None else (lambda p: search_memory.fits(p, mem_limit))
    if algorithm == "tofu":
        if pareto:
            raise ConfigError("pareto=True needs algorithm='elimination' or 'exhaustive'")
        plan = _search_tofu(graph, devices, options, costs, refine, report)
        if fits is not None and not fits(plan):
            raise search_memory.PlanDoesNotFitError(
                "Tofu's partition does not fit every device's memory (its memory plan: "
                + ", ".join(f"device {d}: {a / 1e9:.2f} GB of {m / 1e9:.2f} GB" for d, (a, m) in
                            enumerate(zip(search_memory.arenas(plan), mem_limit)) if a > m)
                + "); use algorithm='elimination', which searches under the memory constraint, or memory=False")
        return objective_module.choose(plan, costs, report, fits=fits) if objective == "simulate" else plan
    limit = DEFAULT_MAX_EVALUATIONS[algorithm] if max_evaluations is None else max_evaluations
    if isinstance(limit, bool) or not isinstance(limit, (int, float)) or not (1 <= limit < float("inf")):
        raise ConfigError(f"max_evaluations must be a finite number >= 1, got {max_evaluations!r}")
    limit = float(limit)
    timings: dict[str, float] = {}

    def stage(name: str, start: float) -> float:
        now = time.perf_counter()
        timings[name] = now - start
        report(name, now - start)
        return now

    t0 = time.perf_counter()
    deadline = None if time_limit is None else t0 + time_limit
    inputs = ProblemInputs.of(graph, devices, options)
    counts = list(worker_counts_) if worker_counts_ is not None else worker_counts(len(devices))
    # the tables of an earlier plain search of the same problem (problem_cache; not with measured costs)
    path = (algorithm, SCALE_ABOVE, SCALE_WORK, MAX_TABLE_BYTES, MAX_ELIMINATION_WORK)
    key = problem_cache.problem_key(inputs, devices, options, counts, path) if costs is None else None
    kept = problem_cache.get(key) if key is not None else None
    problem = kept.problem if kept is not None else make_problem(graph, devices, options, inputs)
    entry, choice = kept, None   # the problem_cache entry this search's plan is checked with, and its choice
    scale = kept is None and algorithm == "elimination" and search_scale.symmetric(devices, problem, counts, costs)
    enumerated = False   # every aligned block's configurations are the problem's enumeration
    if scale:   # each partition once: is every aligned block worth searching directly?
        # on a small machine, every aligned block's configurations, which the plain path then
        # searches, counted directly (the first-block enumeration and then that one took twice
        # as long: Inception-v3 on 16 devices ~1.2-1.7 ms more)
        enumerated = len(devices) <= ENUMERATE_FIRST and _enumerate(problem, devices, counts)
        if enumerated:
            aligned = _configurations(problem, graph)
        else:
            problem.enumerate(np.asarray(counts, dtype=np.int32), first_block_only=True)
            aligned = _aligned_configurations(problem, len(graph.ops), len(devices))
        scale = sum(aligned) > SCALE_ABOVE or sum(float(c) ** 3 for c in aligned) > SCALE_WORK
        if scale and enumerated:
            problem.enumerate(np.asarray(counts, dtype=np.int32), first_block_only=True)
    profiled = 0
    if scale:
        stages = search_scale.Stages(report, deadline, start=t0)
        memory_stage = None if mem_limit is None or pareto else MemoryStage(graph, devices, options, costs,
                                                                            mem_limit, limit,
                                                                            advise_recompute=not recompute)
        try:
            result = search_scale.search_symmetric(
                graph, devices, options, problem, costs, limit, stages,
                live=lambda p, label, f: _run_live(p, label, f, report), memory=memory_stage)
        except (SearchError, search_memory.PlanDoesNotFitError) as err:   # nothing fits without recomputation
            eq1 = getattr(err, "eq1_configs", None)
            if not recompute or eq1 is None:
                raise
            t = time.perf_counter()
            recomputed = _recompute_to_fit(memory_stage.plan_of(eq1), graph, devices, options, costs, mem_limit)
            if recomputed is None:
                raise
            timings.update(stages.timings)
            timings["recomputation (the Eq. 1 plan and the cheapest baselines)"] = time.perf_counter() - t
            recomputed.search_stats.update(algorithm=algorithm, timings=timings, total_seconds=sum(timings.values()),
                                           worker_counts=counts, objective="eq1")
            return recomputed
        timings.update(stages.timings)
        searched_cost, stats = result.cost, result.stats
        stats.update(exact=result.exact, lower_bound=result.lower_bound)
        if result.memory is not None:
            stats["memory"] = result.memory
        elif result.fits:   # its memory plan was checked by the staged search: _fit_memory need not again
            stats["memory"] = {"exact": True, "constrained": False, "least_budget": float(mem_limit.min())}
        chosen = result.chosen
        rows = []
        for i in range(len(graph.ops)):
            dev = chosen.devices(i)[0]
            rows.append((tuple(chosen.deg[i][0].tolist()), tuple(dev[dev >= 0].tolist()),
                         tuple(chosen.red[i][0].tolist())))
        ncfg = _configurations(problem, graph)   # the partitions, enumerated once
        if result.memory is not None and not result.memory["exact"]:
            _warn_memory(result.memory, searched_cost)
        elif result.memory is not None and not result.exact:
            _warn_first_devices_memory(len(devices))
        elif not result.exact:
            _warn_scale(result, searched_cost, len(graph.ops))
    else:
        if kept is not None:
            t = stage("enumerate configurations, build cost tables: kept from an earlier search of the same problem",
                      t0)
        else:
            if not enumerated:
                _enumerate(problem, devices, counts)
            first_devices = algorithm == "elimination" and _too_large(_configurations(problem, graph), graph)
            if first_devices:
                # devices not all interchangeable, and too many configurations to search on every
                # block: each partition on the first devices only, with a warning
                problem.enumerate(np.asarray(counts, dtype=np.int32), first_block_only=True)
                if _too_large(_configurations(problem, graph), graph):
                    raise SearchError(f"{len(devices)} devices: even with each partition on the first devices alone "
                                      f"the search would need more than {MAX_TABLE_BYTES / 2**30:.0f} GiB of cost "
                                      f"tables or {MAX_ELIMINATION_WORK:.0e} min-plus steps; pass worker_counts_ with "
                                      f"fewer worker counts")
                _warn_first_devices(len(devices))
            t = stage("enumerate configurations", t0)
            _run_live(problem, "building cost tables", problem.build_tables, report)
            t = stage("build cost tables (t_c, t_s, t_x)", t)
            if key is not None and not first_devices:   # (that case warns again on every search)
                entry = problem_cache.put(key, problem)
        profiled = apply_profile(problem, graph, devices, costs) if costs is not None else 0
        if costs is not None:
            t = stage(f"apply measured costs ({profiled} shards)", t)
        # an earlier search's result on the kept problem (its tables, this algorithm and bound: the same)
        found = entry.optimum(algorithm, limit) if entry is not None else None
        label = f"{algorithm} search" + (": kept from an earlier search of the same problem" if found else "")
        if found is None:
            try:
                found = _run_live(problem, f"{algorithm} search (eliminations)",
                                  lambda: problem.search(algorithm, limit), report)
            except RuntimeError as exc:
                raise SearchError(str(exc)) from None
            if entry is not None:
                entry.keep_optimum(algorithm, limit, found)
        choice, searched_cost, stats = found
        stage(label, t)
        if not stats["exact"]:
            _warn_gap(stats, searched_cost, limit)
        rows, ncfg = entry.chosen_rows(choice, _chosen_rows) if entry is not None else _chosen_rows(problem, choice)
    configs = _op_configs(graph, rows)
    stats = dict(stats, algorithm=algorithm, searched_cost=searched_cost, timings=timings,
                 total_seconds=sum(timings.values()), configurations=int(sum(ncfg)),
                 max_configurations=int(max(ncfg)), worker_counts=counts, profiled_shards=profiled,
                 kept_tables=kept is not None)
    plan = Plan(graph, devices, configs, options, name="searched", search_stats=dict(stats, objective="eq1"),
                costs=costs)
    if mem_limit is not None or pareto:
        t = time.perf_counter()
        plan = _fit_memory(plan, problem, graph, devices, options, costs, mem_limit, limit, scale, pareto,
                           recompute, entry if choice is not None else None, choice)
        stage("memory: check the plan's memory plan" if not plan.search_stats.get("memory", {}).get("solves")
              else "memory-constrained search", t)
        if pareto:
            return plan.search_stats.pop("front")
        if plan.search_stats["memory"].get("recompute"):   # the plan its recomputation was chosen for, as it is
            return plan
    if objective == "simulate":
        t = time.perf_counter()
        never_fit = plan.search_stats.get("memory", {}).get("baselines_over_budget", ())
        # (the staged search's memory check lowered the plan as the simulator does: replayed as it is)
        seed_graph = memory_stage.task_graph(plan) if scale and memory_stage is not None else None
        plan = objective_module.choose(plan, costs, report, fits=fits, never_fit=never_fit, seed_graph=seed_graph)
        timings["simulated objective"] = time.perf_counter() - t
    if refine == "simulate":
        t = time.perf_counter()
        plan = _refine_by_simulation(plan, problem, refine_steps, refine_seed, costs, fits)
        stage(f"refine under the simulator ({refine_steps} proposals)", t)
        plan.search_stats["timings"] = timings
    return plan


def _plan_of(problem, graph: Graph, devices: DeviceGraph, options: CostOptions, costs, choice, stats) -> Plan:
    """The Plan giving every op the configuration ``choice[op.index]`` of the problem's enumeration."""
    configs = _op_configs(graph, _chosen_rows(problem, choice)[0])
    return Plan(graph, devices, configs, options, name="searched", search_stats=dict(stats), costs=costs)


RECOMPUTE_BASELINES = 2   # baselines tried with recomputation after the Eq. 1 optimum (each: a few lowerings)


def _recompute_to_fit(plan: Plan, graph: Graph, devices: DeviceGraph, options: CostOptions, costs,
                      limit: np.ndarray) -> Plan | None:
    """The first of the Eq. 1 optimum, the RECOMPUTE_BASELINES cheapest baselines and the layouts
    the graph's builder registered (strategies.layout_baselines: Megatron-LM's for sw.models.llama
    and gpt graphs) that fits ``limit`` with recomputation (sw.recompute_plan, a greedy), with
    its choice in ``search_stats["memory"]["recompute"]``; None when none does."""
    from shardwise.iteration.recompute_plan import recompute_plan

    budget = {d: int(b) for d, b in enumerate(limit)}
    others = sorted(baselines(graph, devices, options), key=lambda p: p.cost)[:RECOMPUTE_BASELINES]
    others += layout_baselines(graph, devices, options)
    for candidate in [plan] + others:
        candidate.costs = costs
        rp = recompute_plan(candidate, budget, costs=costs)
        if rp.fits:
            candidate.search_stats = dict(plan.search_stats, searched_cost=candidate.cost)
            candidate.search_stats["memory"] = {
                "exact": False, "constrained": False, "least_budget": float(limit.min()),
                "recompute": {"plan": candidate.name, "ops": list(rp.ops), "method": rp.method,
                              "added_seconds": rp.added_time, "evaluations": rp.evaluations,
                              "peak_bytes": rp.peak_bytes, "unrecomputed_peak": rp.unrecomputed_peak}}
            return candidate
    return None


def _fit_memory(plan: Plan, problem, graph: Graph, devices: DeviceGraph, options: CostOptions, costs, limit,
                max_evaluations: float, scale: bool, pareto: bool, recompute: bool = False, kept=None,
                choice=None) -> Plan:
    """The Eq. 1 optimum if its memory plan fits ``limit``, else the optimum under the memory
    constraint (search_memory), or with ``recompute`` a plan that fits with recomputation
    (_recompute_to_fit) where none fits without or where its Eq. 1 time plus the simulated
    recomputes' is less; with ``pareto``, the front in ``search_stats["front"]``.  ``kept``,
    ``choice``: the problem_cache entry ``plan`` was searched on and its configuration indices
    there (the buffer totals of its memory check, search_memory.fits)."""
    if scale and "memory" in plan.search_stats and not pareto:   # the staged search found it under memory
        return plan
    # (the memory check lowers the plan on the search's problem: its graph, devices and options)
    if limit is not None and search_memory.fits(plan, limit, kept, choice, problem) and not pareto:
        plan.search_stats["memory"] = {"exact": True, "constrained": False, "least_budget": float(limit.min())}
        return plan
    if scale and pareto:
        raise SearchError(f"pareto=True is not available on {len(devices)} devices, where the search goes in "
                          f"stages; ask for one plan (pareto=False), which fits every device's memory")
    if scale:   # the time limit stopped the staged search before it could search under memory
        raise SearchError(f"the plan found on {len(devices)} devices before the time limit ran out does not fit "
                          f"every device's memory; a larger time_limit (or none) lets the search find one that "
                          f"fits")
    tables = search_memory.Tables(problem, graph, search_threads(options))
    base = dict(plan.search_stats)

    def to_plan(choice):
        return _plan_of(problem, graph, devices, options, costs, choice, base)

    starts = [c for c in (_choice_of(problem, graph, b) for b in baselines(graph, devices, options)) if c]
    if limit is not None and not search_memory.fits(plan, limit, kept, choice, problem):
        recomputed = _recompute_to_fit(plan, graph, devices, options, costs, limit) if recompute else None
        try:
            found = search_memory.fitting(tables, limit, to_plan, max_evaluations, starts=starts)
        except search_memory.UnprovenError as err:   # none found, none proven: name the nearest miss
            if recomputed is None:
                raise search_memory.does_not_fit(devices, tables, limit, max_evaluations, "", starts,
                                                 unproven=err.solves) from err
            found = None
        except SearchError:   # footprints fit, memory plans do not: recomputation may still
            if recomputed is None:
                raise
            found = None
        if found is None:
            if recomputed is not None:
                return recomputed
            raise search_memory.does_not_fit(devices, tables, limit, max_evaluations, "", starts)
        if recomputed is not None and \
                recomputed.cost + recomputed.search_stats["memory"]["recompute"]["added_seconds"] < found[0].cost:
            return recomputed
        plan, info = found
        plan.search_stats["memory"] = dict(info, constrained=True)
        plan.search_stats["searched_cost"] = plan.cost
        if not info["exact"]:
            _warn_memory(info, plan.cost)
    else:
        plan.search_stats["memory"] = {"exact": True, "constrained": False,
                                       "least_budget": None if limit is None else float(limit.min())}
    if pareto:
        plan.search_stats["front"] = search_memory.front(tables, limit, plan, to_plan, max_evaluations,
                                                         starts=starts)
    return plan


def _choice_of(problem, graph: Graph, plan: Plan) -> list[int] | None:
    """The enumeration index of every op's configuration in ``plan`` (None if one is not enumerated)."""
    choice = []
    for op in graph.ops:
        cfg = plan.configs[op.name]
        deg, dev = problem.configs(op.index)
        red = problem.reductions(op.index)
        want = np.ones(deg.shape[1], dtype=deg.dtype)
        want[:len(cfg.degrees)] = cfg.degrees
        hits = [k for k in range(len(deg)) if (deg[k] == want).all()
                and tuple(int(x) for x in dev[k] if x >= 0) == tuple(cfg.devices)
                and reduction_config(op, red[k]) == cfg.reduction]
        if not hits:
            return None
        choice.append(hits[0])
    return choice


def _warn_memory(info: dict, cost: float) -> None:
    import warnings

    bound = info["lower_bound"]
    above = (f"it is at most {100 * (cost / bound - 1):.2f}% above the optimum (lower bound {bound:.6g} s, plan "
             f"{cost:.6g} s)" if bound > 0 else f"it may be above the optimum (plan {cost:.6g} s, no lower bound yet)")
    why = []
    if info.get("timed_out"):
        why.append(f"the time limit stopped the search after {info['solves']} elimination searches")
    if info["tightened"]:
        why.append("its memory plan needed more than the footprint the search constrains, so the budgets were "
                   "lowered")
    if info.get("restricted"):
        why.append(f"it comes from the {info['restricted']} (searching every partition on the first devices was "
                   f"beyond the search's work limit)")
    if not why:
        why.append(f"{info['solves']} elimination searches did not prove it optimal")
    warnings.warn(f"memory-constrained search: the plan returned fits every device, but {' and '.join(why)}; "
                  f"{above}", SearchWarning, stacklevel=4)


def _warn_first_devices_memory(ndev: int) -> None:
    import warnings

    warnings.warn(f"memory-constrained search on {ndev} devices: the plan returned fits every device and is the "
                  f"fastest with each partition on the first devices of the machine; placing partitions on other "
                  f"devices (as pipeline stages do) could need less memory and was not searched",
                  SearchWarning, stacklevel=3)


def _chosen_rows(problem, choice) -> tuple[list, list[int]]:
    """(rows, ncfg): per op i, the degrees, devices and reduction pair of its configuration
    choice[i] (tuples), and its number of configurations; only the chosen rows are copied out of
    the problem, in one call (Inception-v3 on 16 devices: every op's 161 rows took ~2.5 ms, a
    call per op ~2 ms)."""
    deg, dev, red, counts = (a.tolist() for a in problem.chosen(np.asarray(choice, np.int64)))
    rows = [(tuple(d), tuple(v[:k]), tuple(r)) for d, v, r, (k, _) in zip(deg, dev, red, counts)]
    return rows, [n for _, n in counts]


def _op_configs(graph: Graph, rows: Sequence[tuple]) -> dict[str, OpConfig]:
    """Every op's OpConfig from its row (degrees, devices, reduction pair), as _chosen_rows
    lists them (degrees past the op's rank are ignored)."""
    configs = {}
    for op, (deg, dev, red) in zip(graph.ops, rows):
        rank = len(op.shape)
        configs[op.name] = OpConfig(dim_names(rank), deg[:rank], dev, reduction_config(op, red))
    return configs


def _configurations(problem, graph: Graph) -> list[int]:
    """Every op's number of configurations (ops in graph order, as the problem holds them)."""
    return problem.config_counts().tolist()


def _too_large(ncfg: list[int], graph: Graph) -> bool:
    """Would the plain search of ncfg configurations per op take more than MAX_TABLE_BYTES of
    transfer tables, or about MAX_ELIMINATION_WORK steps (an elimination costs about the cube of
    the configuration counts)?"""
    table_bytes = 8.0 * sum(ncfg[src] * ncfg[op.index] for op in graph.ops for src in op.inputs)
    return table_bytes > MAX_TABLE_BYTES or sum(float(c) ** 3 for c in ncfg) > MAX_ELIMINATION_WORK


def _warn_first_devices(ndev: int) -> None:
    import warnings

    warnings.warn(f"{ndev} devices that are not all interchangeable: searching every aligned block would take "
                  f"more than {MAX_TABLE_BYTES / 2**30:.0f} GiB of cost tables or about "
                  f"{MAX_ELIMINATION_WORK:.0e} min-plus steps, so each partition is placed on the first devices of "
                  f"the machine only, and the plan is the optimum over those placements", SearchWarning, stacklevel=3)


def _aligned_configurations(problem, nops: int, ndev: int) -> list[int]:
    """Configurations of each op on every aligned block, from the first-block enumeration: ndev / k
    blocks for each partition on k workers (Problem.workers: the counts without the device lists,
    which on 1,024 devices hold 10^8 entries)."""
    return [int((ndev // problem.workers(i)).sum()) for i in range(nops)]


def _warn_scale(result, cost: float, nops: int) -> None:
    """The staged search returned a plan it did not prove optimal: say so, how far from the optimum
    it can be, and what would help (more time only where the time limit was the reason)."""
    import warnings

    bound = result.lower_bound
    if bound > 0 and cost <= bound * (1 + NEGLIGIBLE_GAP):
        return   # proven within a millionth of the optimum: rounding of the bound, not a gap to report
    above = f"at most {100 * (cost / bound - 1):.2f}% above the optimum" if bound > 0 else "above the optimum"
    advice = "; a larger time_limit (or none) lets the search finish" if "time limit" in result.note else ""
    warnings.warn(f"search on {nops} ops: {result.note}; the plan returned is the best found, "
                  f"{above} (lower bound {bound:.6g} s, plan {cost:.6g} s){advice}", SearchWarning, stacklevel=3)


def _warn_gap(stats: dict, cost: float, limit: float) -> None:
    import warnings

    bound = stats["lower_bound"]
    above = f"at most {100 * (cost / bound - 1):.2f}% above the optimum" if bound > 0 else "above the optimum"
    warnings.warn(
        f"the graph left by node, edge and leaf elimination ({stats['residual_nodes']} ops, order width "
        f"{stats['residual_width']}) needs tables of {stats['residual_table']:.3g} entries to be solved "
        f"exactly, beyond max_evaluations={limit:.3g} (or the 2^27-entry table bound); the plan returned is the "
        f"best found, {above} (lower bound {bound:.6g} s, plan {cost:.6g} s); pass a larger max_evaluations "
        f"for the exact optimum", SearchWarning, stacklevel=3)


def _search_tofu(graph: Graph, devices: DeviceGraph, options: CostOptions, costs: ComputeCosts | None,
                 refine: str | None, report: Progress | None) -> Plan:
    """``algorithm="tofu"``: Tofu's partition over every device, reduction cuts included
    (partition-n-reduce configurations)."""
    from shardwise.planning.tofu import partition

    if refine is not None:
        raise ConfigError("refine='simulate' is not available with algorithm='tofu'")
    start = time.perf_counter()
    result = partition(graph, len(devices), reductions=True)
    if report:
        report("tofu partition (recursive CriticalDP)", time.perf_counter() - start)
    plan = result.to_plan(devices, options)
    plan.costs = costs
    plan.search_stats["timings"] = {"tofu partition": result.seconds}
    return plan


def _refine_by_simulation(seed_plan: Plan, problem, steps: int, seed: int, costs, fits=None) -> Plan:
    """Local search over configurations under the simulator, from the Eq. 1 optimum.

    A proposal changes one op to another of its enumerated configurations; it is
    accepted if it simulates faster, or otherwise with probability
    exp(-beta * relative slowdown) (Metropolis, as FlexFlow's MCMC); the best
    plan seen is returned, so the result is never slower than the seed."""
    import math
    import random

    from shardwise.iteration.simulate import simulate

    graph, devices = seed_plan.graph, seed_plan.devices
    rng = random.Random(seed)
    options = {op.name: (*problem.configs(op.index), problem.reductions(op.index)) for op in graph.ops}

    def evaluate(configs):
        p = Plan(graph, devices, configs, seed_plan.options, name="refined", costs=costs)
        return simulate(p, check_memory=False, costs=costs).iteration_time

    current = dict(seed_plan.configs)
    start_time = evaluate(current)
    current_time = best_time = start_time
    best = dict(current)
    beta = 20.0
    accepted = 0
    for _ in range(steps):
        op = graph.ops[rng.randrange(len(graph.ops))]
        deg, dev, red = options[op.name]
        k = rng.randrange(len(deg))
        proposal = dict(current)
        proposal[op.name] = OpConfig(dim_names(len(op.shape)), tuple(int(x) for x in deg[k]),
                                     tuple(int(x) for x in dev[k] if x >= 0), reduction_config(op, red[k]))
        if proposal[op.name] == current[op.name]:
            continue
        t = evaluate(proposal)
        if t < current_time or rng.random() < math.exp(-beta * (t - current_time) / current_time):
            current, current_time = proposal, t
            accepted += 1
            if t < best_time and (fits is None or fits(Plan(graph, devices, proposal, seed_plan.options))):
                best, best_time = dict(proposal), t
    stats = dict(seed_plan.search_stats, refine="simulate", refine_steps=steps, refine_accepted=accepted,
                 simulated_seed=start_time, simulated_refined=best_time,
                 refine_gain=start_time / best_time if best_time > 0 else 1.0)
    return Plan(graph, devices, best, seed_plan.options, name="refined", search_stats=stats, costs=costs)
