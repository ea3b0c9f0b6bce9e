"""Cost tables kept between searches of the same problem.

Building a problem's configurations and cost tables (t_c, t_s, t_x) is most of a search:
Inception-v3 on 16 P100s spends about 30 ms of its ~100 ms there.  A program that searches
the same graph on the same machine again (a notebook, a sweep over memory budgets or
objectives, the benchmarks) gets the same tables, so ``sw.search`` keeps the problems of its
last MAX_KEPT plain searches and reuses one whose inputs are the same.

The key is everything the problem is built from, as the C core receives it: the encoded
graph (every op's description, its producers and FLOPs), each device's FLOP/s, memory
bandwidth and half-precision peaks, the widest-route bandwidths, the cost options, the
worker counts and the device sets the configurations are enumerated on, and what decides
that the search is a plain one (the algorithm, the staged search's thresholds).  A graph or machine
edited in place, or other options, give another key; so a kept problem is only ever used
where building it afresh would give the same tables, bit for bit.  Searches with measured
costs (which change the node costs of the problem they build) and the staged searches of
large machines (which build their own problems) neither keep nor reuse one.

A kept problem is only read by the searches that reuse it: nothing changes its
configurations or tables after it is kept.
"""
from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Any, Sequence

import numpy as np

from shardwise.machine.devices import DeviceGraph
from shardwise.planning.problem import CostOptions, ProblemInputs

MAX_KEPT = 2   # problems kept (Inception-v3 on 16 devices: about 40 MB of tables each)

_kept: "OrderedDict[bytes, Any]" = OrderedDict()
_lock = threading.Lock()


def problem_key(inputs: ProblemInputs, devices: DeviceGraph, options: CostOptions, counts: Sequence[int],
                sets: Sequence[Sequence[int]], path: tuple) -> bytes:
    """A digest of everything a plain search's problem is built from (module docstring), and
    ``path``: what else decides whether the search is plain (its algorithm, the thresholds of
    the staged search), so that a kept problem is reused only by a search that would build
    the same."""
    h = hashlib.sha256()
    for arr in inputs.arrays():
        a = np.ascontiguousarray(arr)
        h.update(f"{a.dtype.str}{a.shape}".encode())
        h.update(a.tobytes())
    # what search_scale.symmetric reads beside the arrays: the half-precision peaks
    peaks = [(d.flops, d.mem_bandwidth, d.flops_bf16, d.flops_fp16) for d in devices.devices]
    h.update(repr((options, tuple(int(k) for k in counts), peaks,
                   [tuple(int(x) for x in s) for s in sets], path)).encode())
    return h.digest()


def get(key: bytes) -> Any:
    """The problem kept under ``key`` (its configurations enumerated and tables built), or None."""
    with _lock:
        problem = _kept.get(key)
        if problem is not None:
            _kept.move_to_end(key)
        return problem


def put(key: bytes, problem: Any) -> None:
    """Keep ``problem`` (tables built, no measured costs applied) under ``key``; the oldest of
    more than MAX_KEPT goes."""
    with _lock:
        _kept[key] = problem
        _kept.move_to_end(key)
        while len(_kept) > MAX_KEPT:
            _kept.popitem(last=False)


def clear() -> None:
    """Forget every kept problem (their memory goes with the last plan or search using them)."""
    with _lock:
        _kept.clear()
