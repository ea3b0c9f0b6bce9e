"""The task graph of one training iteration of a plan: a read-only view of the C lowering.

    tg = sw.lower(plan)
    tg.tasks[i].kind / .device / .reads / .writes / .deps   # plain, frozen records
    tg.buffers[b].device / .kind / .op / .box
    tg.bytes_moved()              # equals plan.bytes_moved (same regions, same sync model)
    tg.memory_per_device()        # the sum of every buffer's bytes per device
    tg = sw.lower(plan, schedule="critical_path")   # or a Schedule; swap=sw.swap_plan(plan, budget)
    tg = sw.lower(plan, recompute="all")            # or a set of op names: feature maps recomputed
    sw.memory_plan(tg), sw.simulate(tg), sw.schedule(tg), sw.swap_plan(tg, budget)   # no lowering again

csrc/graph/lower.c is the only lowering, and a plan is lowered once: ``lower`` builds one
``_core.TaskGraph`` (csrc/py/taskgraph_py.c, csrc/graph/lowering.c), the C handle that the
memory plan, the order, the simulator, the schedule and swap passes and the runtime all take,
with its annotations (a schedule's streams, a swap plan's swap tasks) carried on the graph they
were made for.  This module turns its arrays into Python records for the trainer, profiles,
pictures and tests (the simulator's test oracle among them).  What the lowering builds, per
worker of every op:

forward
    for each data input: the *region* it reads (from the op description,
    halos included) gathered into a staging buffer by ``copy`` tasks from the
    producer's workers that own its pieces, with a ``join`` when there are
    several (no copy when the region is exactly a shard already on the device:
    the buffer is shared); a ``forward`` task (batchnorm: ``bn_stats`` ->
    statistics reduced among the workers of the same channels -> ``bn_apply``,
    which also updates the worker's ``running_stats`` in place in a training step;
    softmax: ``loss``; a split reduction: ``forward_partial`` on every worker,
    the partial outputs copied to the block's owner and summed by
    ``sum_partials``).
backward (ops in reverse order)
    ``backward_data`` per data input: a partial gradient over the same region,
    sent back to the owners and summed there by ``accumulate`` tasks in a
    fixed order (so sums do not depend on timing); the first term of a gradient
    shard, when the region is that whole shard on the same device, is written
    in place into the ``grad`` buffer instead (no ``accumulate``: the first one
    would only copy it); ``zero_grad`` for a block of the output's gradient no
    consumer reads; ``backward_weight`` per weight
    slot: the gradient of the worker's slice of that weight (TurboDL's dW), or
    of a bias (dB: ``InputDesc.bias``), which reads the output's gradient alone.
synchronization and update
    workers reading the same weight box are replicas; with the parameter
    server model the first replica's device sums the gradients (``copy`` +
    ``reduce``), applies ``update`` (reading the parameter, its gradient and the
    optimizer's state buffers, kind ``momentum``: SGD's momentum, or Adam's first and
    second moments) and sends the parameters back.  With the ring model
    (``CostOptions(sync="ring")``) a group of k > 1 replicas is a ring all-reduce of
    the gradient cut into k chunks along a dimension (csrc/graph/lower_backward.c,
    sync_ring): k - 1 rounds of reduce-scatter (each member ``copy``-ies a chunk to
    the next, which adds it into its ``param_grad`` with an ``accumulate``), k - 1
    rounds of allgather (the summed chunks passed on, each ``copy``-ied into the
    member's gradient on its own device), then every member applies ``update`` to
    its own parameters with its own state buffers, so no parameters are sent back;
    a gradient with fewer than k rows in every dimension uses the parameter server.
    With ``sync="zero"`` (ZeRO stage 1: the optimizer state sharded) the reduce-scatter is
    the same, then member i alone applies ``update`` to the chunk it holds summed (the
    task's box; its ``momentum`` buffers hold that chunk only, 1/k of the ring's), and
    the allgather passes the updated parameter chunks, ``copy``-ied into each member's
    ``param``: the same bytes as the ring, parameters bitwise the ring's.

recomputation (csrc/graph/recompute.c, only with ``lower(plan, recompute=...)``)
    ``recompute`` runs a forward task again (its op's forward kernel on the same inputs) right
    before the first backward task reading its feature map, into a new buffer of the map's kind,
    which the backward tasks read instead; the map itself ends after its last forward use.

fused rings (only with ``lower(plan, rings="fused")``: a model for the simulator)
    each ring all-reduce is written as one ``ring`` task per ring link (on the receiving
    member's device, from the sender: every chunk that link carries, ``slot`` of them, in one
    transfer of their bytes), all after one ``join`` of the members' gradients and before one
    ``join`` that each member's sums wait for: an ``accumulate`` of every chunk but its own from
    one ``recv`` buffer of the whole gradient, a local ``copy`` of the gathered chunks, then
    ``update`` (with ``sync="zero"``: reduce-scatter links, the owned chunk's ``update``, then
    allgather links of the parameters).  The same bytes cross the same links as the chunked
    ring's 2 k (k - 1) copies, in k + 2 tasks a ring; the runtime does not run it.

swapping (csrc/graph/swap.c, only in a swap plan's graph: :func:`shardwise.swap_plan`)
    ``swap_out`` copies an offloaded feature map into a ``host`` buffer (the device's host
    region, apart from its arena) on the device's swap-out stream; ``swap_in`` copies it back
    into a new buffer of the map's kind, which the backward tasks read instead.

Every task lists the buffers it reads and writes in the order its kernel takes
them; a task updating a buffer in place (``reduce``, ``stats_reduce``,
``update``, ``accumulate``, ``bn_apply``'s running statistics) names it among
its writes (and its reads where it reads the old value).  Tasks come in a topological order (every dependency has
a smaller id).  Each device runs its own tasks in program order (one stream):
dependencies are recorded where that order does not give them already, and
devices meet only through copies, which run on the destination device.
"""
from __future__ import annotations

import functools

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.errors import ConfigError
from shardwise.ops.box import Box, volume
from shardwise.graph import Graph
from shardwise.iteration.recompute import recompute_ops
from shardwise.plan import Plan, reduction_pair

BYTES_PER_ELEMENT = 4  # the executor: float32 activations, gradients, parameters (batchnorm statistics: float64);
# a plan costed in bf16 / fp16 counts its buffers at its precision's sizes (Buffer.bytes, csrc/core/precision.c)

# lower(plan, schedule=policy): policy name -> the pass that makes a Schedule on a lowered graph,
# f(plan, handle, policy, costs), or None for one stream per device.  The schedule pass sits above
# the lowering (iteration/schedule.py imports this module), so it fills the entry when imported
# (shardwise/__init__.py imports it), and this module never imports it.
SCHEDULE_PASSES: dict[str, Any] = {"fifo": None}
# how a lowering writes ring all-reduces: every chunk (what runs) or one task per ring link (a model)
RING_DETAILS = ("chunked", "fused")
# rings="auto" (the simulator, the search's memory checks) fuses the ring all-reduces of plans on
# more devices than this (a ring of k members lowers to 2 k (k - 1) copies a gradient, chunked:
# ResNet-50 on 64 GPUs to 2.7 million tasks; fused, 97,000)
FUSED_RINGS_ABOVE = 16


def ring_detail(plan: Plan, rings: str) -> str:
    """How the simulator and the search's memory checks lower ``plan``'s ring all-reduces for
    ``rings``: "chunked" and "fused" as :func:`lower` takes them; "auto": fused on machines of
    more than :data:`FUSED_RINGS_ABOVE` devices, chunked otherwise."""
    if rings == "auto":
        return "fused" if len(plan.devices) > FUSED_RINGS_ABOVE else "chunked"
    if rings not in RING_DETAILS:
        raise ConfigError(f"rings must be 'auto' or one of {', '.join(map(repr, RING_DETAILS))}, got {rings!r}")
    return rings


@dataclass(frozen=True)
class Buffer:
    """A piece of a tensor living on one device for the iteration."""

    id: int
    device: int
    kind: str      # activation, region, grad, partial_grad, param, param_grad, momentum (optimizer state),
                   # stats, recv, partial, grad_pre, running_stats (batchnorm: running mean and variance, kept)
    op: str        # the op whose tensor (output, gradient, weight, statistics) this is a piece of
    box: Box
    worker: int | None = None   # params, their gradients and momentum: the worker holding them
    slot: int | None = None     # params, their gradients and momentum: the op's weight input slot
    nbytes: int = 0             # its size as the runtime holds it (float32; statistics float64)
    plan_bytes: int = 0         # its size as the plan counts it: the plan's precision's (= nbytes in fp32)

    @property
    def elements(self) -> int:
        return volume(self.box)


@dataclass(frozen=True)
class Task:
    """One unit of work on one device; runs when every task in ``deps`` has finished."""

    id: int
    kind: str           # load_input, copy, join, forward, loss, bn_stats, stats_reduce, bn_apply,
                        # bn_backward_stats, backward_data, accumulate, backward_weight, reduce, update,
                        # forward_partial, sum_partials, activation_grad, zero_grad, swap_out, swap_in,
                        # send, recv (a copy between two ranks' devices, split: lower(plan, ranks=...)),
                        # recompute (a forward task run again in the backward phase: lower(plan, recompute=...)),
                        # ring (a fused ring's link: lower(plan, rings="fused"))
    device: int
    phase: str          # forward, backward, sync, update
    op: str
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    deps: tuple[int, ...]
    worker: int
    slot: int | None = None     # input slot for per-input tasks; a ring task: the chunk transfers it stands for
    box: Box | None = None      # copy / accumulate: the global box moved; update under sync zero: the chunk
    src_device: int | None = None   # copies, ring tasks: the source device; send and recv: the device at the other end
    nbytes: int = 0             # bytes crossing between devices (copies; send and recv: on the wire, float32)
    plan_bytes: int = 0         # the same as the plan counts them: at its precision (= nbytes in fp32)
    elements: int = 0           # elements it works on: its box's (a fused ring's sums: the chunks summed), else
                                # its first written buffer's (0: none)


@dataclass
class TaskGraph:
    """The tasks and buffers of one training iteration of a plan (read-only: built by the C lowering).

    ``handle`` is the C task graph (``_core.TaskGraph``) these records are read from, the one
    the passes and the runtime take; ``schedule`` (a Schedule, None: one stream per device) and
    ``swap`` (a SwapPlan, or None) are its annotations.  With a swap plan the tasks and buffers
    are those of the swapped graph (its swap tasks and host buffers included: what runs)."""

    plan: Plan
    buffers: list[Buffer] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    params: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (op, "weight"/"bias", worker) -> buffer
    arrays: dict[str, Any] = field(default_factory=dict, repr=False)   # the C lowering's arrays
    handle: Any = field(default=None, repr=False)        # the _core.TaskGraph
    optimizer_state: int = 1                              # state buffers per parameter slice it was lowered with
    schedule: Any = field(default=None, repr=False)      # the Schedule whose streams the tasks run on, or None
    swap: Any = field(default=None, repr=False)          # the SwapPlan applied to it, or None
    ranks: list[int] | None = None                       # split over processes: each device's rank, else None
    recomputed: tuple[str, ...] = ()                     # ops whose feature maps it recomputes (graph order)
    rings: str = "chunked"                               # its ring all-reduces: "chunked" (runs) or "fused" (a model)

    def bytes_moved(self) -> int:
        """Bytes crossing between devices per iteration (a message between ranks counted once), as
        the plan counts them (its precision's: ``plan.bytes_moved``'s; the runtime moves float32)."""
        return sum(t.plan_bytes for t in self.tasks if t.kind != "recv")

    def rank_bytes(self) -> list[dict[str, int]]:
        """Per rank, the bytes its sends and receives carry per iteration: [{"sent": n, "received": n}]
        (a graph split over ranks; one process: [{"sent": 0, "received": 0}])."""
        nranks = max(self.ranks) + 1 if self.ranks else 1
        out = [{"sent": 0, "received": 0} for _ in range(nranks)]
        for t in self.tasks:
            if t.kind == "send":
                out[self.ranks[t.device]]["sent"] += t.nbytes
            elif t.kind == "recv":
                out[self.ranks[t.device]]["received"] += t.nbytes
        return out

    def memory_per_device(self) -> dict[int, int]:
        """Bytes of every buffer of the iteration, summed per device, as the plan counts them (no
        reuse between buffers: :func:`shardwise.memory_plan` gives the planned arena instead)."""
        out: dict[int, int] = {d: 0 for d in range(len(self.plan.devices))}
        for b in self.buffers:
            out[b.device] += b.plan_bytes
        return out

    def tasks_of(self, device: int) -> list[Task]:
        return [t for t in self.tasks if t.device == device]

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tasks:
            out[t.kind] = out.get(t.kind, 0) + 1
        return out

    def summary(self) -> str:
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.counts().items()))
        mem = self.memory_per_device()
        return (f"TaskGraph of {self.plan.name!r}: {len(self.tasks)} tasks ({kinds}), {len(self.buffers)} buffers, "
                f"{self.bytes_moved() / 1e6:.2f} MB moved, peak device memory {max(mem.values()) / 1e6:.2f} MB")

    def to_dict(self) -> dict:
        return {"buffers": [b.__dict__ for b in self.buffers], "tasks": [t.__dict__ for t in self.tasks]}


# ----------------------------------------------------------------------------- plans as C arrays


def plan_arrays(plan: Plan) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(kinds, degrees, dev_ptr, devices): the plan as ``Problem.lower`` and ``simulate_plan`` take it.
    (Rows made as tuples and converted once: a row assigned per op took ~1 ms on Inception-v3.)"""
    ops = plan.graph.ops
    configs = plan.configs
    pad = (1,) * _core.MAX_RANK
    rows = []   # per op: its degrees padded with 1s to MAX_RANK, then (split reduction or -1, degree)
    devs: list[int] = []
    ptr = [0]
    for op in ops:
        cfg = configs[op.name]
        degrees = cfg.degrees
        rows.append((*degrees, *pad[len(degrees):], *reduction_pair(op, cfg)))
        devs.extend(cfg.devices)
        ptr.append(len(devs))
    return (op_roles(plan.graph), np.array(rows, np.int32).reshape(len(ops), _core.MAX_RANK + 2),
            np.array(ptr, np.int32), np.array(devs, np.int32))


def op_roles(graph: Graph) -> np.ndarray:
    """(nops,) int32: each op's role in the C core's op table (csrc/ops.def), what the lowering
    and the memory footprints need to know of its kind."""
    roles = _roles_by_kind()
    return np.array([roles[op.kind] for op in graph.ops], np.int32)


@functools.lru_cache(maxsize=1)
def _roles_by_kind() -> dict[str, int]:
    return dict(zip(_core.OP_KINDS, _core.OP_ROLES))


def lower_arrays(plan: Plan, optimizer_state: int = 1) -> dict[str, np.ndarray]:
    """The C lowering's arrays of ``plan`` (one entry per task, buffer or device; see
    csrc/py/simulate_py.c); ``optimizer_state`` as for :func:`lower`."""
    return lowered(plan, optimizer_state).arrays()


def lowered(plan: Plan, optimizer_state: int = 1, streams: Any = None, swap: Any = None,
            recompute: Any = None, rings: str = "chunked", problem: Any = None) -> "_core.TaskGraph":
    """``plan`` lowered once by the C core: the ``_core.TaskGraph`` handle alone, without the
    Python records (``streams``: a schedule's (stream, stream_device, stream_priority) arrays;
    ``swap``: a swap plan's (buffer, out_at, in_at) arrays; ``recompute``: int32 ids of the ops
    whose feature maps are recomputed; ``rings``: one of :data:`RING_DETAILS`).  The plan's
    problem is built once and kept on the plan (:func:`shardwise.planning.problem.plan_problem`),
    unless ``problem`` gives one to lower on: a C problem of the plan's graph, devices and options
    with SGD's one state buffer per parameter slice (the search's own, for its memory check:
    the lowering only reads the graph, devices and options of its problem)."""
    from shardwise.planning.problem import plan_problem

    if rings not in RING_DETAILS:
        raise ConfigError(f"rings must be one of {', '.join(map(repr, RING_DETAILS))}, got {rings!r}")
    if problem is not None and optimizer_state != 1:
        raise ConfigError("lowered(problem=...) lowers with optimizer_state=1, the state a search's problem has")
    return _core.TaskGraph(problem if problem is not None else plan_problem(plan, optimizer_state),
                           *plan_arrays(plan), streams=streams, swap=swap, recompute=recompute,
                           fused_rings=rings == "fused")


def buffer_totals(plan: Plan, rings: str = "chunked", chunked: bool = False,
                  problem: Any = None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(bytes, buffers, persistent bytes) per device of ``plan`` lowered with ``rings`` (one of
    :data:`RING_DETAILS`): what ``lowered(plan, rings=rings).buffer_totals(chunked=chunked)`` gives,
    then the bytes of ``buffer_totals(persistent=True)``, from a lowering that keeps none of its
    tasks (a search's memory check of Inception-v3 on 16 devices: about two thirds of the time of
    the lowering).  ``problem`` as :func:`lowered` takes it."""
    from shardwise.planning.problem import plan_problem

    if rings not in RING_DETAILS:
        raise ConfigError(f"rings must be one of {', '.join(map(repr, RING_DETAILS))}, got {rings!r}")
    return (problem if problem is not None else plan_problem(plan, 1)).buffer_totals(
        *plan_arrays(plan), fused_rings=rings == "fused", chunked=chunked)


def lowered_graph(plan: Plan, optimizer_state: int = 1, rings: str = "auto", recompute: Any = None) -> TaskGraph:
    """``plan`` lowered once by the C core (``recompute`` as :func:`lower` takes it; ``rings`` one
    of :data:`RING_DETAILS` or "auto", as the simulator lowers), as a task graph without its
    Python records: memory plans and replays read only its handle, and on large machines the
    records are millions of objects."""
    from shardwise.iteration.recompute import recompute_ops

    detail = ring_detail(plan, rings)
    handle = lowered(plan, optimizer_state, recompute=recompute_ops(plan, recompute), rings=detail)
    return TaskGraph(plan=plan, handle=handle, optimizer_state=optimizer_state, rings=detail)


def handle_of(tg: "TaskGraph", plan: Any = None) -> "_core.TaskGraph":
    """The C handle of a TaskGraph view; with ``plan``, ConfigError unless the view was lowered
    from that plan (the same object, or the same graph, devices and configurations)."""
    if not isinstance(tg, TaskGraph) or tg.handle is None:
        raise ConfigError(f"expected a task graph made by sw.lower(plan), got {type(tg).__name__}")
    if plan is not None and plan is not tg.plan and (
            plan.graph.fingerprint() != tg.plan.graph.fingerprint() or
            plan.devices.fingerprint() != tg.plan.devices.fingerprint() or
            any(tg.plan.configs[n] != c for n, c in plan.configs.items())):
        raise ConfigError(f"the task graph was lowered from plan {tg.plan.name!r}, not from plan {plan.name!r}: "
                          "its tasks and buffers are another graph's (lower this plan with sw.lower(plan))")
    return tg.handle


def _box(row: np.ndarray) -> Box | None:
    """A box from the C lowering's (rank, lo[MAX_RANK], hi[MAX_RANK]) row; None for rank 0."""
    rank = int(row[0])
    if rank == 0:
        return None
    lo, hi = row[1:1 + rank].tolist(), row[1 + _core.MAX_RANK:1 + _core.MAX_RANK + rank].tolist()
    return tuple(zip(lo, hi))


def _weight_names(graph: Graph) -> dict[tuple[int, int], str]:
    """(op index, weight input slot) -> "weight" / "bias" (an op's first and second weight)."""
    out = {}
    for op in graph.ops:
        slots = [k for k, i in enumerate(op.desc.inputs) if i.role == 1]
        for name, k in zip(("weight", "bias"), slots):
            out[(op.index, k)] = name
    return out


def lower(plan: Plan, optimizer_state: int = 1, schedule: Any = None, swap: Any = None,
          costs: Any = None, ranks: "int | list[int] | None" = None, recompute: Any = None,
          rings: str = "chunked") -> TaskGraph:
    """The task graph of one training iteration of ``plan`` (its synchronization as its cost model
    says: parameter server or ring all-reduce), built by the C lowering, once.
    ``optimizer_state``: the optimizer's state buffers per parameter slice (kind ``momentum``;
    ``Optimizer.state_buffers``): 1 for SGD, 2 for Adam and AdamW, whose update reads (param,
    grad, exp_avg, exp_avg_sq).

    ``schedule``: None or "fifo" (one stream per device), "critical_path" (``sw.schedule`` made
    on this very graph, with ``costs``: a profile, or None for the roofline) or a Schedule of
    ``plan``: the tasks run on its streams.  ``swap``: a SwapPlan of ``plan`` (made for this
    optimizer state): its swap tasks are inserted into the graph (its tasks and buffers are then
    the swapped graph's).  Not both: a swap plan runs on one compute stream per device.  The
    result's ``handle`` is what :func:`shardwise.memory_plan`, :func:`shardwise.simulate`,
    :func:`shardwise.schedule`, :func:`shardwise.swap_plan` and the Trainer take.

    ``recompute``: None (keep every feature map for the backward pass), "all", or a set of op
    names: those ops' feature maps are dropped after their last forward use and recomputed by
    ``recompute`` tasks right before the backward pass reads them (docs/memory.md,
    "Recomputation"); ``tg.recomputed`` names the ops that got one (batch norms, losses and split
    reductions are kept).  One compute stream per device so far.  With ``swap``, the
    recomputation the swap plan was made on (its ``recompute``) unless given, and then it must be
    the same.

    ``ranks``: split the graph over processes (docs/distributed.md): an int k puts the devices in
    k contiguous blocks (:func:`shardwise.distributed.ranks.rank_of_device`), a list gives each
    device's rank.  Every copy between two ranks' devices becomes a ``send`` task on the source
    device and a ``recv`` task right after it on the destination; everything else is unchanged.
    None (the default): one process.

    ``rings``: "chunked" (the default: every chunk of each ring all-reduce, what the runtime runs)
    or "fused": one ``ring`` task per ring link (above), the simulator's model of machines too
    large to replay every chunk; such a graph simulates and has a memory plan, but neither the
    Trainer nor ``ranks`` take it (an unknown ``rings`` is refused by :func:`lowered`)."""
    if rings == "fused" and ranks is not None:
        raise ConfigError("a graph with fused rings is the simulator's model and runs on no process: "
                          "split the chunked lowering over ranks (rings='chunked'), or simulate the plan "
                          "with sw.simulate(plan, ranks=..., rings='fused')")
    rank = _ranks(plan, ranks)
    chosen = recompute_ops(plan, recompute)
    if swap is not None:   # the recomputation the swap plan was made on, applied first
        made_on = recompute_ops(plan, getattr(swap, "recompute", ()) or None)
        if chosen is not None and (made_on is None or set(chosen.tolist()) != set(made_on.tolist())):
            raise ConfigError(f"the swap plan was made on a graph recomputing {list(swap.recompute)}, not the "
                              f"recomputation asked for here: its buffers and tasks are another graph's (lower "
                              "with the swap plan's recomputation: recompute=None)")
        chosen = made_on
    if chosen is not None and schedule not in (None, "fifo"):
        raise ConfigError("recomputation runs on one compute stream per device so far: lower it with schedule='fifo'")
    if swap is not None:
        if not (callable(getattr(swap, "spec", None)) and callable(getattr(swap, "check", None))):
            raise TypeError(f"swap must be a SwapPlan (sw.swap_plan(plan, budget)) or None, got {type(swap).__name__}")
        swap.check(plan, optimizer_state=optimizer_state)
        if schedule not in (None, "fifo"):
            raise ConfigError("a swap plan runs on one compute stream per device: lower it with schedule='fifo'")
    given = None   # the Schedule the tasks run on
    if callable(getattr(schedule, "stream_arrays", None)):   # a Schedule (iteration/schedule.py, a pass above)
        schedule.check(plan)
        given = schedule
    elif schedule is not None and not (isinstance(schedule, str) and schedule in SCHEDULE_PASSES):
        raise ConfigError(f"schedule must be one of {', '.join(map(repr, SCHEDULE_PASSES))} or a Schedule "
                          f"(sw.schedule(plan)), got {schedule!r}")
    handle = lowered(plan, optimizer_state, streams=given.stream_arrays() if given is not None else None,
                     swap=swap.spec() if swap is not None else None, recompute=chosen, rings=rings)
    make = SCHEDULE_PASSES.get(schedule) if isinstance(schedule, str) else None
    if make is not None:   # made on this graph, then its streams put on it: no lowering again
        given = make(plan, handle, schedule, costs)
        handle.set_streams(given.stream_arrays())
    if rank is not None:   # the last annotation: the streams are carried through the split
        handle.split_ranks(np.asarray(rank, np.int32))
    tg = _view(plan, handle, optimizer_state, given, swap)
    tg.ranks = rank
    tg.rings = rings
    if handle.recomputed:
        index = {op.name: op.index for op in plan.graph.ops}
        tg.recomputed = tuple(sorted({t.op for t in tg.tasks if t.kind == "recompute"}, key=index.__getitem__))
    return tg


def _ranks(plan: Plan, ranks: Any) -> list[int] | None:
    """Each device's rank for lower(plan, ranks=...): None, an int (contiguous blocks) or a list."""
    from shardwise.distributed.ranks import rank_of_device

    ndev = len(plan.devices)
    if ranks is None:
        return None
    if isinstance(ranks, (int, np.integer)) and not isinstance(ranks, bool):
        return rank_of_device(ndev, int(ranks))
    try:
        rank = [int(r) for r in ranks]
    except (TypeError, ValueError):
        raise ConfigError(f"ranks must be None, an int or one rank per device, got {ranks!r}") from None
    if len(rank) != ndev:
        raise ConfigError(f"ranks lists {len(rank)} ranks for a plan on {ndev} devices (one per device)")
    missing = sorted(set(range(max(rank) + 1)) - set(rank)) if rank else []
    if min(rank, default=0) < 0 or missing:
        raise ConfigError(f"ranks {rank}: every rank 0 .. {max(rank)} needs a device"
                          + (f" (ranks {missing} have none)" if missing else ""))
    return rank


def _view(plan: Plan, handle: Any, optimizer_state: int, schedule: Any, swap: Any) -> TaskGraph:
    """The Python records of the C task graph ``handle`` of ``plan``."""
    r = handle.arrays()
    names = [op.name for op in plan.graph.ops]
    kinds, phases, buffer_kinds = _core.TASK_KINDS, _core.PHASES, _core.BUFFER_KINDS
    weight_names = _weight_names(plan.graph)
    tg = TaskGraph(plan, arrays=r, handle=handle, optimizer_state=optimizer_state, schedule=schedule, swap=swap)
    for b, (dev, kind, op, worker, slot, nbytes, plan_bytes, row) in enumerate(zip(
            r["buffer_device"].tolist(), r["buffer_kind"].tolist(), r["buffer_op"].tolist(),
            r["buffer_worker"].tolist(), r["buffer_slot"].tolist(), r["buffer_bytes"].tolist(),
            r["buffer_plan_bytes"].tolist(), r["buffer_box"])):
        buf = Buffer(b, dev, buffer_kinds[kind], names[op], _box(row) or (),
                     None if worker < 0 else worker, None if slot < 0 else slot, nbytes, plan_bytes)
        tg.buffers.append(buf)
        if buf.kind == "param":
            tg.params[(buf.op, weight_names[(op, slot)], worker)] = b
    dep_ptr, deps, io_ptr, io = (r[k].tolist() for k in ("dep_ptr", "deps", "io_ptr", "io"))
    for i, (kind, phase, dev, src, op, worker, slot, nreads, nbytes, plan_bytes, elements, row) in enumerate(zip(
            r["kind"].tolist(), r["phase"].tolist(), r["device"].tolist(), r["src_device"].tolist(),
            r["op"].tolist(), r["worker"].tolist(), r["slot"].tolist(), r["nreads"].tolist(),
            r["nbytes"].tolist(), r["plan_nbytes"].tolist(), r["elements"].tolist(), r["box"])):
        rw = io[io_ptr[i]:io_ptr[i + 1]]
        tg.tasks.append(Task(i, kinds[kind], dev, phases[phase], names[op], tuple(rw[:nreads]), tuple(rw[nreads:]),
                             tuple(deps[dep_ptr[i]:dep_ptr[i + 1]]), worker, None if slot < 0 else slot,
                             _box(row), None if src < 0 else src, nbytes, plan_bytes, elements))
    return tg
