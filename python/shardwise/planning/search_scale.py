"""The search on machines of identical devices, at any scale (issue 16, point 2).

On 1,024 devices an op has about 10,000 configurations (300 partitions, each on
every aligned block of its worker count), so the cost tables of the plain search
would hold 10^8 entries per edge.  On a machine of identical devices in uniform
nodes (the presets) the search instead:

1. enumerates each partition once, on the first devices of the machine
   (``first_block_only``): blocks of one size are interchangeable, so a
   partition costs the same on any of them (same t_c and t_s) and only where
   it sits *relative* to its neighbours matters (step 6);
2. solves a *relaxation*: exact node costs, and per edge a lower bound of t_x
   that holds wherever the two configurations sit (csrc/cost/cost_bounds.c), cheap
   for every pair.  Its min-marginals (csrc/search/search_marginals.c) bound from below
   the cost of any plan that uses a given configuration;
3. finds a good plan quickly: the better of the exact search over the
   partitions of at most one node's worth of workers (64 at most) and the
   relaxation's own best strategy, costed exactly.  When that plan costs the
   relaxation's bound it is the optimum on every placement and is returned
   (the min-marginals, which only serve steps 4 and 6 and the memory stage, are
   then not computed: Problem.search checks it between the eliminations and
   their reverse pass);
4. drops every configuration whose min-marginal exceeds that plan's cost: no
   optimal plan uses it, on any devices;
5. searches the survivors exactly (the exact tables are small now): the
   optimum over partitions placed on the first devices;
6. proves no other placement does better: the relaxation again, now with each
   edge's exact least t_x over the relative placements of its two
   configurations where the relaxation's best strategy uses it, until that
   strategy costs at least the plan (one round only when the relaxation is above the
   exact bound: its bound is then mini-bucket's).  If the proof fails, the survivors are
   searched on every aligned block (still exact), or, when that is too large,
   the plan is returned with a warning giving the gap.

Every step but 3 keeps the optimum; the stages, their times and the counts of
configurations kept go to ``plan.search_stats["scale"]``.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from shardwise import _core
from shardwise.errors import SearchError
from shardwise.planning.search_memory import PlanDoesNotFitError
from shardwise.planning.costs import ProfileTable, apply_profile
from shardwise.machine.devices import DeviceGraph
from shardwise.graph import Graph
from shardwise.planning.problem import CostOptions, make_problem, search_threads
from shardwise.planning.scale_space import PRUNE_SLACK, Configs, full_space, set_configs

# the cap of the relaxation's marginals above the cost they serve to prune at: twice the pruning's
# slack (the plan's cost is summed in C and in Python, in other orders)
CAP_SLACK = 2 * PRUNE_SLACK

# the first plan: the exact search over partitions of at most a node's workers, and at most this many
FIRST_PLAN_WORKERS = 64


def symmetric(devices: DeviceGraph, problem: Any, counts: Sequence[int], costs: Any) -> bool:
    """Are all aligned blocks of every worker count interchangeable?  Identical devices in
    uniform nodes (``problem.node_size``), compute costs that do not depend on the device,
    and one node, or each count dividing the node size or a multiple of it (or having a
    single block)."""
    per, n = problem.node_size, len(devices)
    if per == 0 or not (costs is None or isinstance(costs, ProfileTable)):
        return False
    first = devices.devices[0]
    if any(d.flops != first.flops or d.mem_bandwidth != first.mem_bandwidth or d.flops_bf16 != first.flops_bf16
           or d.flops_fp16 != first.flops_fp16 for d in devices.devices):   # the half peaks: bf16 / fp16 plans
        return False
    return per == n or all(n // k == 1 or per % k == 0 or k % per == 0 for k in counts)


@dataclass
class Stages:
    """Stage timings, reported as they finish; the deadline stops the search between stages."""

    report: Callable[[str, float], None] | None
    deadline: float | None
    timings: dict[str, float] = field(default_factory=dict)
    start: float = field(default_factory=time.perf_counter)

    def done(self, name: str) -> None:
        now = time.perf_counter()
        self.timings[name] = now - self.start
        if self.report:
            self.report(name, now - self.start)
        self.start = now

    def out_of_time(self) -> bool:
        return self.deadline is not None and time.perf_counter() > self.deadline


@dataclass
class Result:
    chosen: Configs       # one configuration per op: the plan
    cost: float
    stats: dict[str, Any]
    exact: bool           # the optimum over every aligned block
    lower_bound: float
    note: str = ""        # why not exact, for the warning
    memory: dict[str, Any] | None = None   # how the memory-constrained steps found it (search_scale_memory)
    fits: bool = False    # its memory plan was checked and fits the memory stage's budget (not checked again)


def _exact_search(work: Any, graph, devices, costs, configs: Configs, limit: float):
    """The exact search over `configs` on problem `work` (its configurations are replaced):
    (the chosen configuration of each op, cost, stats)."""
    set_configs(work, configs)
    work.build_tables()
    if costs is not None:
        apply_profile(work, graph, devices, costs)
    choice, cost, stats = work.search("elimination", limit)
    return configs.subset([np.array([c]) for c in choice]), cost, stats


def _certify(relax: Any, node, edges, keep, cost: float, limit: float, stages: Stages, threads: int,
             rounds: int = 60):
    """A lower bound over every aligned placement of strategies of the partitions `keep`
    (``edges``: the relaxation's (producer, consumer) pairs, whose tables are read for `keep` alone):
    the relaxation whose edge entries become the exact least t_x over relative placements
    (Problem.least_transfer) wherever its best strategy uses them, until that strategy
    costs at least `cost` (proven) or uses exact entries only (not proven)."""
    snode = [n[k] for n, k in zip(node, keep)]
    sedges = [(a, b, relax.edge_table(e, keep[a], keep[b])[0]) for e, (a, b) in enumerate(edges)]
    exact = [np.zeros(t.shape, dtype=bool) for _, _, t in sedges]
    bound = -np.inf
    for _ in range(rounds):
        choice, _, st = _core.search_tables(snode, sedges, "elimination", limit, False, threads)
        bound = st["lower_bound"]
        if bound >= cost * (1 - PRUNE_SLACK):
            return bound, True
        if not st["exact"]:
            # the relaxation's residual graph is above the exact bound, so its bound is
            # mini-bucket elimination's, which tightened entries along one strategy raise by
            # little per round (DenseNet-121 on 16 devices: 1e-4 of a 17% gap per round of a
            # second or more): stop with the bound found, not proven
            break
        changed = False
        for e, (a, b, t) in enumerate(sedges):
            x, y = choice[a], choice[b]
            if not exact[e][x, y]:
                t[x, y] = max(t[x, y], relax.least_transfer(e, int(keep[a][x]), int(keep[b][y])))
                exact[e][x, y] = changed = True
        if not changed or stages.out_of_time():
            break
    return bound, False


def search_symmetric(graph: Graph, devices: DeviceGraph, options: CostOptions, relax: Any, costs: Any,
                     limit: float, stages: Stages, live: Callable = lambda p, label, f: f(),
                     memory: Any = None) -> Result:
    """The search above on problem `relax`, whose configurations are the partitions on the
    first devices (Problem.enumerate(counts, first_block_only=True)).  ``memory``: a
    search_scale_memory.MemoryStage; when the optimum found does not fit its budget, the
    fastest plan that fits instead (search_scale_memory)."""
    nops = len(graph.ops)
    live(relax, "relaxation tables", lambda: relax.build_tables(bounds=True))
    if costs is not None:
        apply_profile(relax, graph, devices, costs)
    canonical = Configs.of(relax, nops)
    node = [sum(relax.node_costs(i)[:2]) for i in range(nops)]
    edges = [(src, dst) for src, dst, _ in relax.edges()]   # their tables: the survivors' rows only (_certify)
    stats: dict[str, Any] = {"partitions": int(sum(len(n) for n in node))}
    stages.done(f"relaxation tables ({stats['partitions']} partitions, first devices)")

    threads = search_threads(options)
    # the relaxation: its bound, its best strategy and the min-marginals; the marginals (a reverse
    # pass costing about twice the eliminations) are skipped when that strategy, costed exactly
    # where it sits, already costs the bound: then it is the optimum and nothing is pruned.
    # Otherwise they serve the pruning at the first plan's cost, at most that strategy's: capped
    # there (CAP_SLACK above it), the reverse pass drops everything above and reads the few
    # entries left (GPT-2 small on 1,024 GPUs: 19 s to about 1 s)
    rchoice, _, rstats, marg = live(relax, "relaxation (eliminations, then min-marginals)",
                                    lambda: relax.search("elimination", limit, True, PRUNE_SLACK, CAP_SLACK))
    lb = rstats["lower_bound"]
    stats["relaxation_bound"] = lb
    stages.done(f"relaxation (bound {lb:.6g} s" + (", its plan costs it)" if marg is None else ") and its min-marginals"))
    kept_marginals = [marg, float(rstats["marginals_cap"])]

    def marginals(at_least: float) -> list:
        """The relaxation's min-marginals, exact up to ``at_least`` at least: computed again (capped
        there) if the search above skipped them or capped them lower."""
        if kept_marginals[0] is None or kept_marginals[1] < at_least:
            _, _, again, m = live(relax, "relaxation's min-marginals (eliminations, then reverse)",
                                  lambda: relax.search("elimination", limit, True, cap=at_least * (1 + CAP_SLACK)))
            kept_marginals[:] = [m, float(again["marginals_cap"])]
            stages.done("relaxation's min-marginals")
        return kept_marginals[0]

    # a plan: the better of the exact search over partitions of at most one node's
    # workers and the relaxation's own best strategy, costed exactly (one more problem,
    # whose configurations each exact search replaces: one copy of the bandwidths)
    work = make_problem(graph, devices, options)
    per = min(relax.node_size or len(devices), FIRST_PLAN_WORKERS)
    small = [np.flatnonzero(w <= per) for w in canonical.workers]
    candidates = [canonical.subset(small), canonical.subset([np.array([c]) for c in rchoice])]
    best = None
    for configs in candidates:
        found = _exact_search(work, graph, devices, costs, configs, limit)
        if best is None or found[1] < best[1]:
            best = found
    chosen, ub, sstats = best

    def constrained() -> Result:
        from shardwise.planning.search_scale_memory import Staged

        # the relaxation's tables are read no more (its marginals are in hand): their memory goes
        # back before the constrained search builds its own and lowers its plans (a 32-layer
        # Llama on 1,024 GPUs: 174 MB of bound tables)
        relax.release_tables()
        # the marginals there are (none if the relaxation was tight: nothing to prune by them)
        staged = Staged(work, canonical, kept_marginals[0], per, stats, stages, marginals_cap=kept_marginals[1])
        try:
            mchosen, mcost, mstats, mexact, mbound = memory.search(staged)
        except (SearchError, PlanDoesNotFitError) as err:   # nothing fits: the Eq. 1 plan in hand goes
            err.eq1_configs = chosen   # with the error, for sw.search(recompute=True) to try recomputation on
            raise
        info = mstats.pop("memory")
        stages.done(f"memory-constrained search ({info['placements']}: " + ("exact)" if mexact else "not proven)"))
        everywhere = mexact and info["placements"] == "every aligned block"   # exact: over every block
        return Result(mchosen, mcost, {"exact": everywhere, "scale": mstats}, everywhere, mbound,
                      note="" if mexact else "the memory-constrained search did not prove its plan optimal",
                      memory=info)

    stats["first_plan_cost"] = ub
    stages.done(f"first plan ({ub:.6g} s)")
    if stages.out_of_time() and memory is not None and not memory.fits(chosen, work):
        return constrained()   # out of time, but a plan that fits is owed: the constrained search stops at one
    if stages.out_of_time():
        return Result(chosen, ub, dict(sstats, scale=stats), False, lb,
                      note=f"the time limit ran out after the first plan (partitions of at most {per} workers)")

    if ub <= lb * (1 + PRUNE_SLACK):
        # the plan costs the relaxation's bound, below which no plan goes on any placement: it is
        # the optimum, with nothing left to prune, search or prove (ResNet-50 on 1,024 devices)
        if memory is not None and not memory.fits(chosen, work):
            return constrained()   # the Eq. 1 optimum does not fit: search under memory
        stats.update(relaxation_tight=True, canonical_cost=ub, placement_bound=lb, placements_proven=True)
        stages.done("the first plan costs the relaxation's bound: the optimum on every placement")
        return Result(chosen, ub, dict(sstats, scale=stats), True, ub, fits=memory is not None)

    # drop what no optimal plan uses, search the rest exactly
    survivors = [np.flatnonzero(m <= ub * (1 + PRUNE_SLACK)) for m in marginals(ub * (1 + PRUNE_SLACK))]
    stats.update(survivors=int(sum(len(s) for s in survivors)), survivors_max=int(max(len(s) for s in survivors)))
    found = _exact_search(work, graph, devices, costs, canonical.subset(survivors), limit)
    if found[1] <= ub:
        chosen, ub, sstats = found
    stats["canonical_cost"] = ub
    stages.done(f"exact search of {stats['survivors']} partitions left")

    if memory is not None and not memory.fits(chosen, work):   # the Eq. 1 optimum does not fit: search under memory
        return constrained()
    fits = memory is not None   # (checked just now)
    if stages.out_of_time():
        return Result(chosen, ub, dict(sstats, scale=stats), False, lb,
                      note="the time limit ran out before other placements were checked", fits=fits)

    # other placements: prove them no better, or search them
    bound, proven = _certify(relax, node, edges, survivors, ub, limit, stages, threads)
    stats.update(placement_bound=bound, placements_proven=proven)
    stages.done("placements: " + ("proven no better" if proven else f"bound {bound:.6g} s"))
    if proven:   # exact, unless variable elimination of the survivors gave up (its own warning case)
        return Result(chosen, ub, dict(sstats, scale=stats), sstats["exact"], ub if sstats["exact"] else lb,
                      note="" if sstats["exact"] else "the survivors' residual graph was above the exact bound",
                      fits=fits)
    full = full_space(canonical, survivors, len(devices))
    if full is None or stages.out_of_time():
        return Result(chosen, ub, dict(sstats, scale=stats), False, max(lb, bound),
                      note="other placements of the same partitions could lower Eq. 1 and are too many to search",
                      fits=fits)
    chosen, cost, sstats = _exact_search(work, graph, devices, costs, full, limit)
    stats["full_space_configurations"] = int(sum(len(d) for d in full.deg))
    stages.done(f"exact search of the partitions left on every block ({stats['full_space_configurations']})")
    if memory is not None and not memory.fits(chosen, work):
        return constrained()
    return Result(chosen, cost, dict(sstats, scale=stats), sstats["exact"], cost if sstats["exact"] else lb,
                  note="" if sstats["exact"] else "the survivors' residual graph was above the exact bound",
                  fits=memory is not None)
