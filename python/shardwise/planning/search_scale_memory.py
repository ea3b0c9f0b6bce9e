"""The staged search of large machines under memory: the fastest plan that fits every device.

The staged search (:mod:`shardwise.planning.search_scale`) finds the Eq. 1 optimum of a large
machine of identical devices by pruning configurations whose min-marginal (a lower bound of
every plan using them, over every placement) exceeds the cost of a plan in hand.  That pruning
stays valid under a memory constraint when the plan in hand *fits*: the fastest plan that
fits costs no more than it, so it uses no configuration pruned at its cost.  When the Eq. 1
optimum on the first devices does not fit (its memory plan is checked), this module:

1. finds plans that fit on the first devices: the baselines (data, model, OWT parallelism)
   whose memory plan fits, and the memory-constrained search
   (:mod:`shardwise.planning.search_memory`) over two small sets: the partitions of at most
   one node's workers, and each op's partitions over the most devices it can use; the
   cheapest is the threshold.  When none fits nothing is pruned;
2. drops every configuration whose min-marginal exceeds that threshold, and, when step 3 can
   run its full count of searches within SOLVE_WORK, every one whose Lagrangian min-marginal
   (Eq. 1 plus priced bytes above the budget, a lower bound of the cost of every plan within
   the budget using it, on the first devices) does;
3. runs the memory-constrained search over the survivors, each partition on the first devices:
   exact over those placements (branch and bound, then the memory plan checked), and the
   survivors are pruned again at the cost it finds.  When even its floor of elimination
   searches over them is beyond SOLVE_WORK (:func:`step3_affordable`) and step 1 found a plan,
   it is skipped: the plan is step 1's cheapest (``search_stats["memory"]["restricted"]``);
4. when the survivors on every aligned block are few enough (``scale_space.FULL_SPACE_LIMIT``
   configurations), runs the memory-constrained search over them too, seeded with step 3's
   plan: exact over every aligned block, the space the search of smaller machines covers.
   Otherwise the plan is the optimum over partitions on the first devices, and
   ``search_stats["memory"]["placements"]`` says so.  (Placing partitions elsewhere can only
   help memory by spreading ops over devices, as pipeline stages do.)

When step 3 finds no plan, none fits on the first devices, and :class:`PlanDoesNotFitError`
names the smallest shortfall seen (device, bytes needed and available) and what would help.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardwise.errors import SearchError
from shardwise.graph import Graph
from shardwise.machine.devices import DeviceGraph
from shardwise.plan import OpConfig, Plan, reduction_config
from shardwise.planning import search_memory
from shardwise.planning.costs import apply_profile
from shardwise.planning.problem import CostOptions, dim_names, search_threads
from shardwise.planning.scale_space import PRUNE_SLACK, full_space, set_configs
from shardwise.planning.strategies import baselines

# step 1 wants a plan that fits, not a proof: each restricted search stops after this many
# elimination searches (the priced-memory start takes up to search_memory.PENALTY_ROUNDS)
FIRST_FIT_SOLVES = 40
# the work one constrained search of steps 1 and 3 may do: elimination searches x the
# configurations each searches (each costs about in proportion to them).  A search over few
# configurations keeps its full count (search_memory.MAX_SOLVES, FIRST_FIT_SOLVES); one over the
# 156,000 partitions of a 32-layer Llama on 64 GPUs runs 31, about half a second each here,
# where 120 took two minutes without improving on step 1's plan or proving it.  A count, not a
# clock: the same inputs give the same plan on any machine.  The plan then says it is not proven
# (search_stats["memory"]["exact"] False, with the bound reached).
SOLVE_WORK = 5_000_000
# no fewer than this (the Lagrangian bound at the root of the branch and bound takes
# search_memory.ROOT_STEPS of them, the priced start that finds a first plan up to PENALTY_ROUNDS)
MIN_SOLVES = search_memory.ROOT_STEPS + 5


def solves_for(configurations: int, most: int) -> int:
    """Elimination searches a constrained search over ``configurations`` may run: ``most``, or
    fewer where SOLVE_WORK runs out first, never fewer than MIN_SOLVES."""
    return int(min(most, max(MIN_SOLVES, SOLVE_WORK // max(configurations, 1))))


@dataclass
class Staged:
    """What the staged search has when its optimum on the first devices does not fit."""

    work: Any             # a Problem whose configurations each search replaces
    canonical: Any        # scale_space.Configs: every partition on the first devices
    marginals: list | None   # per op, the relaxation's min-marginal of each canonical partition
    #                          (None: not computed, nothing is pruned by them)
    node_workers: int     # the first plan's partitions use at most this many workers
    stats: dict           # the staged search's statistics so far
    stages: Any = None    # search_scale.Stages: each step's time is reported
    marginals_cap: float = float("inf")   # marginals above it are infinite: not known, so not pruned


class MemoryStage:
    """The memory-constrained steps of the staged search on one graph, machine and budget."""

    def __init__(self, graph: Graph, devices: DeviceGraph, options: CostOptions, costs: Any,
                 budget: np.ndarray, max_evaluations: float, advise_recompute: bool = True) -> None:
        self.graph, self.devices, self.options, self.costs = graph, devices, options, costs
        self.budget, self.max_evaluations = budget, max_evaluations
        # a no-fit error advises sw.search(..., recompute=True) unless the search was asked for it
        self.advise_recompute = advise_recompute
        # each plan's arenas by its configurations: steps 1, 3 and 4 often end on the same plan,
        # whose memory plan (a third of a second for a 32-layer Llama on 64 GPUs) is made once;
        # with the task graph it was planned on, which the simulated objective replays the plan
        # returned on instead of lowering it again (on 256 GPUs half a second)
        self._arenas: dict[tuple, tuple[np.ndarray, Any]] = {}

    def _key(self, plan: Plan) -> tuple:
        return tuple(plan.configs[op.name] for op in self.graph.ops)

    def arenas(self, plan: Plan) -> np.ndarray:
        """search_memory.arenas of ``plan``, made once per distinct plan of this stage."""
        key = self._key(plan)
        if key not in self._arenas:
            self._arenas[key] = search_memory.arenas_lowered(plan)
        return self._arenas[key][0]

    def task_graph(self, plan: Plan) -> Any:
        """The task graph (iteration.lower.TaskGraph, rings as the simulator lowers them) of
        ``plan``, lowered for a memory plan of this stage, or None when none was."""
        from shardwise.iteration.lower import TaskGraph

        found = self._arenas.get(self._key(plan))
        return None if found is None else TaskGraph(plan=plan, handle=found[1].handle, rings=found[1].rings)

    def plan_of(self, chosen: Any) -> Plan:
        """The Plan of a Configs holding one configuration per op."""
        configs = {}
        for op in self.graph.ops:
            i = op.index
            dev = chosen.devices(i)[0]
            configs[op.name] = OpConfig(dim_names(len(op.shape)), tuple(chosen.deg[i][0].tolist()),
                                        tuple(dev[dev >= 0].tolist()), reduction_config(op, chosen.red[i][0]))
        return Plan(self.graph, self.devices, configs, self.options, name="searched", costs=self.costs)

    def fits(self, chosen: Any, work: Any = None) -> bool:
        """Does the memory plan of ``chosen`` (one configuration per op) fit the budget?  ``work``:
        a problem to cost it on first (its configurations replaced): a footprint above the budget
        on some device, a lower bound of the arena there, settles it without the memory plan (the
        Eq. 1 optimum of a 32-layer Llama on 256 GPUs: 0.03 s instead of 0.8)."""
        if work is not None and self._footprint_over(work, chosen):
            return False
        return search_memory.fits(self.plan_of(chosen), self.budget)

    def _footprint_over(self, work: Any, chosen: Any) -> bool:
        """Is the footprint of ``chosen`` (one configuration per op, costed on ``work``), a lower
        bound of its arenas, above the budget on some device?  Then it never fits."""
        return bool((self._tables(work, chosen).footprint([0] * len(self.graph.ops)) > self.budget).any())

    def _tables(self, work: Any, configs: Any) -> search_memory.Tables:
        """Exact Eq. 1 and footprint tables of ``configs`` (set on ``work``)."""
        set_configs(work, configs)
        work.build_tables()
        if self.costs is not None:
            apply_profile(work, self.graph, self.devices, self.costs)
        return search_memory.Tables(work, self.graph, search_threads(self.options))

    def _fitting(self, tables: search_memory.Tables, configs: Any, starts: Sequence[Sequence[int]],
                 max_solves: int | None = None, deadline: float | None = None):
        """search_memory.fitting over ``configs``: (plan, info, choice) or None when none fits."""
        made: dict[tuple, Any] = {}

        def to_plan(choice):
            chosen = configs.subset([np.array([c]) for c in choice])
            plan = self.plan_of(chosen)
            made[id(plan)] = [int(c) for c in choice]
            return plan

        found = search_memory.fitting(tables, self.budget, to_plan, self.max_evaluations, max_solves, starts=starts,
                                      deadline=deadline, arena_of=self.arenas)
        if found is None:
            return None
        plan, info = found
        return plan, info, made[id(plan)]

    def search(self, s: Staged) -> tuple[Any, float, dict, bool, float]:
        """Steps 1-4: (the chosen Configs, its Eq. 1, stats, exact over the placements searched,
        a lower bound of the optimum over them)."""

        canonical, ndev = s.canonical, len(self.devices)
        stats = dict(s.stats)
        deadline = s.stages.deadline if s.stages is not None else None   # sw.search(time_limit=)
        # 1. plans that fit on the first devices: the cheapest gives the threshold
        fitting_plans: list[tuple[float, list[int], str]] = []   # (Eq. 1, canonical choice, what)
        misses: list[list[int]] = []   # every baseline's canonical choice: near misses when nothing fits
        over: list[str] = []   # baselines whose footprint alone exceeds the budget (never fit)
        for base in baselines(self.graph, self.devices, self.options):
            choice = _canonical_choice(canonical, self.graph, base)
            if choice is not None:
                misses.append(choice)
                one = canonical.subset([np.array([c]) for c in choice])
                if self._footprint_over(s.work, one):
                    over.append(base.name)
                    continue   # no memory plan made
                plan = self.plan_of(one)
                if search_memory.fits(plan, self.budget):
                    fitting_plans.append((plan.cost, choice, base.name))
        # two restricted memory-constrained searches: the partitions of at most a node's workers
        # (fast links), and each op's partitions over the most devices it can use (least memory)
        restricted = [([np.flatnonzero(w <= s.node_workers) for w in canonical.workers],
                       f"memory-constrained search over partitions of at most {s.node_workers} workers"),
                      ([np.flatnonzero(w == w.max()) for w in canonical.workers],
                       "memory-constrained search over partitions on the most devices each op can use")]
        # every partition on the first devices, costed once when step 3 may search them all: the
        # restricted searches and step 3 read rows and blocks of these tables (Tables.subset)
        # instead of tables built again (a 32-layer Llama on 256 GPUs: 5 s for the second
        # restricted search's own).  Where step 3 could not (step3_affordable), each restricted
        # search builds its own, a fraction of the whole (a Llama on 1,024 GPUs: 21 s of tables)
        whole = self._tables(s.work, canonical) if step3_affordable(_count(canonical)) else None
        found_info: dict[str, dict] = {}   # each restricted search's info, by what it searched
        for keep, what in restricted:
            if deadline is not None and time.perf_counter() > deadline:
                break   # the threshold only speeds step 3 up; out of time, step 3 finds a plan itself
            sub = canonical.subset(keep)
            try:
                found = self._fitting(whole.subset(keep) if whole is not None else self._tables(s.work, sub), sub, [],
                                      deadline=deadline, max_solves=solves_for(_count(sub), FIRST_FIT_SOLVES))
            except SearchError:   # footprints fit but no memory plan did: no threshold from here
                found = None
            if found is not None:
                fitting_plans.append((found[0].cost, [int(keep[i][c]) for i, c in enumerate(found[2])], what))
                found_info[what] = found[1]
        threshold = min((f[0] for f in fitting_plans), default=np.inf)
        s.stages and s.stages.done(f"memory: plans that fit on the first devices ({len(fitting_plans)}, "
                                   f"cheapest {threshold:.6g} s)")
        info_first = {"first_fitting": min(fitting_plans)[2] if fitting_plans else None,
                      "first_fitting_cost": threshold, "baselines_over_budget": over}

        # 2. drop what no plan that fits and costs at most the threshold uses
        survivors = _survivors(s, threshold, PRUNE_SLACK)
        kept = canonical.subset(survivors)
        if np.isfinite(threshold) and not step3_affordable(_count(kept)):
            # step 3 could not run even its floor of solves within SOLVE_WORK: it would neither
            # prove the plan in hand nor, on the Llama shapes measured (256 and 1,024 GPUs), improve
            # on it.  The plan is step 1's cheapest, and the stats say what was searched
            cost, canonical_choice, what = min(fitting_plans)
            chosen = canonical.subset([np.array([c]) for c in canonical_choice])
            info = dict(found_info.get(what) or {"timed_out": False, "tightened": 0, "solves": 0, "branch_nodes": 0},
                        exact=False, cost=float(cost), lower_bound=float(s.stats.get("relaxation_bound", 0.0)),
                        survivors=_count(kept), restricted=what, **info_first)
            s.stages and s.stages.done(f"memory: {_count(kept)} partitions left on the first devices, beyond the "
                                       f"constrained search's work limit: the plan is step 1's cheapest ({what})")
            return self._every_block(s, chosen, float(cost), canonical_choice, threshold, info, stats)
        # 3. the constrained optimum over the survivors on the first devices, after dropping
        # what priced memory shows no plan that fits and costs at most the threshold uses
        everything = all(len(k) == len(d) for k, d in zip(survivors, canonical.deg))
        if whole is None:
            tables = self._tables(s.work, kept)
        else:
            tables = whole if everything else whole.subset(survivors)
        del whole   # (step 4 builds its own; the memory of a large machine's tables matters)
        if np.isfinite(threshold) and _count(kept) * search_memory.MAX_SOLVES <= SOLVE_WORK:
            # (a search that SOLVE_WORK limits runs its floor of solves whatever this drops: a
            # 32-layer Llama on 64 GPUs drops 3% of its partitions for about 4 s, on 256 8% for a minute)
            priced = _priced_survivors(tables, self.budget, threshold, PRUNE_SLACK, self.max_evaluations)
            if sum(len(k) for k in priced) < sum(len(k) for k in survivors):
                survivors = [k[p] for k, p in zip(survivors, priced)]
                kept = canonical.subset(survivors)
                tables = tables.subset(priced)   # rows and blocks of the tables in hand: not built again
        starts = [_reindex(survivors, f[1]) for f in fitting_plans]
        starts = [x for x in starts if x is not None]
        max_solves = solves_for(_count(kept), search_memory.MAX_SOLVES)
        near = [x for x in (_reindex(survivors, c) for c in misses) if x is not None]
        try:
            found = self._fitting(tables, kept, starts, deadline=deadline, max_solves=max_solves)
        except search_memory.UnprovenError as err:   # nothing that fits found, nothing proven: the nearest miss
            raise _does_not_fit(self.devices, tables, self.budget, self.max_evaluations, near, err.solves,
                                recompute=self.advise_recompute) from err
        if found is None:
            raise _does_not_fit(self.devices, tables, self.budget, self.max_evaluations, near,
                                recompute=self.advise_recompute)
        plan, info, choice = found
        s.stages and s.stages.done(f"memory: constrained search of {sum(len(k) for k in survivors)} partitions "
                                   f"left on the first devices ({info['solves']} eliminations)")
        chosen = kept.subset([np.array([c]) for c in choice])
        cost = float(tables.eq1(choice))
        canonical_choice = [int(survivors[i][c]) for i, c in enumerate(choice)]
        info = dict(info, survivors=int(sum(len(k) for k in survivors)), **info_first)
        return self._every_block(s, chosen, cost, canonical_choice, threshold, info, stats)

    def _every_block(self, s: Staged, chosen: Any, cost: float, canonical_choice: list[int], threshold: float,
                     info: dict, stats: dict) -> tuple[Any, float, dict, bool, float]:
        """Step 4, after steps 1-3 chose ``chosen`` (Eq. 1 ``cost``; ``canonical_choice``, its
        canonical indices) with ``info``: the search_stats["memory"] of the result."""
        canonical, ndev, placements = s.canonical, len(self.devices), "first devices"
        # 4. every aligned block of the partitions left at that cost, when few enough
        survivors = _survivors(s, min(cost, threshold), PRUNE_SLACK)
        survivors = [np.union1d(k, [c]) for k, c in zip(survivors, canonical_choice)]   # the plan in hand stays
        full = full_space(canonical, survivors, ndev)
        if full is not None and not (s.stages is not None and s.stages.out_of_time()):   # None above FULL_SPACE_LIMIT
            ftables = self._tables(s.work, full)
            start = _first_block_rows(canonical, survivors, canonical_choice, ndev)
            try:
                found = self._fitting(ftables, full, [start],
                                      max_solves=solves_for(_count(full), search_memory.MAX_SOLVES))
            except SearchError:   # no plan whose memory plan fits found there: keep step 3's
                found = None
            if found is not None and found[1]["cost"] <= cost * (1 + PRUNE_SLACK):
                plan, finfo, fchoice = found
                chosen = full.subset([np.array([c]) for c in fchoice])
                cost = float(ftables.eq1(fchoice))
                first = {k: info[k] for k in ("first_fitting", "first_fitting_cost", "baselines_over_budget")}
                info = dict(finfo, survivors=info["survivors"], **first, full_space_configurations=_count(full))
                placements = "every aligned block"
            s.stages and s.stages.done(f"memory: constrained search of the partitions left on every block "
                                       f"({_count(full)})")
        info.update(placements=placements, constrained=True)
        stats["memory"] = info
        return chosen, cost, stats, bool(info["exact"]), float(info["lower_bound"])


def step3_affordable(configurations: int) -> bool:
    """Can step 3 search ``configurations`` (all ops together) within SOLVE_WORK, at least its
    floor of elimination searches (MIN_SOLVES)?  When not, and step 1 found a plan that fits,
    step 3 is skipped and the plan is the cheapest step 1 found (when step 1 found none, step 3
    runs its floor all the same: it is the only way left to a plan).  A 32-layer Llama on 64
    GPUs (162,824 partitions) can; on 256 and 1,024 GPUs (383,157 and 765,442) it cannot."""
    return configurations * MIN_SOLVES <= SOLVE_WORK


def _count(configs: Any) -> int:
    """Configurations of a Configs, all ops together."""
    return int(sum(len(d) for d in configs.deg))


def _priced_survivors(tables: search_memory.Tables, budget: np.ndarray, threshold: float, slack: float,
                      max_evaluations: float) -> list[np.ndarray]:
    """Per op, the configurations (indices into ``tables``) that a plan within ``budget`` and at
    most ``threshold`` seconds may use, by Lagrangian min-marginals: for prices lam >= 0 per
    byte, a plan x within the budget has Eq1(x) >= Eq1(x) + lam . (footprint(x) - budget), so a
    configuration whose least such value over every strategy using it (a lower bound of it,
    from the elimination's min-marginals) exceeds the threshold is in no such plan.  Prices:
    the whole budget of a device worth 1/1000 to 10 times the threshold (each valid; what
    any of them drops goes), from the lowest up, stopping at the first that drops nothing
    more: each costs a reverse pass of the elimination (a 32-layer Llama on 256 GPUs: about
    ten seconds each), and on that Llama on 64 GPUs no price above the lowest dropped any."""
    from shardwise import _core

    keep = [np.ones(len(t), bool) for t in tables.time]
    everything = [np.ones(len(t), bool) for t in tables.time]
    left = sum(len(k) for k in keep)
    for worth in (1e-3, 1e-2, 1e-1, 1.0, 10.0):
        lam = worth * threshold / np.maximum(budget, 1.0)
        nodes, edges = tables.weighted(lam, 1.0, everything)
        _, _, _, marg = _core.search_tables(nodes, edges, "elimination", max_evaluations, True, tables.threads)
        offset = float(lam @ budget)
        for k, m in zip(keep, marg):
            k &= np.asarray(m) - offset <= threshold * (1 + slack) + 1e-12
        now = sum(int(k.sum()) for k in keep)
        if now == left:
            break
        left = now
    return [np.flatnonzero(k) for k in keep]


def _survivors(s: Staged, threshold: float, slack: float) -> list[np.ndarray]:
    """Per op, the canonical partitions whose min-marginal is at most threshold (1 + slack):
    every one when there are no marginals or no threshold.  The marginals are infinite above
    their cap, so above it those are kept too (a reverse pass capped for the Eq. 1 stage's
    pruning is not run again for the memory stage's higher threshold, where it prunes a few
    percent: a 32-layer Llama on 64 GPUs 1%, on 256 4%)."""
    if s.marginals is None or not np.isfinite(threshold):
        return [np.arange(len(d)) for d in s.canonical.deg]
    at = threshold * (1 + slack)
    if at <= s.marginals_cap:
        return [np.flatnonzero(m <= at) for m in s.marginals]
    return [np.flatnonzero((m <= at) | np.isinf(m)) for m in s.marginals]


def _reindex(survivors: list[np.ndarray], choice: Sequence[int]) -> list[int] | None:
    """``choice`` (canonical indices) as indices into the survivors, or None if one was dropped."""
    out = []
    for keep, c in zip(survivors, choice):
        hit = np.flatnonzero(keep == c)
        if not len(hit):
            return None
        out.append(int(hit[0]))
    return out


def _first_block_rows(canonical: Any, keep: list[np.ndarray], choice: Sequence[int], ndev: int) -> list[int]:
    """The rows of search_scale.full_space(canonical, keep, ndev) holding ``choice`` (canonical
    indices) on the first block."""
    rows = []
    for i, (k, c) in enumerate(zip(keep, choice)):
        before = sum(ndev // int(canonical.workers[i][x]) for x in k if x < c)   # k is sorted
        rows.append(int(before))
    return rows


def _canonical_choice(canonical: Any, graph: Graph, plan: Plan) -> list[int] | None:
    """The canonical index of every op's configuration in ``plan`` (None when one is not there)."""
    choice = []
    for op in graph.ops:
        cfg = plan.configs[op.name]
        deg, red = canonical.deg[op.index], canonical.red[op.index]
        want = np.ones(deg.shape[1], dtype=deg.dtype)
        want[:len(cfg.degrees)] = cfg.degrees
        same = np.flatnonzero((deg == want).all(axis=1))
        dev = canonical.devices(op.index, same)   # only the rows of this partition, -1 padded
        hit = None
        if len(cfg.devices) <= dev.shape[1]:
            want_dev = np.full(dev.shape[1], -1, dtype=dev.dtype)
            want_dev[:len(cfg.devices)] = cfg.devices
            for k in same[(dev == want_dev).all(axis=1)]:
                if reduction_config(op, red[k]) == cfg.reduction:
                    hit = int(k)
                    break
        if hit is None:
            return None
        choice.append(hit)
    return choice


def _does_not_fit(devices: DeviceGraph, tables: search_memory.Tables, budget: np.ndarray,
                  max_evaluations: float, starts: Sequence[Sequence[int]], unproven: int = 0,
                  recompute: bool = True) -> search_memory.PlanDoesNotFitError:
    # recompute: advise sw.search(..., recompute=True) (not when the search was asked to recompute)
    return search_memory.does_not_fit(devices, tables, budget, max_evaluations,
                                      " with each partition on the first devices of the machine", starts, unproven,
                                      recompute=recompute)
