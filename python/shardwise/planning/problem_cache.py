"""Cost tables kept between searches of the same problem.

Building a problem's configurations and cost tables (t_c, t_s, t_x) is most of a search:
Inception-v3 on 16 P100s spends about 30 ms of its ~100 ms there.  A program that searches
the same graph on the same machine again (a notebook, a sweep over memory budgets or
objectives, the benchmarks) gets the same tables, so ``sw.search`` keeps the problems of its
last MAX_KEPT plain searches and reuses one whose inputs are the same, with the elimination's
result on it (Kept.optimum).

The key is everything the problem is built from, as the C core receives it: the encoded
graph (every op's description, its producers and FLOPs), each device's FLOP/s, memory
bandwidth, memory, node and half-precision peaks, the widest-route bandwidths (with the
nodes and kinds, what the device sets the configurations are enumerated on are made of), the
cost options, the worker counts, and what decides that the search is a plain one (the
algorithm, the staged search's thresholds).  A graph or machine
edited in place, or other options, give another key; so a kept problem is only ever used
where building it afresh would give the same tables, bit for bit.  Searches with measured
costs (which change the node costs of the problem they build) and the staged searches of
large machines (which build their own problems) neither keep nor reuse one.

A kept problem is only read by the searches that reuse it: nothing changes its
configurations or tables after it is kept.  One search at a time holds it (the C problem is
used by one thread at a time): a search running beside it on another thread finds nothing
kept and builds its own, and ``holding`` (around ``sw.search``) hands it back at the end.
Beside it go the buffer totals of the plans its searches checked for memory (Kept), which are
functions of the same inputs and the plan.
"""
from __future__ import annotations

import functools
import hashlib
import threading
from collections import OrderedDict
from typing import Any, Callable, Sequence

import numpy as np

from shardwise.machine.devices import DeviceGraph
from shardwise.planning.problem import CostOptions, ProblemInputs

MAX_KEPT = 2   # problems kept (Inception-v3 on 16 devices: its shared transfer tables take about 1 MB)

_kept: "OrderedDict[bytes, Kept]" = OrderedDict()
_lock = threading.Lock()
_local = threading.local()   # .held: the entries this thread's searches hold, innermost last


def _held() -> list:
    held = getattr(_local, "held", None)
    if held is None:
        held = _local.held = []
    return held


def problem_key(inputs: ProblemInputs, devices: DeviceGraph, options: CostOptions, counts: Sequence[int],
                path: tuple) -> bytes:
    """A digest of everything a plain search's problem is built from (module docstring), and
    ``path``: what else decides whether the search is plain (its algorithm, the thresholds of
    the staged search), so that a kept problem is reused only by a search that would build
    the same."""
    h = hashlib.sha256()
    for arr in inputs.arrays():
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(memoryview(a).cast("B"))   # (its bytes, not copied)
    # what the device sets (machine/device_sets.py: nodes, kinds, link classes of the routes above)
    # and search_scale.symmetric read beside the arrays
    kinds = [(d.node, d.flops, d.mem_bandwidth, d.memory, d.flops_bf16, d.flops_fp16) for d in devices.devices]
    h.update(repr((options, tuple(int(k) for k in counts), kinds, path)).encode())
    return h.digest()


MAX_LOWERED = 8   # buffer totals kept per problem (one per plan searched on it, usually one)
MAX_OPTIMA = 4    # elimination results kept per problem (one per algorithm and bound searched, usually one)


class Kept:
    """A kept problem, the results of the searches run on it, and the buffer totals of the
    plans lowered on it.  Problem.search is a function of the problem's tables, the algorithm
    and the bound on its work alone (deterministic, whatever the threads), so a search of the
    same problem with the same algorithm and bound reads its (choice, cost, stats) here instead
    of eliminating again.  The memory check of a search (search_memory.fits) sums the buffers
    of its plan's task graph per device, a function of the problem's inputs and the plan's
    configurations alone, so a search that finds the same configurations again reads them
    here instead of lowering its plan again."""

    def __init__(self, problem: Any) -> None:
        self.problem = problem
        self.in_use = False   # a search holds it (get, put); holding hands it back
        self._totals: "OrderedDict[bytes, tuple[np.ndarray, np.ndarray]]" = OrderedDict()
        self._optima: "OrderedDict[tuple[str, float], tuple[np.ndarray, float, dict]]" = OrderedDict()
        self._rows: "OrderedDict[bytes, tuple[list, list[int]]]" = OrderedDict()

    def optimum(self, algorithm: str, limit: float) -> tuple[np.ndarray, float, dict] | None:
        """(choice, cost, stats) of Problem.search(algorithm, limit) on this problem (copies), or None."""
        with _lock:
            found = self._optima.get((algorithm, limit))
        return None if found is None else (found[0].copy(), found[1], dict(found[2]))

    def keep_optimum(self, algorithm: str, limit: float, result: tuple[np.ndarray, float, dict]) -> None:
        choice, cost, stats = result
        with _lock:
            self._optima[(algorithm, limit)] = (np.array(choice, copy=True), cost, dict(stats))
            while len(self._optima) > MAX_OPTIMA:
                self._optima.popitem(last=False)

    def chosen_rows(self, choice: np.ndarray, read: Callable[[Any, np.ndarray], tuple[list, list[int]]]
                    ) -> tuple[list, list[int]]:
        """read(problem, choice): the configuration rows a plan is made of (search._chosen_rows), read
        from the problem once per choice (a repeated search finds the same choice)."""
        key = np.asarray(choice, np.int32).tobytes()
        with _lock:
            found = self._rows.get(key)
        if found is None:
            found = read(self.problem, choice)
            with _lock:
                self._rows[key] = found
                while len(self._rows) > MAX_OPTIMA:
                    self._rows.popitem(last=False)
        return found

    def buffer_totals(self, choice: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
        """(bytes, buffers) per device of the plan giving op i configuration choice[i], or None."""
        with _lock:
            return self._totals.get(np.asarray(choice, np.int32).tobytes())

    def keep_buffer_totals(self, choice: np.ndarray, totals: tuple[np.ndarray, np.ndarray]) -> None:
        with _lock:
            self._totals[np.asarray(choice, np.int32).tobytes()] = totals
            while len(self._totals) > MAX_LOWERED:
                self._totals.popitem(last=False)


def get(key: bytes) -> Kept | None:
    """The problem kept under ``key`` (its configurations enumerated and tables built), held by
    this search until ``holding`` hands it back; None when none is kept or another search
    holds it."""
    with _lock:
        kept = _kept.get(key)
        if kept is None or kept.in_use:
            return None
        kept.in_use = True
        _kept.move_to_end(key)
    _held().append(kept)
    return kept


def put(key: bytes, problem: Any) -> Kept:
    """Keep ``problem`` (tables built, no measured costs applied) under ``key``, held by this
    search until ``holding`` hands it back; the oldest of more than MAX_KEPT goes."""
    with _lock:
        kept = _kept[key] = Kept(problem)
        kept.in_use = True
        _kept.move_to_end(key)
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)
    _held().append(kept)
    return kept


def holding(search: Callable) -> Callable:
    """``search``, handing back at its end (returned or raised) every kept problem it took."""
    @functools.wraps(search)
    def run(*args: Any, **kwargs: Any) -> Any:
        held = _held()
        depth = len(held)
        try:
            return search(*args, **kwargs)
        finally:
            with _lock:
                for kept in held[depth:]:
                    kept.in_use = False
            del held[depth:]
    return run


def clear() -> None:
    """Forget every kept problem (their memory goes with the last plan or search using them)."""
    with _lock:
        _kept.clear()
