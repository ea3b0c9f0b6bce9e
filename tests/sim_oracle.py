"""An independent replay of one training iteration, to check the C simulator against.

The package has one simulator (csrc/sim/sim_durations.c, order.c, sim_plan.c, simulate.c behind
``sw.simulate``).  This module computes the same iteration another way, in plain Python, from
what the package shows of a plan: the task graph ``sw.lower(plan)`` (tasks with their
dependencies, reads and writes) and the memory plan's reuse edges ``sw.memory_plan(plan)``.

* durations: compute tasks share their worker's roofline forward time (``Problem.worker_times``,
  the per-worker term of t_c) x1 forward and x2 backward, or a profile's measured forward /
  backward split, in proportion to their FLOPs (each the forward's, a bias's gradient one per
  element of the output gradient it sums); a recompute its forward task's time, outside the
  sharing (it runs the forward again); bookkeeping tasks their memory traffic, or a profile's fixed + per-element
  seconds; transfers bytes over the route's (or the profile's copy) bandwidth;
* order, as the runtime keeps it: each device's tasks in program order (one stream each), every
  task after its dependencies and after the reuse edges into it;
* resources: a device (and its core: on CPU workers sharing this machine's cores, thread c runs
  the streams of devices c, c + threads, ..., one task at a time), the links of a transfer's
  route or the two nodes' network adapters (and the receiving core); among the ready tasks, the
  lowest task id first on every resource (a free thread takes its earliest ready task);
* ranks (an MPI job, ``ranks=``: the rank of each device): a copy between devices of different
  ranks takes the rank link's latency + bytes / its bandwidth (0: the copy's bandwidth as in one
  process) and, on shared cores, holds the sending core too;
* an event loop over a heap of finishing times.
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass

import numpy as np

import shardwise as sw
from shardwise.ops.box import volume
from shardwise.plan import reduction_pair
from shardwise.planning.problem import make_problem

COMPUTE_KINDS = {"forward", "loss", "backward_data", "backward_weight", "bn_stats", "bn_apply",
                 "bn_backward_stats", "forward_partial"}
BYTES_PER_ELEMENT = 4


@dataclass
class Replay:
    iteration_time: float            # the latest end, plus a profile's step overhead
    start: list[float]
    end: list[float]
    resources: list[tuple[str, ...]]
    busy: dict[int, float]           # seconds each device computed


def _measured_split(plan, costs, op_name):
    if costs is None or plan.configs[op_name].reduction is not None:
        return None   # partial-sum shards are not profiled: the model
    return costs.split(op_name, plan.configs[op_name].degrees)


def _flop_weight(tg, t) -> float:
    """A compute task's part of its worker's phase in forward-FLOP units: 1, or for the
    gradient of a bias the elements of the output gradient it sums over the forward's FLOPs."""
    op = tg.plan.graph[t.op]
    if t.kind != "backward_weight" or not op.desc.inputs[t.slot].bias:
        return 1.0
    desc, cfg = op.desc, tg.plan.configs[t.op]
    outputs = tg.buffers[t.reads[0]].elements           # dy (or y when no gradient flows): the worker's block
    points = outputs * np.prod(desc.extents[desc.out_rank:], dtype=float) / reduction_pair(op, cfg)[1]
    flops = points * desc.flops_per_point + outputs * desc.flops_per_output
    return outputs / flops if flops > outputs else 1.0


def task_durations(tg, costs=None) -> list[float]:
    """Seconds of every task of ``tg`` (transfers: 0 here, their links decide)."""
    plan, graph = tg.plan, tg.plan.graph
    devices = plan.devices.devices
    problem = make_problem(graph, plan.devices, plan.options)
    shares: dict[tuple[str, int, bool], float] = {}
    weights = [_flop_weight(tg, t) if t.kind in COMPUTE_KINDS or t.kind == "recompute" else 0.0 for t in tg.tasks]
    for t, weight in zip(tg.tasks, weights):
        if t.kind in COMPUTE_KINDS:
            key = (t.op, t.worker, t.phase == "forward")
            shares[key] = shares.get(key, 0.0) + weight
    rates = getattr(costs, "element_seconds", {}) if costs is not None else {}
    fixed = getattr(costs, "element_fixed", {}) if costs is not None else {}
    roofline: dict[str, np.ndarray] = {}
    out = []
    for t in tg.tasks:
        membw = devices[t.device].mem_bandwidth
        transfer = is_transfer(t)
        if t.kind in COMPUTE_KINDS or t.kind == "recompute":
            forward = t.phase == "forward" or t.kind == "recompute"
            share = weights[t.id] / shares[(t.op, t.worker, forward)]
            measured = _measured_split(plan, costs, t.op)
            if measured is not None:
                out.append((measured[0] if forward else measured[1]) * share)
                continue
            if t.op not in roofline:
                cfg = plan.configs[t.op]
                roofline[t.op] = problem.worker_times(graph[t.op].index, np.asarray(cfg.degrees, np.int32),
                                                      np.asarray(cfg.devices, np.int32),
                                                      reduction_pair(graph[t.op], cfg))
            out.append(float(roofline[t.op][t.worker]) * (1.0 if forward else 2.0) * share)
        elif t.kind in rates and not transfer:
            elements = volume(t.box) if t.box is not None else tg.buffers[t.writes[0]].elements
            out.append(fixed.get(t.kind, 0.0) + rates[t.kind] * elements)
        elif t.kind == "copy" and not transfer:
            out.append(2 * t.elements * BYTES_PER_ELEMENT / membw)   # a local memcpy
        elif t.kind in ("accumulate", "reduce", "stats_reduce", "sum_partials"):
            elements = t.elements if t.box else tg.buffers[t.writes[0]].elements * len(t.reads)
            out.append(3 * elements * BYTES_PER_ELEMENT / membw)
        elif t.kind == "activation_grad":   # read the gradient and the output, write the result
            out.append(3 * tg.buffers[t.writes[0]].elements * BYTES_PER_ELEMENT / membw)
        elif t.kind == "zero_grad":
            out.append(tg.buffers[t.writes[0]].elements * BYTES_PER_ELEMENT / membw)
        elif t.kind == "update":            # read w, g, m; write w, m (of its box: a chunk under sync zero)
            elements = volume(t.box) if t.box else tg.buffers[t.reads[0]].elements
            out.append(5 * elements * BYTES_PER_ELEMENT / membw)
        else:                               # load_input, join, transfers
            out.append(0.0)
    return out


def is_transfer(t) -> bool:
    """A copy between two devices, or a fused ring's link (``sw.lower(plan, rings="fused")``)."""
    return (t.kind == "copy" and t.src_device != t.device) or t.kind == "ring"


def threads_of(devices: sw.DeviceGraph) -> int:
    """The CPU backend's threads when workers share this machine's cores (0: they do not)."""
    shared = getattr(devices, "shared_cores", None)
    return min(len(devices), shared) if shared else 0


def resources_of(t, devices: sw.DeviceGraph, threads: int, ranks=None) -> tuple[str, ...]:
    if is_transfer(t):
        a, b = t.src_device, t.device
        na, nb = devices.devices[a].node, devices.devices[b].node
        if getattr(devices, "nic_per_device", False) and na != nb:
            route = (f"nic device {a} out", f"nic device {b} in")
        elif devices.shared_nics and na != nb:
            route = (f"nic {na} out", f"nic {nb} in")
        else:
            route = tuple(f"link {u}->{v}" for u, v in devices.route(a, b))
        cores = (f"core {t.device % threads}",) if threads else ()   # the receiving thread copies
        if threads and ranks is not None and ranks[a] != ranks[b] and a % threads != b % threads:
            cores += (f"core {a % threads}",)   # a message: the sending thread packs it
        return route + cores
    if t.kind in ("join", "load_input"):
        return ()
    return (f"device {t.device}",) + ((f"core {t.device % threads}",) if threads else ())


def runtime_order(tg, reuse_edges, threads: int = 0) -> list[tuple[int, ...]]:
    """What every task runs after: the task before it on its device's stream, its dependencies
    and the reuse edges into it (a thread's core orders nothing more: it is a resource, taken
    by the earliest ready task; ``threads`` is kept for callers that pass it)."""
    reuse_in: dict[int, list[int]] = {}
    for a, b in reuse_edges:
        reuse_in.setdefault(b, []).append(a)
    last_on_device: dict[int, int] = {}
    out = []
    for t in tg.tasks:
        after = set(t.deps) | set(reuse_in.get(t.id, ()))
        if t.device in last_on_device:
            after.add(last_on_device[t.device])
        last_on_device[t.device] = t.id
        out.append(tuple(sorted(after)))
    return out


def event_loop(deps: list[tuple[int, ...]], durations: list[float], resources: list[tuple[str, ...]],
               rank: list[tuple[int, int]] | None = None) -> list[float]:
    """Start times: a task starts when its dependencies are done and it is first in line (lowest
    id among the ready, or lowest ``rank``) on every resource it needs, all of them free; tasks
    that need nothing start when ready; everything that ends at one instant releases its
    resources before anything new starts."""
    key = rank if rank is not None else list(range(len(deps)))
    n = len(deps)
    dependents: list[list[int]] = [[] for _ in range(n)]
    missing = [len(d) for d in deps]
    for i in range(n):
        for d in deps[i]:
            dependents[d].append(i)
    busy: set[str] = set()
    lines: dict[str, list[int]] = {}
    running: list[tuple[float, int]] = []
    start = [0.0] * n

    def ready(tid: int, now: float) -> None:
        if not resources[tid]:
            start[tid] = now
            heapq.heappush(running, (now + durations[tid], tid))
            return
        for r in resources[tid]:
            heapq.heappush(lines.setdefault(r, []), (key[tid], tid))

    def start_what_can(now: float) -> None:
        progress = True
        while progress:
            progress = False
            for r, line in lines.items():
                if r in busy or not line:
                    continue
                tid = line[0][1]
                if all(q not in busy and lines[q][0][1] == tid for q in resources[tid]):
                    for q in resources[tid]:
                        heapq.heappop(lines[q])
                        busy.add(q)
                    start[tid] = now
                    heapq.heappush(running, (now + durations[tid], tid))
                    progress = True

    for i in range(n):
        if missing[i] == 0:
            ready(i, 0.0)
    start_what_can(0.0)
    finished = 0
    while running:
        now, tid = heapq.heappop(running)
        finished += 1
        busy.difference_update(resources[tid])
        for dep in dependents[tid]:
            missing[dep] -= 1
            if missing[dep] == 0:
                ready(dep, now)
        if running and running[0][0] == now:
            continue
        start_what_can(now)
    if finished != n:
        raise RuntimeError(f"the oracle's replay stopped with {n - finished} tasks never ready (a cycle?)")
    return start


def replay(plan, costs=None, reuse_edges=None, order=None, rank=None, ranks=None, rank_link=(0.0, 0.0),
           recompute=None, rings="chunked") -> Replay:
    """One iteration of ``plan`` as the runtime runs it.  ``reuse_edges``: (from, to) pairs
    (default: the memory plan's, ``sw.memory_plan(plan).reuse_edges``; () to leave them out).
    ``order`` (what each task runs after) and ``rank`` (per task, the key of its place in every
    line: (-priority, id) under a schedule) replace the one-stream order and program order.
    ``ranks``: the rank of each device (None: one process); ``rank_link``: (bytes/s, seconds
    per message) of a copy between ranks (a fused ring's link: one message per chunk it carries).
    ``recompute`` and ``rings``: as ``sw.lower`` takes them."""
    tg = sw.lower(plan, recompute=recompute, rings=rings)
    devices = plan.devices
    if reuse_edges is None:
        reuse_edges = sw.memory_plan(tg).reuse_edges
    threads = threads_of(devices)
    durations = task_durations(tg, costs)
    route_bw = devices.route_bandwidths()
    copy_bw = float(getattr(costs, "copy_bandwidth", 0.0) or 0.0) if costs is not None else 0.0
    for t in tg.tasks:
        if is_transfer(t):
            bw = copy_bw or route_bw[t.src_device, t.device]
            if ranks is not None and ranks[t.src_device] != ranks[t.device]:
                messages = t.slot if t.kind == "ring" else 1
                durations[t.id] += messages * rank_link[1] + t.nbytes / (rank_link[0] or bw)
            else:
                durations[t.id] += t.nbytes / bw
    resources = [resources_of(t, devices, threads, ranks) for t in tg.tasks]
    if order is None:
        order = runtime_order(tg, reuse_edges, threads)
    start = event_loop(order, durations, resources, rank)
    end = [s + d for s, d in zip(start, durations)]
    busy = {d: 0.0 for d in range(len(devices))}
    for t, r in zip(tg.tasks, resources):
        if r and r[0].startswith("device"):
            busy[t.device] += end[t.id] - start[t.id]
    step = float(getattr(costs, "step_overhead", 0.0) or 0.0) if costs is not None else 0.0
    return Replay(max(end, default=0.0) + step, start, end, resources, busy)
