"""What the C simulator replays with: each task's duration (the roofline model, or the measured
costs of a profile) and the machine's resources (devices, links, network cards, shared CPU cores),
numbered as the C engine numbers them.  Both the simulator and the swap planner's timeline read
them."""
from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import numpy as np

from shardwise import _core
from shardwise.errors import ConfigError
from shardwise.machine.devices import DeviceGraph, executor_threads
from shardwise.plan import Plan

# the task kinds that run a kernel (their durations come from compute costs, not from bytes moved)
COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats", "forward_partial"}


def _measured_split(plan: Plan, costs, op_name: str) -> tuple[float, float] | None:
    """(forward, backward) seconds of the op's partition from a profile, or None (model)."""
    split = getattr(costs, "split", None) if costs is not None else None
    if split is None or plan.configs[op_name].reduction is not None:
        return None   # partial-sum shards are not profiled: the model
    return split(op_name, plan.configs[op_name].degrees)


def device_fill(devices: DeviceGraph) -> np.ndarray:
    """Output elements a kernel needs to fill each device (its preset's ``fill_outputs``; 0
    where kernels run one at a time: CPU workers, devices without a preset kind)."""
    from shardwise.machine.devices import DEVICE_PRESETS

    return np.array([DEVICE_PRESETS[d.kind].fill_outputs if d.kind in DEVICE_PRESETS else 0.0
                     for d in devices.devices], np.float64)


def resolve_costs(plan: Plan, costs: Any) -> Any:
    """The costs to use for ``plan``: ``costs`` if given, None for ``"roofline"``, else the
    plan's own (those it was searched with)."""
    if isinstance(costs, str):
        if costs != "roofline":
            raise ConfigError(f"costs must be a profile, None (the plan's costs) or 'roofline', got {costs!r}")
        return None
    return plan.costs if costs is None else costs


def describe_costs(costs: Any) -> str:
    """A line naming the costs a figure was computed with, for printing beside it."""
    if costs is None:
        return "the roofline model"
    n = len(costs) if hasattr(costs, "__len__") else None
    what = f"{type(costs).__name__} of {n} measured partitions" if n is not None else type(costs).__name__
    return f"measured: {what}"


# ----------------------------------------------------------------------------- arguments of the C engine
class _Machine(NamedTuple):
    """The resources of a device graph as the C engine numbers them."""
    route_ptr: np.ndarray    # (D * D + 1,) int32: pair a -> b holds route_res[ptr[a*D+b]:ptr[a*D+b+1]]
    route_res: np.ndarray    # int32 resource ids
    nres: int
    cores: int
    name: Callable[[int], str]   # resource id -> "device 3", "core 0", "link 2->5", "nic 1 out"


# a preset machine's routes are listed for every pair up to this many devices (and kept on the
# device graph); above, for the pairs a task graph's transfers use (4,096 devices: 16.7 million
# pairs, 5 s and over 1 GB of temporaries to list them all)
UNIFORM_EVERY_PAIR_UP_TO = 1024


def _machine(devices: DeviceGraph, handle: Any = None) -> _Machine:
    """Resources as the C engine numbers them, cached on the device graph (a search simulates
    many plans on one machine; at 1,024 devices the pairs number a million).

    Device d is resource d; on CPU workers sharing this machine's cores, thread c of the CPU
    backend (:func:`shardwise.train.runtime.executor_threads` of them) is resource ndev + c ("core c");
    then the links (or network adapters) of every route a -> b, listed per pair.

    On a machine without a preset's structure, ``handle`` (a lowered task graph) limits the
    routes listed to the pairs its transfers use: every pair's routes over a chain of D devices
    hold D^3 / 3 links (22.9 billion at 4,096), its transfers' routes far fewer."""
    nics = _nics(devices)
    key = (len(devices), devices.shared_cores, nics)
    cached = devices.__dict__.get("_sim_machine")   # dropped by add_device and add_link
    if cached is not None and cached[0] == key:
        return cached[1]
    n = len(devices)
    shared = getattr(devices, "shared_cores", None)
    cores = executor_threads(n, shared) if shared else 0
    uniform = devices._uniform
    if uniform is not None and uniform.direct_is_widest(n):
        if n > UNIFORM_EVERY_PAIR_UP_TO and handle is not None:   # this task graph's pairs only, not kept
            return _uniform_machine(n, uniform.per, cores, nics, _transfer_pairs(handle))
        machine = _uniform_machine(n, uniform.per, cores, nics)
    elif handle is not None:
        return _routed_machine(devices, cores, _transfer_pairs(handle))   # for this task graph only
    else:
        machine = _routed_machine(devices, cores)
    devices.__dict__["_sim_machine"] = (key, machine)
    return machine


def _transfer_pairs(handle: Any) -> np.ndarray:
    """The (source, destination) device pairs the transfers of a lowered task graph use, (P, 2)
    int64, sorted."""
    a = handle.arrays()
    src, dst = np.asarray(a["src_device"], np.int64), np.asarray(a["device"], np.int64)
    moving = (src >= 0) & (src != dst)
    ndev = int(max(src.max(initial=0), dst.max(initial=0))) + 1
    keys = np.unique(src[moving] * ndev + dst[moving])
    return np.stack([keys // ndev, keys % ndev], axis=1)


def _pair_ptr(n: int, keys: np.ndarray, start: np.ndarray) -> np.ndarray:
    """The engine's (n * n + 1,) int32 pointer over every pair a * n + b from the listed pairs
    alone: ``keys`` (P,) ascending, whose routes start at ``start`` (P + 1,) (the last entry: the
    end).  Pairs not listed hold nothing: ptr[k] is the start of the first listed pair at or
    after k.  One pass over the n * n entries (a count per pair and its running sum took three,
    50 ms at 4,096 devices, and a search replays dozens of plans)."""
    runs = np.diff(np.concatenate([[-1], keys, [n * n]]))   # k in (keys[i-1], keys[i]] -> start[i]
    return np.repeat(start.astype(np.int32), runs)


def _nics(devices: DeviceGraph) -> str | None:
    """How traffic between nodes reaches the network: ``"node"`` (one adapter per node, shared
    by its devices), ``"device"`` (one adapter per device), or None (each pair its own link)."""
    if getattr(devices, "nic_per_device", False):
        return "device"
    return "node" if devices.shared_nics else None


def _uniform_machine(n: int, per: int, cores: int, nics: str | None, pairs: np.ndarray | None = None) -> _Machine:
    """A preset's resources without listing routes one pair at a time: every pair inside a
    node holds its own link; between nodes (``nics`` "node" or "device") the source's adapter,
    send side, and the destination's, receive side, an adapter being a node's or a device's.
    Ids after the devices and cores: the links of node k, pair (i, j) of local devices at
    k*per*(per-1) + i*(per-1) + j - (j > i), then adapter m's send side at 2m and its receive
    side at 2m + 1 (m: a node, or a device).  ``pairs``: (P, 2) source and destination devices whose
    routes are listed (the others empty), sorted, each once; None: every pair."""
    base = n + cores
    nlinks = n * (per - 1)
    if pairs is None:
        a, b = np.divmod(np.arange(n * n, dtype=np.int64), n)
    else:
        a, b = pairs.reshape(-1, 2)[:, 0], pairs.reshape(-1, 2)[:, 1]
    a, b = a[a != b], b[a != b]
    node_a, node_b = a // per, b // per
    i, j = a % per, b % per
    link = base + node_a * per * (per - 1) + i * (per - 1) + j - (j > i)
    crosses = (node_a != node_b) & (nics is not None)
    nic_a, nic_b = (a, b) if nics == "device" else (node_a, node_b)
    counts = np.where(crosses, 2, 1)
    first = np.where(crosses, base + nlinks + 2 * nic_a, link)
    start = np.zeros(len(a) + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    ptr = _pair_ptr(n, a * n + b, start)   # at most 2 resources a pair: int32 for 2^30 pairs
    res = np.empty(int(start[-1]), np.int64)
    starts = start[:-1]
    res[starts] = first
    second = crosses.nonzero()[0]
    res[starts[second] + 1] = base + nlinks + 2 * nic_b[second] + 1
    nadapters = {"device": n, "node": (n + per - 1) // per, None: 0}[nics]

    def name(r: int) -> str:
        if r < n:
            return f"device {r}"
        if r < base:
            return f"core {r - n}"
        r -= base
        if r < nlinks:
            k, rest = divmod(r, per * (per - 1))
            li, lj = divmod(rest, per - 1)
            lj += lj >= li
            return f"link {k * per + li}->{k * per + lj}"
        k, side = divmod(r - nlinks, 2)
        owner = "device" if nics == "device" else ""
        return f"nic {owner + ' ' if owner else ''}{k} {'in' if side else 'out'}"

    return _Machine(ptr, res.astype(np.int32), base + nlinks + 2 * nadapters, cores, name)


def _routed_machine(devices: DeviceGraph, cores: int, pairs: Any = None) -> _Machine:
    """Any device graph: each pair's route (:meth:`DeviceGraph.route`'s rule, searched in C for
    these pairs only); only ``pairs`` ((P, 2) sources and destinations; every pair when None)
    are listed, the others empty.  Ids after the devices and cores: link k of the device graph's
    link table (sorted by source, then destination) is base + k, then adapter m's send side
    base + L + 2m and its receive side base + L + 2m + 1 (m: a device, or the m-th node in
    number order), named from their numbers only when asked.  Nothing is kept: a parameter
    server over a chain of 4,096 devices routes 17 million hops, listed once per replay."""
    n = len(devices)
    if pairs is None:
        a, b = np.divmod(np.arange(n * n, dtype=np.int64), n)
    else:
        a, b = np.asarray(pairs, np.int64).reshape(-1, 2).T
    keys = np.unique(a[a != b] * n + b[a != b])   # each pair once, in order
    a, b = keys // n, keys % n
    src, dst, _ = devices._link_table()
    nlinks = len(src)
    base = n + cores
    # between the nodes of a cluster, a transfer holds the source's adapter (send side) and the
    # destination's (receive side): a device's own, or its node's shared by the node's devices
    nics = _nics(devices)
    node = np.array([d.node for d in devices.devices], np.int64)
    nodes = np.unique(node)
    adapter = np.arange(n) if nics == "device" else np.searchsorted(nodes, node)
    crosses = (node[a] != node[b]) if nics is not None else np.zeros(len(keys), bool)
    ptr, links = devices._widest_routes(a[~crosses], b[~crosses])
    counts = np.full(len(keys), 2, np.int64)
    counts[~crosses] = np.diff(ptr)
    start = np.zeros(len(keys) + 1, np.int64)
    np.cumsum(counts, out=start[1:])
    if start[-1] >= 2 ** 31:
        raise ConfigError(f"the routes of {len(keys)} device pairs hold 2^31 links or more: too many to simulate")
    # link k and adapter sides numbered from 0 here, then all shifted past the devices and cores
    if crosses.any():
        res = np.empty(int(start[-1]), np.int32)
        # each routed pair's links, moved from their place in `links` to their pair's in `res`
        # (int32 offsets: fewer than 2^31 entries)
        at = np.repeat((start[:-1][~crosses] - ptr[:-1]).astype(np.int32), np.diff(ptr))
        at += np.arange(len(links), dtype=np.int32)
        res[at] = links
        first = start[:-1][crosses]
        res[first] = nlinks + 2 * adapter[a[crosses]]
        res[first + 1] = nlinks + 2 * adapter[b[crosses]] + 1
    else:   # links only, already in the pairs' order (17 million at 4,096 devices: not copied)
        res = links
    res += np.int32(base)
    route_ptr = _pair_ptr(n, keys, start)
    nadapters = {"device": n, "node": len(nodes), None: 0}[nics]

    def name(r: int) -> str:
        if r < n:
            return f"device {r}"
        if r < base:
            return f"core {r - n}"
        if r < base + nlinks:
            return f"link {src[r - base]}->{dst[r - base]}"
        m, side = divmod(r - base - nlinks, 2)
        owner = f"device {m}" if nics == "device" else f"{nodes[m]}"
        return f"nic {owner} {'in' if side else 'out'}"

    return _Machine(route_ptr, res, base + nlinks + 2 * nadapters, cores, name)


def _cost_arrays(plan: Plan, costs) -> tuple[np.ndarray | None, np.ndarray | None, np.ndarray | None, float]:
    """(split, element_seconds, element_fixed, copy_bandwidth) of a profile for the C engine."""
    if costs is None:
        return None, None, None, 0.0
    split = np.full((len(plan.graph.ops), 2), np.nan)
    for op in plan.graph.ops:
        measured = _measured_split(plan, costs, op.name)
        if measured is not None:
            split[op.index] = measured
    rates = np.full(len(_core.TASK_KINDS), np.nan)
    fixed = np.full(len(_core.TASK_KINDS), np.nan)
    for kind, rate in getattr(costs, "element_seconds", {}).items():
        if kind in _core.TASK_KINDS and kind not in COMPUTE_KINDS:
            rates[_core.TASK_KINDS.index(kind)] = rate
            fixed[_core.TASK_KINDS.index(kind)] = getattr(costs, "element_fixed", {}).get(kind, np.nan)
    return split, rates, fixed, _measured(costs, "copy_bandwidth")


def _measured(costs, name: str) -> float:
    """One of a profile's measured figures (``copy_bandwidth``; ``step_overhead``: a step's
    time outside its tasks, added to the replayed makespan), or 0 without costs or that figure."""
    return float(getattr(costs, name, 0.0) or 0.0)


def host_bandwidths(plan: Plan) -> np.ndarray:
    """(2 * ndev,) float64: device-to-host and host-to-device bytes/s of every device (what swap
    tasks are timed with)."""
    return np.repeat(np.array([d.host_bandwidth for d in plan.devices.devices], np.float64), 2)
