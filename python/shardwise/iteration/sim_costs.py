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
    routes listed to the pairs its transfers use: walking every pair's route of a chain of
    D devices is D^3 / 3 steps (minutes at 256), its transfers' routes far fewer."""
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
        pairs = [(int(a), int(b)) for a, b in _transfer_pairs(handle).tolist()]
        return _routed_machine(devices, cores, pairs)   # for this task graph only
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
    routes are listed (the others empty); None: every pair."""
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
    ptr = np.zeros(n * n + 1, np.int32)   # at most 2 resources a pair: int32 for 2^30 pairs
    pair_counts = np.zeros(n * n, np.int32)
    pair_counts[a * n + b] = counts
    np.cumsum(pair_counts, out=ptr[1:])
    res = np.empty(int(ptr[-1]), np.int64)
    starts = ptr[a * n + b]
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
    """Any device graph: each pair's route (:meth:`DeviceGraph.route`); only ``pairs`` (every
    pair when None) are listed, the others empty.  Links and adapters are numbered once per
    device graph, in order of first use, after the devices and cores; each pair's resources are
    kept as an array of those numbers, so a replay lists its pairs by concatenation (a parameter
    server over a chain of 1,024 devices routes a million hops)."""
    n = len(devices)
    if pairs is None:
        pairs = [(a, b) for a in range(n) for b in range(n) if a != b]
    kept = devices.__dict__.setdefault("_route_ids", {"ids": {}, "names": [], "pairs": {}})
    ids, names, route_of = kept["ids"], kept["names"], kept["pairs"]   # resource name -> number; pair -> numbers
    base = n + cores
    counts = np.zeros(n * n, np.int32)
    listed: list[np.ndarray] = []
    for a, b in sorted(pairs):
        row = route_of.get((a, b))
        if row is None:
            numbers = []
            for r in _route_resources(devices, a, b):
                if r not in ids:
                    ids[r] = len(names)
                    names.append(r)
                numbers.append(ids[r])
            row = route_of[(a, b)] = np.asarray(numbers, np.int32)
        counts[a * n + b] = len(row)
        listed.append(row)
    if sum(len(row) for row in listed) >= 2 ** 31:
        raise ConfigError(f"the routes of {len(listed)} device pairs hold 2^31 links or more: too many to simulate")
    route_ptr = np.zeros(n * n + 1, np.int32)
    np.cumsum(counts, out=route_ptr[1:])
    route_res = (np.concatenate(listed) if listed else np.zeros(0, np.int32)) + np.int32(base)
    fixed = [f"device {d}" for d in range(n)] + [f"core {c}" for c in range(cores)]

    def name(r: int) -> str:
        return fixed[r] if r < base else names[r - base]

    return _Machine(route_ptr, route_res, base + len(names), cores, name)


def _route_resources(devices: DeviceGraph, a: int, b: int) -> tuple[str, ...]:
    """What a transfer from device a to device b holds: its route's links, or between the
    nodes of a cluster the source node's adapter (send side) and the destination's (receive)."""
    na, nb = devices.devices[a].node, devices.devices[b].node
    nics = _nics(devices)
    if nics == "device" and na != nb:
        return (f"nic device {a} out", f"nic device {b} in")
    if nics == "node" and na != nb:
        return (f"nic {na} out", f"nic {nb} in")
    return tuple(f"link {u}->{v}" for u, v in devices.route(a, b))


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
