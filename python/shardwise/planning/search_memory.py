"""Memory in the search: plans that fit every device's memory, and the time / memory front.

    plan = sw.search(g, d)                  # fits d.devices[i].memory on every device, or PlanDoesNotFitError
    plan = sw.search(g, d, memory="8GB")    # a budget per device instead (memory=False: ignore memory)
    front = sw.search(g, d, pareto=True)    # [FrontPlan(plan, time, peak_bytes, memory), ...]

The memory a plan needs on a device is its memory plan's arena (:func:`shardwise.memory_plan`,
the one the runtime allocates).  That arena follows buffer lifetimes, so it is not a sum over
ops; what the search adds up instead is the part of it that is (csrc/cost/cost_memory.c): the bytes
live when the backward pass starts (parameters, optimizer state, running statistics, and the
activations and staging regions kept for the backward pass), a node term per op
configuration plus an edge term per producer / consumer pair.  It is a lower bound of the
arena, so:

1. the unconstrained optimum (the search as before) is checked with its memory plan; when it
   fits it is the constrained optimum, and nothing else runs;
2. otherwise the exact optimum of Eq. 1 under "footprint <= memory" on every device is found by
   branch and bound (:func:`solve`): Lagrangian bounds (the elimination search over cost tables
   plus multiplier-weighted memory tables, every bound exact), branching on one op's
   configurations by their bytes on the most overfull device;
3. that plan's memory plan is checked; when it fits it is the exact optimum of the real
   problem (every plan that fits satisfies the footprint constraint).  When it does not, the
   budget of each overfull device is lowered by what the memory plan needed beyond the
   footprint (the backward pass's gradients) and step 2 runs again; the plan returned then
   carries ``search_stats["memory"]["exact"] = False`` and the first bound.
4. When step 2 finds no plan, none fits: :class:`PlanDoesNotFitError` names the device short of
   the most memory in the plan needing least memory in all.
"""
from __future__ import annotations

import heapq
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

import numpy as np

from shardwise import _core
from shardwise.sizes import format_bytes
from shardwise.machine.devices import DeviceGraph
from shardwise.errors import ConfigError, SearchError, ShardwiseError
from shardwise.graph import Graph
from shardwise.sizes import read_bytes

BIG = 1e20            # node cost of a configuration the branch forbids (seconds; any plan costs far less)
MAX_SOLVES = 120      # elimination searches one constrained search may run (then: best plan and a bound)
ROOT_STEPS = 20       # subgradient steps at the root of the branch and bound
LAGRANGE_STEPS = 4    # at every other node (from the parent's multipliers)
PENALTY_ROUNDS = 20   # doublings of the price of overfull devices' bytes while looking for a first plan
TIGHTEN_ROUNDS = 3    # re-solves with budgets lowered by what the memory plan needed beyond the footprint
REL_TOL = 1e-9
DEBUG = False         # print every Lagrangian step (development)
SHORTFALL_ROUNDS = 8  # re-priced searches for the nearest miss the 'no plan fits' message names


class PlanDoesNotFitError(ShardwiseError, ValueError):
    """No plan that fits every device's memory: none in the search space (``proven``), or none
    found before the search stopped without proving that none exists (``proven`` False: the
    memory-constrained search of a large machine ran its count of elimination searches).
    ``device``, ``needed`` and ``available`` (bytes) name the smallest shortfall the search saw:
    the most overfull device of the plan closest to fitting among the plans of least priced
    memory and the baselines."""

    def __init__(self, message: str, device: int = -1, needed: int = 0, available: int = 0,
                 proven: bool = True) -> None:
        super().__init__(message)
        self.device, self.needed, self.available, self.proven = device, needed, available, proven


class UnprovenError(SearchError):
    """The memory-constrained search ran its count of elimination searches (``solves``) without
    finding a strategy that fits or proving that none does (turned into a PlanDoesNotFitError,
    ``proven`` False, naming the nearest miss, where the search has the tables to find one)."""

    def __init__(self, message: str, solves: int) -> None:
        super().__init__(message)
        self.solves = solves


@dataclass
class FrontPlan:
    """One plan of the time / peak-memory Pareto front (``sw.search(g, d, pareto=True)``).

    ``time``: its Eq. 1 seconds per iteration; ``peak_bytes``: the largest arena of any device
    in its memory plan; ``memory``: that :class:`~shardwise.iteration.memory.MemoryPlan`."""

    plan: Any
    time: float
    peak_bytes: int
    memory: Any = field(repr=False)


def parse_bytes(value: Any, what: str = "memory") -> float:
    """Bytes from a number or a string such as ``"12GB"``, ``"8 GiB"``, ``"1.5e9"`` (as
    :func:`shardwise.parse_budget` reads them, floats allowed); ConfigError (a ValueError) otherwise."""
    try:
        return float(read_bytes(value, what, floats=True))
    except (TypeError, ValueError) as exc:
        raise ConfigError(str(exc)) from None


def budgets(devices: DeviceGraph, memory: Any) -> np.ndarray | None:
    """Bytes each device may use: its memory (``memory=True``), none (``False``: None) or a budget
    for every device (a number or a string such as ``"8GB"``; at most the device's memory)."""
    if memory is False or memory is None:
        return None
    own = np.array([float(dev.memory) for dev in devices.devices])
    if memory is True:
        return own
    return np.minimum(own, parse_bytes(memory, "memory budget"))


def arenas(plan: Any) -> np.ndarray:
    """Bytes each device's arena takes in ``plan``'s memory plan (what the runtime allocates; on
    machines of more than ``FUSED_RINGS_ABOVE`` devices the fused rings' plan, as the simulator's)."""
    return arenas_lowered(plan)[0]


def arenas_lowered(plan: Any) -> tuple[np.ndarray, Any]:
    """:func:`arenas` of ``plan``, and the task graph view it was planned on (lowered with
    rings="auto", as the simulator lowers: its replay need not lower the plan again)."""
    from shardwise.iteration.lower import TaskGraph, ring_detail
    from shardwise.iteration.memory import memory_plan

    mp = memory_plan(plan, rings="auto")
    arena = np.array([mp.devices[d].arena_bytes for d in range(len(plan.devices))], dtype=np.int64)
    return arena, TaskGraph(plan=plan, handle=mp.handle, rings=ring_detail(plan, "auto"))


def fits(plan: Any, limit: np.ndarray | None, kept: Any = None, choice: Any = None, problem: Any = None) -> bool:
    """Does every device's memory plan (its arena) fit ``limit``?  First the cheap sufficient test
    (the lowering's buffers added up, each rounded up to the arena alignment: greedy placement
    never puts a buffer's end above that sum: added up from the plan's fused lowering, as its chunked
    graph holds them), then a cheap necessary one (the buffers kept across steps, live at once in
    every arena, added up), then the memory plan itself.  ``kept``: the
    problem_cache.Kept the plan was searched on, with ``choice`` its configuration indices
    there: the buffer totals of an earlier search that found the same plan, or kept for the next.
    ``problem``: the C problem the plan was searched on, lowered on instead of building the plan's
    own (lower.lowered); with ``choice`` (the plan's configuration indices in it), lowered from
    those configurations, without the plan's arrays."""
    if limit is None:
        return True
    from shardwise.iteration.lower import buffer_totals, lowered, op_roles, ring_detail
    from shardwise.iteration.memory import DEFAULT_ALIGNMENT

    detail = ring_detail(plan, "auto")
    handle = persistent = None
    totals = kept.buffer_totals(choice) if kept is not None else None
    if totals is None:
        # the sums of the graph the memory plan below is made on, from its fused lowering (far
        # fewer tasks; the same bytes, and the chunked ring's extra buffers counted).  A graph
        # lowered fused is the one the memory plan of a large machine reads: kept for it; on a
        # small machine the memory plan lowers chunked, so the sums come from a lowering that
        # keeps no task
        if detail == "fused":
            handle = lowered(plan, rings="fused", problem=problem)
            totals = handle.buffer_totals()
        elif problem is not None and choice is not None:
            *totals, persistent = problem.buffer_totals_chosen(op_roles(plan.graph), np.asarray(choice, np.int64),
                                                               fused_rings=True, chunked=True)
        else:
            *totals, persistent = buffer_totals(plan, rings="fused", chunked=True, problem=problem)
        if kept is not None:
            kept.keep_buffer_totals(choice, tuple(totals))
    memory, buffers = totals
    if (memory + buffers * DEFAULT_ALIGNMENT <= limit).all():
        return True
    if persistent is None and handle is not None:
        persistent = handle.buffer_totals(persistent=True)[0]
    if persistent is not None and (persistent > limit).any():
        return False   # what persists across steps alone (live at once in every arena) is too much
    handle = handle if handle is not None else lowered(plan, rings=detail, problem=problem)
    return bool((handle.memory_plan(align=DEFAULT_ALIGNMENT)["arena"] <= limit).all())


class Tables:
    """Eq. 1 (node and edge tables) and the footprint (per device) of every configuration of a
    problem whose cost tables are built."""

    threads = 1   # the elimination searches over these tables run on this many threads

    def __init__(self, problem: Any, graph: Graph, threads: int = 1) -> None:
        self.n = len(graph.ops)
        self.threads = threads
        self.time = []
        for v in range(self.n):
            tc, ts, _ = problem.node_costs(v)
            self.time.append(np.asarray(tc) + np.asarray(ts))
        self.edges = share_equal([(u, v, s, t) for (u, v, s), t in zip(problem.edges(), problem.edge_times())])
        from shardwise.iteration.lower import op_roles   # (imported where used, as fits() does)

        rows, node, medges = problem.memory_tables(op_roles(graph))
        self.rows = rows                                  # (R, ndev): each distinct row of bytes per device
        self.node_ids = [np.asarray(i, np.int64) for i in node]   # per op: each configuration's row
        self.ndev = rows.shape[1]
        self.medges = medges                              # (u, v, slot, base rows (ncfg_v,), idx (m, 3), bytes (m,))

    @property
    def mem(self) -> list[np.ndarray]:
        """Per op, the (ncfg, ndev) bytes of each configuration on each device (made on demand:
        a large machine's configurations repeat a few hundred rows, stored once in ``rows``)."""
        return [self.rows[i] for i in self.node_ids]

    def subset(self, keep: Sequence[np.ndarray]) -> "Tables":
        """The tables of configurations ``keep[v]`` (sorted indices) of every op v: every entry
        depends on its op's (or its two ops') configurations alone, so they are rows and blocks
        of these, as a problem holding only those configurations would build them."""
        out = Tables.__new__(Tables)
        out.n, out.ndev, out.rows, out.threads = self.n, self.ndev, self.rows, self.threads
        keep = [np.asarray(k, np.int64) for k in keep]
        out.time = [t[k] for t, k in zip(self.time, keep)]
        blocks: dict[tuple, np.ndarray] = {}   # the same table cut the same way: one array
        out.edges = []
        for u, v, slot, t in self.edges:
            key = (id(t), keep[u].tobytes(), keep[v].tobytes())
            if key not in blocks:
                blocks[key] = t[np.ix_(keep[u], keep[v])]
            out.edges.append((u, v, slot, blocks[key]))
        out.edges = share_equal(out.edges)
        out.node_ids = [i[k] for i, k in zip(self.node_ids, keep)]
        new = []   # per op: old configuration index -> new one (-1: dropped)
        for v, k in enumerate(keep):
            at = np.full(len(self.time[v]), -1, np.int64)
            at[k] = np.arange(len(k))
            new.append(at)
        out.medges = []
        cut: dict[tuple, tuple] = {}   # the same entries cut the same way: one set of arrays
        for u, v, slot, base, idx, nbytes in self.medges:
            key = (id(idx), id(base), keep[u].tobytes(), keep[v].tobytes())
            if key not in cut:
                idx, nb = np.asarray(idx, np.int64).reshape(-1, 3), np.asarray(nbytes, float)
                ci, cj = new[u][idx[:, 0]], new[v][idx[:, 1]]
                sel = (ci >= 0) & (cj >= 0)
                cut[key] = (np.asarray(base, np.int64)[keep[v]], np.stack([ci[sel], cj[sel], idx[sel, 2]], axis=1),
                            nb[sel])
            out.medges.append((u, v, slot, *cut[key]))
        return out

    def _packed(self) -> dict[str, Any]:
        """The tables flattened once for the vectorized footprint and weighting below (cached):
        every op's node rows stacked (one per configuration, ``node_at[v]`` the first), every
        memory edge's base rows stacked (``base_at[e]`` the first of edge e, by v's
        configuration), each an index into ``rows``, and the edges' corrections (bytes freed on
        one device when u and v take configurations ci and cj) as flat arrays, grouped per edge
        by position in its (ncfg_u, ncfg_v) table."""
        cache = getattr(self, "_packed_cache", None)
        if cache is not None:
            return cache
        ncfg = [len(i) for i in self.node_ids]
        node_at = np.concatenate([[0], np.cumsum(ncfg)]).astype(np.int64)
        bases = [base for _, _, _, base, _, _ in self.medges]
        base_at = np.concatenate([[0], np.cumsum([len(b) for b in bases])]).astype(np.int64)
        # edges freeing the same bytes at the same places (each layer of a transformer) share one
        # table per weighting and one set of entries: only the first of each kind ("rep") is laid
        # out, and the footprint reads an edge's freed bytes at its rep's
        freed_edges, like = _alike_freed(self)
        reps = sorted(set(like.values()))
        dev, nbytes, pos, eid = [], [], [], []
        for e in reps:
            _, _, _, base, idx, nb = self.medges[e]
            idx = np.asarray(idx).reshape(-1, 3).astype(np.int64, copy=False)
            dev.append(idx[:, 2])
            nbytes.append(np.asarray(nb, float))
            pos.append(idx[:, 0] * len(base) + idx[:, 1])
            eid.append(np.full(len(idx), e, np.int64))
        cat = (lambda parts, dtype: np.concatenate(parts).astype(dtype, copy=False) if parts else np.zeros(0, dtype))
        dev = cat(dev, np.int64)
        nbytes, pos, eid = cat(nbytes, float), cat(pos, np.int64), cat(eid, np.int64)
        # by edge, then by position in its table: the C tables list them so (ci, cj, device), and
        # the sort is needed only if they do not
        stride = max([len(self.node_ids[u]) * len(b) for u, _, _, b, _, _ in self.medges] + [1])
        in_order = not len(eid) or bool((np.diff(eid * stride + pos) >= 0).all())
        order = np.arange(len(eid), dtype=np.int64) if in_order else np.lexsort((pos, eid))
        key_e, key_p = (eid, pos) if in_order else (eid[order], pos[order])
        first = np.ones(len(order), bool)
        first[1:] = (key_e[1:] != key_e[:-1]) | (key_p[1:] != key_p[:-1])
        starts = np.flatnonzero(first)                     # one group per (rep edge, position)
        group_edge, group_pos = key_e[starts], key_p[starts]
        # a memory edge's base bytes depend on v's configuration alone: weighted, they are added
        # to node v (base row k of every memory edge into v priced into configuration
        # base_target[k] = node_at[v] + its index); only edges with freed bytes keep a table of
        # their own, zero but for those bytes (group k of a rep edge at group_flat[k] of one buffer)
        base_v = np.array([v for _, v, _, _, _, _ in self.medges], np.int64)
        base_target = (np.concatenate([node_at[v] + np.arange(len(b)) for (_, v, _, b, _, _) in self.medges])
                       .astype(np.int64) if self.medges else np.zeros(0, np.int64))
        base_rows = np.concatenate([np.asarray(b, np.int64) for b in bases]) if bases else np.zeros(0, np.int64)
        node_rows = np.concatenate(self.node_ids) if self.node_ids else np.zeros(0, np.int64)
        combos = _combos(node_rows, node_at, self.medges, len(self.rows))
        sizes = [len(self.node_ids[self.medges[e][0]]) * len(bases[e]) for e in reps]
        freed_at = np.zeros(len(self.medges) + 1, np.int64)
        freed_at[reps] = np.concatenate([[0], np.cumsum(sizes)[:-1]]) if sizes else []
        cache = {"node_rows": node_rows, "base_rows": base_rows, "base_target": base_target, **combos,
                 "bounds": list(zip(node_at[:-1].tolist(), node_at[1:].tolist())),
                 "time": np.concatenate(self.time) if self.time else np.zeros(0),   # every op's Eq. 1 node costs
                 "freed_edges": freed_edges, "freed_like": like, "freed_size": int(sum(sizes)),
                 "freed_at": freed_at, "group_flat": freed_at[group_edge] + group_pos,
                 **_distinct_groups(dev[order], nbytes[order], starts),
                 "node_at": node_at,
                 "base_at": base_at,
                 "base_v": base_v,
                 "dev": dev, "nbytes": nbytes, "order": order}
        # the footprint finds a strategy's freed bytes by (rep edge, position) key: groups sorted by it
        cache.update(stride=stride, group_key=group_edge * stride + group_pos, group_start=starts,
                     group_end=np.append(starts[1:], len(order)).astype(np.int64),
                     fe_rep=np.array([like[e] for e in freed_edges], np.int64),
                     fe_u=np.array([self.medges[e][0] for e in freed_edges], np.int64),
                     fe_v=np.array([self.medges[e][1] for e in freed_edges], np.int64),
                     fe_nv=np.array([len(self.medges[e][3]) for e in freed_edges], np.int64))
        self._packed_cache = cache
        return cache

    def footprint(self, x: Sequence[int]) -> np.ndarray:
        """Bytes per device of the strategy x (one configuration index per op)."""
        p = self._packed()
        x = np.asarray(x, np.int64)
        # the distinct rows each taken so many times: every entry a whole number of bytes, so the
        # sums are exact in any order (not a BLAS product: its threads spin after each call)
        taken = [p["node_rows"][p["node_at"][:-1] + x]] if len(x) else []
        if len(p["base_v"]):
            taken.append(p["base_rows"][p["base_at"][:-1] + x[p["base_v"]]])
        times = np.bincount(np.concatenate(taken), minlength=len(self.rows)) if taken else np.zeros(len(self.rows))
        a = np.einsum("i,ij->j", times.astype(np.float64), self.rows)
        if len(p["group_key"]):
            # each edge with freed bytes: the group at x's position in its table, if it has one
            want = p["fe_rep"] * p["stride"] + x[p["fe_u"]] * p["fe_nv"] + x[p["fe_v"]]
            g = np.minimum(np.searchsorted(p["group_key"], want), len(p["group_key"]) - 1)
            g = g[p["group_key"][g] == want]
            if len(g):
                lo, hi = p["group_start"][g], p["group_end"][g]
                entries = p["order"][np.repeat(lo - np.concatenate([[0], np.cumsum(hi - lo)[:-1]]), hi - lo)
                                     + np.arange(int((hi - lo).sum()))]
                a = a - np.bincount(p["dev"][entries], weights=p["nbytes"][entries], minlength=self.ndev)
        return a

    def eq1(self, x: Sequence[int]) -> float:
        return float(sum(self.time[v][x[v]] for v in range(self.n)) +
                     sum(t[x[u], x[v]] for u, v, _, t in self.edges))

    def upper_bound(self) -> float:
        """No strategy's Eq. 1 exceeds this."""
        return float(sum(t.max() for t in self.time) + sum(t.max() for *_, t in self.edges))

    def weighted(self, lam: np.ndarray, wtime: float, allowed: list[np.ndarray]) -> tuple[list, list]:
        """Node and edge tables of wtime * Eq. 1 + lam . footprint, forbidden configurations at
        BIG.  The memory edges' base bytes (a function of the consumer's configuration) are priced
        into the consumer's node; an edge with freed bytes adds a table of its own, zero elsewhere.
        Those tables are views of one buffer these Tables keep and the next call rewrites: the
        tables returned are valid until then (each caller searches them at once)."""
        p = self._packed()
        # per distinct row of bytes.  Not a BLAS product (rows @ lam): a multithreaded one
        # rounds differently with the number of threads (the same inputs would not give the same
        # plan on every machine), and its threads spin for a while after each call (a 32-layer
        # Llama on 1,024 GPUs: 2.7 s of processor time over the search's 52 calls)
        row_lam = np.einsum("ij,j->i", self.rows, lam)
        # per configuration: its node bytes and its memory edges' base bytes, summed once for each
        # distinct combination of rows (a few thousand of a large machine's 10^5 configurations)
        combo_lam = row_lam[p["combo_node_rows"]] + np.bincount(
            p["combo_base_target"], weights=row_lam[p["combo_base_rows"]], minlength=len(p["combo_node_rows"]))
        node_lam = combo_lam[p["combo_of"]]
        flat = np.where(np.concatenate(allowed), wtime * p["time"] + node_lam, BIG)
        nodes = [flat[a:b] for a, b in p["bounds"]]   # views of one buffer
        if not p["freed_edges"]:
            return nodes, self._edges_scaled(wtime)
        # bytes times the price of their device, summed per distinct group (_distinct_groups), in
        # one array kept for every call
        work = p.get("freed_work")
        if work is None:
            work = p["freed_work"] = np.empty(len(p["distinct_dev"]))
        np.take(lam, p["distinct_dev"], out=work, mode="clip")   # (indices are devices: in range)
        np.multiply(p["distinct_bytes"], work, out=work)
        freed = np.add.reduceat(work, p["distinct_starts"])[p["group_distinct"]] if len(work) else np.zeros(0)
        buf = p.get("freed_buffer")
        if buf is None:   # zero but at group_flat, where every call writes: made once
            buf = p["freed_buffer"] = np.zeros(p["freed_size"])
            fat = p["freed_at"]
            made: dict[int, np.ndarray] = {}
            p["freed_tables"] = []
            for e in p["freed_edges"]:
                u, v, _, base, _, _ = self.medges[e]
                first = p["freed_like"][e]   # an edge freeing the same bytes at the same places: its table
                if first not in made:
                    n = len(self.time[u]) * len(base)
                    made[first] = buf[fat[first]:fat[first] + n].reshape(len(self.time[u]), len(base))
                p["freed_tables"].append((u, v, made[first]))
        buf[p["group_flat"]] = -freed
        return nodes, self._edges_scaled(wtime) + p["freed_tables"]

    def _edges_scaled(self, wtime: float) -> list[tuple]:
        """The Eq. 1 edges (u, v, wtime * table), tables equal as arrays staying one array (the
        elimination reuses their products); wtime 1's list made once."""
        p = self._packed()
        if wtime == 1.0 and "edges_1" in p:
            return list(p["edges_1"])
        scaled: dict[int, np.ndarray] = {}
        if wtime != 1.0:
            for *_, t in self.edges:
                if id(t) not in scaled:
                    scaled[id(t)] = wtime * t
        edges = [(u, v, scaled.get(id(t), t)) for u, v, _, t in self.edges]
        if wtime == 1.0:
            p["edges_1"] = edges
        return list(edges)


def _distinct_groups(dev: np.ndarray, nbytes: np.ndarray, starts: np.ndarray) -> dict[str, np.ndarray]:
    """The groups of freed bytes (entries ``dev``, ``nbytes`` from each of ``starts`` to the next)
    with the same entries in the same order stored once: distinct_dev, distinct_bytes and
    distinct_starts (those groups' entries, one after another), and group_distinct (per group,
    its distinct group).  Equal groups give equal sums, bit for bit, so Tables.weighted sums each
    distinct group once: a 32-layer Llama on 1,024 GPUs frees bytes in 2,572 groups of 2 M
    entries in all, 98 of them distinct (every layer's, every placement's alike)."""
    ends = np.append(starts[1:], len(dev)).astype(np.int64)
    seen: dict[bytes, int] = {}
    group_distinct = np.empty(len(starts), np.int64)
    kept = []
    for k, (a, b) in enumerate(zip(starts.tolist(), ends.tolist())):
        key = dev[a:b].tobytes() + nbytes[a:b].tobytes()   # (lengths agree: devices and bytes take 8 bytes each)
        group_distinct[k] = seen.setdefault(key, len(seen))
        if group_distinct[k] == len(kept):
            kept.append((a, b))
    take = np.concatenate([np.arange(a, b) for a, b in kept]) if kept else np.zeros(0, np.int64)
    lengths = np.array([b - a for a, b in kept], np.int64)
    return {"distinct_dev": dev[take], "distinct_bytes": nbytes[take], "group_distinct": group_distinct,
            "distinct_starts": np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.int64) if kept
            else np.zeros(0, np.int64)}


def _combos(node_rows: np.ndarray, node_at: np.ndarray, medges: list[tuple], nrows: int) -> dict[str, Any]:
    """The distinct combinations of rows of bytes the configurations take: a node row and the
    base rows of the memory edges into its op (Tables._packed's node_rows; ``medges`` as Tables
    keeps them).  combo_of (per configuration), combo_node_rows (per combination) and
    combo_base_target / combo_base_rows (its base rows, in the order of the edges, as
    Tables._packed's base_target lists them: a bincount over them adds each combination's bytes
    as one over those adds each configuration's, bit for bit)."""
    n = len(node_rows)
    into: dict[int, int] = {}   # memory edges into each op so far
    for _, v, *_ in medges:
        into[v] = into.get(v, 0) + 1
    width = max(into.values(), default=0)
    slots = np.full((n, width), -1, np.int64)   # each configuration's base rows, in edge order, -1 padded
    into.clear()
    for _, v, _, base, _, _ in medges:
        k = into[v] = into.get(v, -1) + 1
        slots[node_at[v]:node_at[v + 1], k] = base
    if float(nrows + 1) ** (width + 1) < 2.0 ** 62:   # one integer per combination: rows < nrows, -1 -> nrows
        key = node_rows.astype(np.int64)
        for k in range(width):
            key = key * (nrows + 1) + np.where(slots[:, k] >= 0, slots[:, k], nrows)
    else:
        key = np.concatenate([node_rows.astype(np.int64)[:, None], slots], axis=1)
    _, first, combo_of = np.unique(key, axis=0 if key.ndim == 2 else None, return_index=True, return_inverse=True)
    listed = slots[first]                                   # (K, width)
    k_of, slot = np.nonzero(listed >= 0)                    # row-major: each combination's in edge order
    return {"combo_of": combo_of.astype(np.int64).reshape(-1), "combo_node_rows": node_rows[first],
            "combo_base_target": k_of.astype(np.int64), "combo_base_rows": listed[k_of, slot]}


def share_equal(edges: list[tuple]) -> list[tuple]:
    """``edges`` (u, v, slot, table) with equal tables made one array.  The elimination search
    computes a product or sum once for the same input arrays, so the repeated layers of a
    transformer (every layer's tables equal) are eliminated once, not once per layer; it
    compares arrays, not contents, which is why they must be shared here."""
    seen: dict[tuple, list[np.ndarray]] = {}
    out = []
    for u, v, slot, t in edges:
        t = np.ascontiguousarray(t, np.float64)
        flat = t.reshape(-1)
        key = (t.shape, flat[::max(1, flat.size // 256)].tobytes())   # a sample: equal tables share it
        for other in seen.setdefault(key, []):
            if other is t or np.array_equal(other, t):
                t = other
                break
        else:
            seen[key].append(t)
        out.append((u, v, slot, t))
    return out


def _alike_freed(tables: "Tables") -> tuple[list[int], dict[int, int]]:
    """The memory edges with freed bytes, and per such edge the first whose weighted table is
    the same for every price vector: the same table shape and the same (ci, cj, device, bytes)
    entries in the same order (the C tables copy a twin edge's entries as they are)."""
    first: dict[tuple, int] = {}
    same: dict[tuple, int] = {}   # the same arrays (twin edges share them): compared once
    freed, like = [], {}
    for e, (u, _, _, base, idx, nb) in enumerate(tables.medges):
        if not len(idx):
            continue
        freed.append(e)
        shape = (len(tables.node_ids[u]), len(base))
        if (*shape, id(idx), id(nb)) in same:
            like[e] = same[(*shape, id(idx), id(nb))]
            continue
        idx = np.asarray(idx)
        key = (*shape, idx.dtype.str, idx.tobytes(), np.asarray(nb, float).tobytes())
        like[e] = same[(*shape, id(tables.medges[e][4]), id(nb))] = first.setdefault(key, e)
    return freed, like


@dataclass
class Solution:
    choice: list[int]
    cost: float          # Eq. 1
    exact: bool          # the optimum under the footprint constraint (within MAX_SOLVES)
    lower_bound: float   # <= the optimum under it
    solves: int
    nodes: int
    timed_out: bool = False   # the deadline stopped it


class _Solver:
    def __init__(self, tables: Tables, limit: np.ndarray, max_evaluations: float, max_solves: int | None = None,
                 deadline: float | None = None) -> None:
        self.t, self.limit, self.max_evaluations = tables, limit, max_evaluations
        self.max_solves = MAX_SOLVES if max_solves is None else max_solves
        self.deadline = deadline   # time.perf_counter() after which the search stops, once a plan fits
        self.timed_out = False     # it stopped there
        self.solves = 0
        # a node exceeding the budget alone, whatever the rest does (every term is >= 0): never allowed
        row_fits = (tables.rows <= limit).all(axis=1)
        self.allowed0 = [row_fits[i] for i in tables.node_ids]

    def spent(self, have_plan: bool) -> bool:
        """No more elimination searches: the count is reached, or the deadline passed and a plan
        that fits is in hand (without one the search goes on: it has nothing to return)."""
        if self.solves >= self.max_solves:
            return True
        self.timed_out = have_plan and self.deadline is not None and time.perf_counter() > self.deadline
        return self.timed_out

    def solve_tables(self, lam: np.ndarray, wtime: float, allowed: list[np.ndarray]) -> tuple[list[int], float, float]:
        """(choice, its weighted cost, a lower bound of the weighted optimum)."""
        nodes, edges = self.t.weighted(lam, wtime, allowed)
        self.solves += 1
        choice, cost, stats = _core.search_tables(nodes, edges, "elimination", self.max_evaluations, False,
                                                  self.t.threads)
        return [int(c) for c in choice], float(cost), float(stats["lower_bound"]) if not stats["exact"] else float(cost)


def solve(tables: Tables, limit: np.ndarray, max_evaluations: float = 1e9,
          max_solves: int | None = None, starts: Sequence[Sequence[int]] = (),
          deadline: float | None = None) -> Solution | None:
    """The least Eq. 1 over strategies whose footprint is at most ``limit`` on every device (branch
    and bound with Lagrangian bounds); None when no strategy satisfies it.  Exact unless
    ``max_solves`` elimination searches do not suffice (then ``exact`` is False and
    ``lower_bound`` bounds the optimum).  ``starts``: strategies to try first (the baselines):
    the best that fits prunes from the start.  ``deadline`` (a ``time.perf_counter()`` value):
    once a strategy that fits is in hand, the search stops there like at ``max_solves``."""
    # its elimination searches run over the same tables one after another: the blocks their
    # tables are cut from are kept between them, mapped once (a Llama on 1,024 GPUs: 25
    # searches of ~36 MB each, whose fresh pages took a third of their processor time)
    _core.keep_search_tables(True)
    try:
        return _solve(tables, limit, max_evaluations, max_solves, starts, deadline)
    finally:
        _core.keep_search_tables(False)


def _solve(tables: Tables, limit: np.ndarray, max_evaluations: float, max_solves: int | None,
           starts: Sequence[Sequence[int]], deadline: float | None) -> Solution | None:
    s = _Solver(tables, limit, max_evaluations, max_solves, deadline)
    max_solves = s.max_solves
    # a start that fits proves a strategy exists: the certificates of none (elimination
    # searches of their own, two on a large machine) are not sought
    some_fit = any((tables.footprint(list(x)) <= limit).all() for x in starts)
    if not all(a.any() for a in s.allowed0) or (not some_fit and _proven_infeasible(s)):
        return None
    ub_all = tables.upper_bound() * (1 + 1e-6) + 1e-12
    best, incumbent, lam0 = _penalty_start(s, ub_all)   # a plan that fits, when pricing memory finds one
    for x in starts:
        x = list(x)
        if (tables.footprint(x) <= limit).all() and tables.eq1(x) < incumbent:
            best, incumbent = x, tables.eq1(x)
    counter = 0
    # (bound, tie, allowed masks, multipliers, subgradient steps)
    heap: list[tuple[float, int, list[np.ndarray], np.ndarray, int]] = [(-np.inf, 0, s.allowed0, lam0, ROOT_STEPS)]
    nodes = 0
    while heap:
        bound, tie, allowed, lam, steps = heapq.heappop(heap)
        if bound >= incumbent * (1 - REL_TOL):
            continue
        if s.spent(best is not None):
            heapq.heappush(heap, (bound, tie, allowed, lam, steps))
            break
        nodes += 1
        node_lb, found, x_branch, lam = _bound_node(s, allowed, lam, incumbent, ub_all, steps)
        if found is not None and found[1] < incumbent:
            best, incumbent = found
        if max(node_lb, bound) >= incumbent * (1 - REL_TOL) or x_branch is None:
            continue
        for child in _branch(tables, allowed, x_branch, limit):
            counter += 1
            heapq.heappush(heap, (max(node_lb, bound), counter, child, lam.copy(), LAGRANGE_STEPS))
    open_bounds = [h[0] for h in heap if h[0] < incumbent * (1 - REL_TOL)]
    exact = not open_bounds
    # a node left unbounded (the root, when the deadline came first) bounds at -inf: Eq. 1 >= 0
    open_bound = max(min(open_bounds), 0.0) if open_bounds else np.inf
    if best is None:
        if exact:
            return None
        raise UnprovenError(f"the memory-constrained search found no plan that fits within {max_solves} elimination "
                            f"searches (and could not prove that none does); pass memory=False to ignore memory",
                            max_solves)
    return Solution(best, tables.eq1(best), exact, incumbent if exact else float(open_bound), s.solves, nodes,
                    s.timed_out and not exact)


def _proven_infeasible(s: _Solver) -> bool:
    """Certificates that no strategy satisfies the limit: even the least total footprint exceeds
    the devices' budgets together, or the least on the devices any configuration puts bytes on
    exceeds theirs (a search of partitions on the first few devices of a large machine), or
    (up to 16 devices) the least on one device exceeds its own."""
    t, limit = s.t, s.limit
    x, _, lb = s.solve_tables(np.ones(t.ndev), 0.0, s.allowed0)
    if lb > float(limit.sum()) * (1 + 1e-12):
        return True
    # the devices some configuration puts bytes on (rows these tables use: a subset shares its
    # whole's rows): a strategy's bytes lie on them alone, one more bound
    ids = np.unique(np.concatenate([np.asarray(i, np.int64) for i in t.node_ids] +
                                   [np.asarray(m[3], np.int64) for m in t.medges]))
    used = (t.rows[ids] > 0).any(axis=0)
    if 0 < used.sum() < t.ndev:
        _, _, lb = s.solve_tables(used.astype(float), 0.0, s.allowed0)
        if lb > float(limit[used].sum()) * (1 + 1e-12):
            return True
    for d in range(t.ndev if t.ndev <= 16 else 0):
        e = np.zeros(t.ndev)
        e[d] = 1.0
        _, _, lb = s.solve_tables(e, 0.0, s.allowed0)
        if lb > float(limit[d]) * (1 + 1e-12):
            return True
    return False


def _penalty_start(s: _Solver, ub_all: float) -> tuple[list[int] | None, float, np.ndarray]:
    """Price the bytes of overfull devices, doubling the price until a strategy fits (a plan to
    prune with, and multipliers to start the bounds from); (None, ub_all, zeros) if none does."""
    t, limit = s.t, s.limit
    lam = np.zeros(t.ndev)
    x, _, _ = s.solve_tables(lam, 1.0, s.allowed0)
    t0 = max(t.eq1(x), 1e-12)
    price = t0 / np.maximum(limit, 1.0) * 1e-3   # seconds per byte: 0.1% of the iteration for a whole device
    for _ in range(PENALTY_ROUNDS):
        g = t.footprint(x) - limit
        if (g <= 0).all():
            return x, t.eq1(x), lam
        lam = lam + price * (g > 0)
        price = price * 2
        x, _, _ = s.solve_tables(lam, 1.0, s.allowed0)
    if (t.footprint(x) <= limit).all():
        return x, t.eq1(x), lam
    return None, ub_all, np.zeros(t.ndev)


def _bound_node(s: _Solver, allowed: list[np.ndarray], lam: np.ndarray, incumbent: float, ub_all: float,
                steps: int):
    """Lagrangian bound of one node by subgradient steps: (bound, (choice, Eq. 1) of the best
    strategy seen that fits or None, the strategy to branch on or None when the node is
    settled, multipliers).  min_x Eq1(x) + lam . (A(x) - limit) bounds the node for every lam >= 0."""
    t, limit = s.t, s.limit
    best_lb, best_lam, found, x_bad, worst = -np.inf, lam, None, None, -np.inf
    scale = 1.0 / np.maximum(limit, 1.0)
    shrink = 1.0
    for _ in range(steps):
        x, _, lb_w = s.solve_tables(lam, 1.0, allowed)
        if lb_w >= BIG / 2:
            return np.inf, None, None, lam       # every strategy left uses a forbidden configuration
        lb = lb_w - float(lam @ limit)
        if lb > best_lb:
            best_lb, best_lam = lb, lam
        else:
            shrink *= 0.5
        g = t.footprint(x) - limit
        eq1 = t.eq1(x)
        if DEBUG:
            print(f"solve {s.solves}: lb {lb:.6g} eq1 {eq1:.6g} over {(g * scale).max():.4f} "
                  f"lam {np.abs(lam).sum():.3g} inc {incumbent:.6g}")
        if (g <= 0).all():
            if found is None or eq1 < found[1]:
                found = (x, eq1)
        elif float((g * scale).max()) > worst:
            worst, x_bad = float((g * scale).max()), x
        target = min(incumbent, found[1]) if found else incumbent
        if best_lb >= target * (1 - REL_TOL) or s.spent(found is not None or target < ub_all * (1 - 1e-9)):
            break
        if target >= ub_all * (1 - 1e-9):       # nothing fits yet: aim a little above the bound
            target = lb + max(abs(lb), 1e-12) * 0.05
        gg = float(g @ g)
        if gg == 0:
            break
        lam = np.maximum(0.0, lam + shrink * ((target - lb) / gg) * g)
    settled = found is not None and best_lb >= found[1] * (1 - REL_TOL)
    branch_on = None if settled else (x_bad if x_bad is not None else found[0] if found else None)
    return best_lb, found, branch_on, best_lam


def _branch(t: Tables, allowed: list[np.ndarray], x: list[int], limit: np.ndarray) -> list[list[np.ndarray]]:
    """Split the configurations of one op: those with fewer bytes than x's on the most overfull
    device, and the rest (or, when no op can give bytes back there, x's configuration and the rest)."""
    g = (t.footprint(x) - limit) / np.maximum(limit, 1.0)
    d = int(np.argmax(g))
    best_v, best_gain = -1, 0.0
    for v in range(t.n):
        col = t.rows[t.node_ids[v], d]
        ok = allowed[v]
        if ok.sum() < 2:
            continue
        gain = col[x[v]] - col[ok].min()
        if gain > best_gain:
            best_v, best_gain = v, gain
    if best_v >= 0:
        col = t.rows[t.node_ids[best_v], d]
        less = allowed[best_v] & (col < col[x[best_v]])
        rest = allowed[best_v] & ~less
        return [_with(allowed, best_v, less), _with(allowed, best_v, rest)]
    for v in range(t.n):   # no op's own bytes: split on one op's configuration (edge terms differ)
        if allowed[v].sum() >= 2:
            only = np.zeros_like(allowed[v])
            only[x[v]] = True
            return [_with(allowed, v, allowed[v] & ~only), _with(allowed, v, only)]
    return []


def _with(allowed: list[np.ndarray], v: int, mask: np.ndarray) -> list[np.ndarray]:
    out = list(allowed)
    out[v] = mask
    return out


def least_memory(tables: Tables, limit: np.ndarray, max_evaluations: float,
                 rounds: int | None = None) -> tuple[list[int], np.ndarray, float]:
    """The strategy whose most overfull device is least overfull among those tried (relative
    to its budget), its footprint, and the least total footprint any strategy has (a bound
    behind the 'no plan fits' message).  Tried: the strategies of least priced footprint, the
    prices starting at 1 / budget and raised on the devices that are fuller than the rest
    (multiplicatively, ``rounds`` times): least memory in all piles everything on the fewest
    devices (each partition on the first devices: device 0), which is not the nearest miss.
    ``rounds``: SHORTFALL_ROUNDS unless given."""
    rounds = SHORTFALL_ROUNDS if rounds is None else rounds
    s = _Solver(tables, limit, max_evaluations)
    everything = [np.ones(len(i), bool) for i in tables.node_ids]
    x, _, _ = s.solve_tables(np.ones(tables.ndev), 0.0, everything)
    total_min = float(tables.footprint(x).sum())
    lam = np.where(limit > 0, 1.0 / np.maximum(limit, 1.0), 0.0)
    best, best_a, best_over = None, None, np.inf
    for _ in range(max(1, rounds)):
        y, _, _ = s.solve_tables(lam, 0.0, everything)
        a = tables.footprint(y)
        ratio = a / np.maximum(limit, 1.0)
        if ratio.max() < best_over:
            best, best_a, best_over = y, a, float(ratio.max())
        # fuller devices cost more next round (the squared ratio to the fullest, floored so an
        # idle device keeps a price and stays worth filling before the full ones)
        lam = lam * np.maximum(ratio / max(float(ratio.max()), 1e-30), 0.05) ** 2
        lam = lam / max(float(lam.max()), 1e-300) / np.maximum(limit, 1.0).min()
    return best, best_a, total_min


def does_not_fit(devices: DeviceGraph, tables: Tables, limit: np.ndarray, max_evaluations: float,
                 where: str, starts: Sequence[Sequence[int]] = (), unproven: int = 0,
                 recompute: bool = True) -> PlanDoesNotFitError:
    """The error when no plan fits: the smallest shortfall seen (over the plans of least priced
    memory, :func:`least_memory`, and ``starts``, the baselines: the one whose most overfull
    device lacks least), and what to do.  ``unproven``: the search stopped after that many
    elimination searches without finding a plan that fits or proving that none does (the
    message says so, and the error's ``proven`` is False).  ``recompute``: whether
    ``sw.search(..., recompute=True)`` would try recomputation here (advised only then)."""
    y, a, total_min = least_memory(tables, limit, max_evaluations)
    for x in starts:
        b = tables.footprint(list(x))
        if (b - limit).max() < (a - limit).max():
            a = b
    d = int(np.argmax(a - limit))
    name = devices.devices[d].name
    budget_note = "" if (limit >= np.array([dev.memory for dev in devices.devices])).all() else " (the budget)"
    total = float(limit.sum())
    why = (f"; every plan needs at least {format_bytes(total_min)} in all on the {len(limit)} devices, which have "
           f"{format_bytes(total)}" if total_min > total else "")
    head = (f"no plan fits in memory{where}" if not unproven else
            f"the memory-constrained search found no plan that fits{where} within {unproven} elimination searches "
            f"(and could not prove that none does)")
    msg = (f"{head}: the plan closest to fitting needs {format_bytes(a[d])} on device {d} "
           f"({name}), which has {format_bytes(limit[d])}{budget_note}, counting only parameters, optimizer state "
           f"and the activations kept for the backward pass{why}.  Swap activations to host memory "
           f"(sw.swap_plan), " + ("recompute them (sw.search(..., recompute=True)), " if recompute else "")
           + "use more devices or a smaller minibatch, or pass memory=False to plan anyway")
    return PlanDoesNotFitError(msg, d, int(a[d]), int(limit[d]), proven=not unproven)


def fitting(tables: Tables, limit: np.ndarray, to_plan: Any, max_evaluations: float,
            max_solves: int | None = None, starts: Sequence[Sequence[int]] = (),
            deadline: float | None = None, arena_of: Callable[[Any], np.ndarray] = arenas,
            ) -> tuple[Any, dict[str, Any]] | None:
    """The plan of least Eq. 1 whose memory plan fits ``limit`` on every device: :func:`solve`
    under the footprint, the memory plan checked, budgets lowered by what it needed beyond the
    footprint and solved again when it does not fit (TIGHTEN_ROUNDS times).  ``to_plan(choice)``
    makes a Plan.  None when no strategy satisfies the footprint constraint (none fits).
    ``deadline``: as :func:`solve` takes it.  ``arena_of``: :func:`arenas`, or one that remembers
    the plans it has planned (the staged search checks the same plan from several searches)."""
    budget = limit.astype(float).copy()
    first = None
    for round_ in range(TIGHTEN_ROUNDS + 1):
        try:
            sol = solve(tables, budget, max_evaluations, max_solves, starts, deadline)
        except SearchError:   # budgets lowered below every plan seen: on to the baselines
            if first is None:
                raise
            break
        if sol is None:
            if first is None:
                return None
            break
        first = first or sol
        plan = to_plan(sol.choice)
        arena = arena_of(plan)
        if (arena <= limit).all():
            exact = round_ == 0 and sol.exact
            return plan, {"exact": exact, "lower_bound": first.lower_bound, "cost": sol.cost,
                          "timed_out": sol.timed_out,
                          "tightened": round_, "solves": sol.solves, "branch_nodes": sol.nodes,
                          "footprint": tables.footprint(sol.choice).tolist(), "arena": arena.tolist(),
                          "limit": limit.tolist()}
        over = arena > limit
        extra = arena - tables.footprint(sol.choice)   # what the backward pass adds beyond the footprint
        budget = np.where(over, np.minimum(budget, limit - extra) - 1, budget)
        if (budget <= 0).any():
            break
    for x in sorted((list(x) for x in starts), key=tables.eq1):   # last: the baselines, by their memory plans
        if (tables.footprint(x) <= limit).all():
            plan = to_plan(x)
            arena = arena_of(plan)
            if (arena <= limit).all():
                return plan, {"exact": False, "lower_bound": first.lower_bound, "cost": tables.eq1(x),
                              "tightened": TIGHTEN_ROUNDS, "solves": first.solves, "branch_nodes": first.nodes,
                              "footprint": tables.footprint(x).tolist(), "arena": arena.tolist(),
                              "limit": limit.tolist()}
    raise SearchError(f"the memory-constrained search found plans whose footprint fits but not one whose memory "
                      f"plan fits (after {TIGHTEN_ROUNDS} rounds of lowering the budgets by the gradients' bytes); "
                      f"the best lower bound of the optimum is {first.lower_bound:.6g} s.  Swap activations "
                      f"(sw.swap_plan), recompute them (sw.search(..., recompute=True)), or pass memory=False")


def front(tables: Tables, limit: np.ndarray | None, start: Any, to_plan: Any, max_evaluations: float,
          max_points: int = 16, starts: Sequence[Sequence[int]] = ()) -> list[FrontPlan]:
    """The time / peak-memory front: from ``start`` (the fastest plan that fits), each next plan
    the fastest whose largest arena is below the previous one's, until none is (or max_points)."""
    from shardwise.iteration.memory import memory_plan

    ndev = tables.ndev
    cap = np.full(ndev, np.inf) if limit is None else limit.astype(float)
    points: list[FrontPlan] = []
    plan = start
    while plan is not None and len(points) < max_points:
        mp = memory_plan(plan, rings="auto")
        peak = max(mp.devices[d].arena_bytes for d in range(ndev))
        t = plan.cost
        if not points or (peak < points[-1].peak_bytes and t >= points[-1].time * (1 - REL_TOL)):
            points.append(FrontPlan(plan, t, int(peak), mp))
        below = np.minimum(cap, float(peak) - 1.0)
        try:
            found = fitting(tables, below, to_plan, max_evaluations, starts=starts)
        except SearchError:
            break
        plan = found[0] if found else None
        if plan is not None:
            plan.search_stats = dict(plan.search_stats, memory=found[1])
    return points
