"""Lowering a plan into the explicit task graph of one training iteration.

    tg = lower(plan)
    tg.tasks, tg.buffers          # plain data: lists of Task and Buffer
    tg.bytes_moved()              # equals plan.bytes_moved (same regions, same sync model)
    tg.memory_per_device()

Every worker of every op gets, in this order:

forward
    for each data input: the *region* it reads (from the op description,
    halos included) gathered into a staging buffer by ``copy`` tasks from the
    producer's workers that own its pieces (no copy when the region is exactly
    a shard already on the device: the buffer is shared);
    a ``forward`` task (batchnorm: ``bn_stats`` -> statistics reduced among
    the workers of the same channels -> ``bn_apply``; softmax: ``loss``).
backward (ops in reverse order)
    ``backward_data`` per data input: a partial gradient over the same region,
    sent back to the owners and summed there by ``accumulate`` tasks in a
    fixed order (so sums do not depend on timing);
    ``backward_weight``: the gradient of the worker's weight slice.
synchronization and update
    workers reading the same weight box are replicas; with the parameter
    server model the first replica's device sums the gradients (``copy`` +
    ``reduce``), applies ``update`` and sends the parameters back.

The simulator (issue 4) replays this graph with modelled durations and the
executor runs it with real kernels, so the two cannot drift apart.  For speed
the simulator builds it in C (csrc/lower.c: the same tasks in the same order,
with the same dependencies and buffers); a change here must be made there too,
and tests/test_simulate_c.py compares the two task for task.  Buffers
are never reused within an iteration, so the sum of their sizes per device is
the memory the iteration needs (parameters, momentum, activations kept for the
backward pass, staging regions, gradients).
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from math import prod
from typing import Iterable, Sequence

from .graph import Graph, Op
from .opdesc import DATA, STAT, WEIGHT, OpDesc
from .plan import OpConfig, Plan

Box = tuple[tuple[int, int], ...]  # half-open [lo, hi) per dimension

BYTES_PER_ELEMENT = 4  # float32


# ----------------------------------------------------------------------------- boxes
def volume(box: Box | None) -> int:
    if box is None:
        return 0
    return prod(max(0, hi - lo) for lo, hi in box)


def lo_of(box: Box) -> tuple[int, ...]:
    """The box's lower corner (a view's global coordinates of its first element)."""
    return tuple(lo for lo, _ in box)


def shape_of(box: Box) -> tuple[int, ...]:
    return tuple(hi - lo for lo, hi in box)


def intersect(a: Box, b: Box) -> Box | None:
    out = tuple((max(al, bl), min(ah, bh)) for (al, ah), (bl, bh) in zip(a, b))
    return out if all(lo < hi for lo, hi in out) else None


def worker_boxes(shape: Sequence[int], degrees: Sequence[int]) -> list[Box]:
    """Output box of every worker: a row-major grid over the degrees (as csrc/region.c)."""
    boxes: list[Box] = []

    def rec(d: int, acc: list[tuple[int, int]]) -> None:
        if d == len(shape):
            boxes.append(tuple(acc))
            return
        step = shape[d] // degrees[d]
        for c in range(degrees[d]):
            rec(d + 1, acc + [(c * step, (c + 1) * step)])

    rec(0, [])
    return boxes


def overlapping_workers(region: Box, shape: Sequence[int], degrees: Sequence[int]):
    """(worker index, piece) for every worker of the row-major grid ``degrees`` over
    ``shape`` whose box meets ``region``, without looking at the others."""
    ranges = []
    for (lo, hi), size, deg in zip(region, shape, degrees):
        step = size // deg
        ranges.append(range(lo // step, (hi - 1) // step + 1))
    strides = []
    acc = 1
    for deg in reversed(degrees):
        strides.append(acc)
        acc *= deg
    strides.reverse()
    for coords in itertools.product(*ranges):
        piece = []
        for (lo, hi), c, size, deg in zip(region, coords, shape, degrees):
            step = size // deg
            piece.append((max(lo, c * step), min(hi, (c + 1) * step)))
        yield sum(c * st for c, st in zip(coords, strides)), tuple(piece)


_COMPILED: dict[tuple[int, int], tuple] = {}


def _compiled(desc: OpDesc, slot: int) -> tuple:
    """The index expressions of one input in a form cheap to evaluate: per input dimension
    (nonzero (variable, coefficient) pairs, offset, div, mod, size).  Cached per description."""
    key = (id(desc), slot)
    hit = _COMPILED.get(key)
    if hit is not None and hit[0] is desc:
        return hit[1]
    inp = desc.inputs[slot]
    dims = tuple((tuple((v, c) for v, c in enumerate(e.coefs) if c), e.offset, e.div, e.mod, size)
                 for e, size in zip(inp.exprs, inp.shape))
    _COMPILED[key] = (desc, (dims, inp.window))
    return dims, inp.window


def expr_interval(terms: Sequence[tuple[int, int]], offset: int, div: int, mod: int,
                  lo_v: Sequence[int], hi_v: Sequence[int]) -> tuple[int, int]:
    """Inclusive interval of ((sum coef * v + offset) // div) % mod when each variable v
    ranges over [lo_v[v], hi_v[v]] (inclusive); ``terms`` lists the nonzero (v, coef)."""
    a = b = offset
    for v, c in terms:
        if c > 0:
            a += c * lo_v[v]
            b += c * hi_v[v]
        else:
            a += c * hi_v[v]
            b += c * lo_v[v]
    if div != 1:
        a, b = a // div, b // div
    if mod:
        if b - a + 1 >= mod or a // mod != b // mod:
            a, b = 0, mod - 1  # wraps around: the whole period
        else:
            base = (a // mod) * mod
            a, b = a - base, b - base
    return a, b


def input_region(desc: OpDesc, slot: int, out_box: Box,
                 reduction: tuple[int, int, int] | None = None) -> Box | None:
    """The box of input ``slot`` read by the points of ``out_box`` (all reductions in
    full, or reduction variable ``var`` restricted to ``[lo, hi)`` when ``reduction`` is
    ``(var, lo, hi)``), clipped to the input; None when the input is not read (outside its
    window).  Interval arithmetic on the index expressions, exactly as csrc/region.c."""
    dims, window = _compiled(desc, slot)
    out_rank = desc.out_rank
    lo_v, hi_v = [], []
    for v, extent in enumerate(desc.extents):
        if reduction is not None and v == reduction[0]:
            lo, hi = reduction[1], reduction[2]
        elif v < out_rank:
            lo, hi = out_box[v]
            if window is not None:
                wl, wh = window[v]
                lo, hi = (wl if wl > lo else lo), (wh if wh < hi else hi)
            if hi <= lo:
                return None
        else:
            lo, hi = 0, extent
        lo_v.append(lo)
        hi_v.append(hi - 1)  # inclusive
    region = []
    for terms, offset, div, mod, size in dims:
        a, b = expr_interval(terms, offset, div, mod, lo_v, hi_v)
        if a < 0:
            a = 0
        if b > size - 1:
            b = size - 1
        if b < a:
            return None
        region.append((a, b + 1))
    return tuple(region)


# ----------------------------------------------------------------------------- the graph
@dataclass(frozen=True)
class Buffer:
    """A piece of a tensor living on one device for the iteration."""

    id: int
    device: int
    kind: str      # activation, region, grad, partial_grad, param, param_grad, momentum, stats, recv
    tensor: str    # the global tensor: an op name, or "<op>.weight" / "<op>.bias" / "<op>.stats"
    box: Box

    @property
    def elements(self) -> int:
        return volume(self.box)

    @property
    def nbytes(self) -> int:
        return self.elements * BYTES_PER_ELEMENT


@dataclass(frozen=True)
class Task:
    """One unit of work on one device; runs when every task in ``deps`` has finished."""

    id: int
    kind: str           # load_input, copy, forward, bn_stats, stats_reduce, bn_apply, loss, backward_data,
                        # accumulate, backward_weight, reduce, update
    device: int
    phase: str          # forward, backward, sync, update
    op: str | None
    reads: tuple[int, ...]
    writes: tuple[int, ...]
    deps: tuple[int, ...]
    worker: int | None = None   # worker index within the op's configuration
    slot: int | None = None     # input slot for per-input tasks
    box: Box | None = None      # copy / accumulate: the global box moved
    src_device: int | None = None
    nbytes: int = 0             # bytes crossing between devices (copies only)


@dataclass
class TaskGraph:
    """The tasks and buffers of one training iteration of a plan."""

    plan: Plan
    buffers: list[Buffer] = field(default_factory=list)
    tasks: list[Task] = field(default_factory=list)
    params: dict[tuple[str, str, int], int] = field(default_factory=dict)  # (op, "weight"/"bias", worker) -> buffer

    def bytes_moved(self) -> int:
        return sum(t.nbytes for t in self.tasks)

    def memory_per_device(self) -> dict[int, int]:
        out: dict[int, int] = {d: 0 for d in range(len(self.plan.devices))}
        for b in self.buffers:
            out[b.device] += b.nbytes
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


# ----------------------------------------------------------------------------- lowering
class _Lowering:
    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.graph: Graph = plan.graph
        self.tg = TaskGraph(plan)
        self.sync_model = plan.options.sync
        # per op: worker boxes, activation buffer per worker, last task writing it
        self.boxes: dict[str, list[Box]] = {}
        self.act: dict[str, list[int]] = {}
        self.act_task: dict[str, list[int]] = {}
        self.regions: dict[tuple[str, int, int], tuple[int, int | None]] = {}  # (op, slot, worker) -> (buf, task)
        self.params = self.tg.params                          # (op, param, worker) -> buffer
        self.grad: dict[str, list[int]] = {}
        self.grad_last: dict[str, list[int | None]] = {}      # last accumulate into each worker's grad
        self.weight_grad_task: dict[tuple[str, str, int], int] = {}
        self._regions: dict[tuple[int, int, Box], Box | None] = {}

    # ---- helpers
    def region(self, op: Op, slot: int, box: Box) -> Box | None:
        """input_region, memoized: forward, backward and synchronization ask for the same ones."""
        key = (op.index, slot, box)
        r = self._regions.get(key, self)
        if r is self:
            r = self._regions[key] = input_region(op.desc, slot, box)
        return r

    def reduction_part(self, op: Op, w: int) -> tuple[int, int, int] | None:
        """(variable, lo, hi) of the reduction part worker ``w`` computes; None without a split."""
        cfg = self.config(op)
        if cfg.reduction is None:
            return None
        var = op.desc.out_rank + op.desc.reductions.index(cfg.reduction[0])
        size = op.desc.extents[var] // cfg.reduction[1]
        j = w % cfg.reduction[1]
        return (var, j * size, (j + 1) * size)

    def worker_region(self, op: Op, slot: int, w: int) -> Box | None:
        """The region of input ``slot`` worker ``w`` reads (as csrc/region.c sw_worker_region):
        its output block's region, over its part of a split reduction; in a reduction group
        only the owner reads inputs that do not depend on the split variable (a bias)."""
        r = self.config(op).reduction_degree
        box = self.boxes[op.name][w // r]
        part = self.reduction_part(op, w)
        if part is None:
            return self.region(op, slot, box)
        if w % r and not any(e.coefs[part[0]] for e in op.desc.inputs[slot].exprs):
            return None
        key = (op.index, slot, box, part)
        hit = self._regions.get(key, self)
        if hit is self:
            hit = self._regions[key] = input_region(op.desc, slot, box, part)
        return hit

    def holders(self, op: Op) -> tuple[int, ...]:
        """Device of each output block of ``op``: the owner of its reduction group."""
        cfg = self.config(op)
        return cfg.devices[:: cfg.reduction_degree]

    def buffer(self, device: int, kind: str, tensor: str, box: Box) -> int:
        b = Buffer(len(self.tg.buffers), device, kind, tensor, box)
        self.tg.buffers.append(b)
        return b.id

    def task(self, kind: str, device: int, phase: str, op: str | None, reads: Iterable[int], writes: Iterable[int],
             deps: Iterable[int | None], **extra) -> int:
        t = Task(len(self.tg.tasks), kind, device, phase, op, tuple(reads), tuple(writes),
                 tuple(sorted({d for d in deps if d is not None})), **extra)
        self.tg.tasks.append(t)
        return t.id

    def config(self, op: Op) -> OpConfig:
        return self.plan.configs[op.name]

    # ---- forward
    def lower_forward(self, op: Op) -> None:
        cfg = self.config(op)
        boxes = worker_boxes(op.shape, cfg.degrees)
        self.boxes[op.name] = boxes
        self.act[op.name], self.act_task[op.name] = [], []
        data_slots = [k for k, i in enumerate(op.desc.inputs) if i.role == DATA]
        if op.kind == "batchnorm2d":
            self.lower_batchnorm_forward(op, cfg, boxes, data_slots)
            return
        if cfg.reduction is not None:
            self.lower_reduction_forward(op, cfg, boxes, data_slots)
            return
        kind = "load_input" if op.kind == "input" else "loss" if op.kind == "softmax" else "forward"
        for w, (box, dev) in enumerate(zip(boxes, cfg.devices)):
            out, t = self.worker_forward(op, w, box, dev, data_slots, "activation", kind)
            self.act[op.name].append(out)
            self.act_task[op.name].append(t)

    def worker_forward(self, op: Op, w: int, box: Box, dev: int, data_slots: list[int], buf_kind: str,
                       kind: str) -> tuple[int, int]:
        """Worker ``w``'s forward: its input regions gathered, its parameters, one task writing
        a new ``buf_kind`` buffer over ``box``.  Returns (buffer, task)."""
        reads, deps = [], []
        for slot, producer in zip(data_slots, op.inputs):
            buf, t = self.gather(op, slot, w, box, dev, self.graph.ops[producer])
            if buf is not None:
                reads.append(buf)
                deps.append(t)
        reads += self.param_buffers(op, w, box, dev)
        out = self.buffer(dev, buf_kind, op.name, box)
        return out, self.task(kind, dev, "forward", op.name, reads, [out], deps, worker=w)

    def gather(self, op: Op, slot: int, w: int, box: Box, dev: int, producer: Op) -> tuple[int | None, int | None]:
        """Bring the region of input ``slot`` that worker ``w`` reads onto ``dev``."""
        region = self.worker_region(op, slot, w)
        if region is None:
            self.regions[(op.name, slot, w)] = (None, None)  # type: ignore[assignment]
            return None, None
        src_cfg = self.config(producer)
        holders = self.holders(producer)
        for s, (sbox, sdev) in enumerate(zip(self.boxes[producer.name], holders)):
            if sdev == dev and sbox == region:  # the region is a shard already here: share it
                buf, t = self.act[producer.name][s], self.act_task[producer.name][s]
                self.regions[(op.name, slot, w)] = (buf, t)
                return buf, t
        buf = self.buffer(dev, "region", producer.name, region)
        last = None
        deps = []
        for s, piece in overlapping_workers(region, producer.shape, src_cfg.degrees):
            sdev = holders[s]
            moved = volume(piece) * BYTES_PER_ELEMENT if sdev != dev else 0
            last = self.task("copy", dev, "forward", op.name, [self.act[producer.name][s]], [buf],
                             [self.act_task[producer.name][s]], worker=w, slot=slot, box=piece, src_device=sdev,
                             nbytes=moved)
            deps.append(last)
        # the forward task depends on every piece: chain them through one join
        join = deps[-1] if len(deps) == 1 else self.task("join", dev, "forward", op.name, [], [], deps, worker=w)
        self.regions[(op.name, slot, w)] = (buf, join)
        return buf, join

    def param_buffers(self, op: Op, w: int, box: Box, dev: int) -> list[int]:
        out = []
        for k, inp in enumerate(op.desc.inputs):
            if inp.role != WEIGHT:
                continue
            region = self.worker_region(op, k, w)
            if region is None:   # a bias in a reduction group: the owner's alone
                continue
            pname = self.param_name(op, k)
            buf = self.buffer(dev, "param", f"{op.name}.{pname}", region)
            self.params[(op.name, pname, w)] = buf
            out.append(buf)
        return out

    @staticmethod
    def param_name(op: Op, slot: int) -> str:
        weights = [k for k, i in enumerate(op.desc.inputs) if i.role == WEIGHT]
        return ("weight", "bias")[weights.index(slot)]

    def replica_groups(self, op: Op, slot: int) -> list[list[int]]:
        """Workers reading the same box of input ``slot``, in worker order (as csrc/cost.c)."""
        groups: dict[Box, list[int]] = {}
        for w in range(self.config(op).workers):
            region = self.worker_region(op, slot, w)
            if region is not None:
                groups.setdefault(region, []).append(w)
        return list(groups.values())

    def lower_batchnorm_forward(self, op: Op, cfg: OpConfig, boxes: list[Box], data_slots: list[int]) -> None:
        """Partial sums per worker, reduced among workers of the same channels, then normalize."""
        stat_slot = next(k for k, i in enumerate(op.desc.inputs) if i.role == STAT)
        partial, stat_tasks, regions = [], [], []
        for w, (box, dev) in enumerate(zip(boxes, cfg.devices)):
            buf, t = self.gather(op, data_slots[0], w, box, dev, self.graph.ops[op.inputs[0]])
            regions.append((buf, t))
            sbox = self.region(op, stat_slot, box)
            s = self.buffer(dev, "stats", f"{op.name}.stats", sbox)
            partial.append(s)
            stat_tasks.append(self.task("bn_stats", dev, "forward", op.name, [buf], [s], [t], worker=w))
        reduced = self.reduce_among(op, stat_slot, partial, stat_tasks, "forward", "stats_reduce")
        for w, (box, dev) in enumerate(zip(boxes, cfg.devices)):
            reads = [regions[w][0], partial[w]] + self.param_buffers(op, w, box, dev)
            out = self.buffer(dev, "activation", op.name, box)
            t = self.task("bn_apply", dev, "forward", op.name, reads, [out], [regions[w][1], reduced[w]], worker=w)
            self.act[op.name].append(out)
            self.act_task[op.name].append(t)

    def lower_reduction_forward(self, op: Op, cfg: OpConfig, boxes: list[Box], data_slots: list[int]) -> None:
        """Partition-n-reduce: every worker computes a partial output of its block over its part
        of the reduction (no activation; the bias only on the owner); the owner receives the
        others' partial outputs and sums them (then applies the activation)."""
        r = cfg.reduction_degree
        partial, ready = [], []
        for w, dev in enumerate(cfg.devices):
            out, t = self.worker_forward(op, w, boxes[w // r], dev, data_slots, "partial", "forward_partial")
            partial.append(out)
            ready.append(t)
        for b, box in enumerate(boxes):
            owner = b * r
            odev = cfg.devices[owner]
            reads, deps = [partial[owner]], [ready[owner]]
            for m in range(owner + 1, owner + r):
                recv = self.buffer(odev, "recv", op.name, box)
                deps.append(self.task("copy", odev, "forward", op.name, [partial[m]], [recv], [ready[m]], worker=m,
                                      box=box, src_device=cfg.devices[m], nbytes=volume(box) * BYTES_PER_ELEMENT))
                reads.append(recv)
            out = self.buffer(odev, "activation", op.name, box)
            self.act[op.name].append(out)
            self.act_task[op.name].append(self.task("sum_partials", odev, "forward", op.name, reads, [out], deps,
                                                    worker=owner))

    def reduce_among(self, op: Op, slot: int, bufs: list[int], ready: list[int], phase: str, kind: str) -> list[int]:
        """Sum ``bufs`` over each replica group of ``slot`` at its first worker and send the sum back.

        Returns, per worker, the task after which its buffer holds the group's sum."""
        cfg = self.config(op)
        done = list(ready)
        for group in self.replica_groups(op, slot):
            if len(group) < 2:
                continue
            lead = group[0]
            lead_dev = cfg.devices[lead]
            box = self.tg.buffers[bufs[lead]].box
            recvs, deps = [], [ready[lead]]
            for m in group[1:]:
                recv = self.buffer(lead_dev, "recv", self.tg.buffers[bufs[m]].tensor, box)
                c = self.task("copy", lead_dev, phase, op.name, [bufs[m]], [recv], [ready[m]], worker=m,
                              box=box, src_device=cfg.devices[m], nbytes=volume(box) * BYTES_PER_ELEMENT)
                recvs.append(recv)
                deps.append(c)
            total = self.task(kind, lead_dev, phase, op.name, [bufs[lead], *recvs], [bufs[lead]], deps, worker=lead)
            done[lead] = total
            for m in group[1:]:
                done[m] = self.task("copy", cfg.devices[m], phase, op.name, [bufs[lead]], [bufs[m]], [total],
                                    worker=m, box=box, src_device=lead_dev, nbytes=volume(box) * BYTES_PER_ELEMENT)
        return done

    # ---- backward
    def lower_backward(self, op: Op) -> None:
        if op.kind == "input":
            return
        cfg = self.config(op)
        boxes = self.boxes[op.name]
        data_slots = [k for k, i in enumerate(op.desc.inputs) if i.role == DATA]
        grads = self.grad.get(op.name)
        ready_grad = self.grad_last.get(op.name)
        bn_ready = None
        if cfg.reduction is not None:
            self.lower_reduction_backward(op, cfg, boxes, data_slots)
            return
        if op.kind == "batchnorm2d":
            bn_ready = self.lower_batchnorm_backward_sums(op, cfg, boxes)
        for w, (box, dev) in enumerate(zip(boxes, cfg.devices)):
            # the softmax's gradient comes from the loss, not from consumers
            gbuf = grads[w] if grads else None
            gdeps = [ready_grad[w] if ready_grad else None, self.act_task[op.name][w]]
            if bn_ready is not None:
                gdeps.append(bn_ready[w])
            for slot, producer in zip(data_slots, op.inputs):
                region_buf, region_task = self.regions[(op.name, slot, w)]
                if region_buf is None:
                    continue
                src = self.graph.ops[producer]
                if src.kind == "input":
                    continue
                reads = [b for b in (gbuf, self.act[op.name][w], region_buf) if b is not None]
                self.lower_backward_data(op, w, dev, slot, src, reads, gdeps + [region_task])
            if op.has_weights:
                reads = [b for b in (gbuf, self.act[op.name][w]) if b is not None]
                self.lower_backward_weight(op, w, dev, data_slots, reads, gdeps)

    def lower_backward_data(self, op: Op, w: int, dev: int, slot: int, src: Op, reads: list[int],
                            deps: list[int | None]) -> None:
        """The partial gradient of input ``slot`` over worker ``w``'s region, sent to its owners."""
        region = self.tg.buffers[self.regions[(op.name, slot, w)][0]].box
        pbuf = self.buffer(dev, "partial_grad", src.name, region)
        t = self.task("backward_data", dev, "backward", op.name, reads, [pbuf], deps, worker=w, slot=slot)
        self.scatter_grad(src, pbuf, t, region, dev, op.name, w, slot)

    def lower_backward_weight(self, op: Op, w: int, dev: int, data_slots: list[int], reads: list[int],
                              deps: list[int | None]) -> None:
        """Gradients of the weight slices worker ``w`` reads (regions of its data inputs read too)."""
        reads = reads + [self.regions[(op.name, s, w)][0] for s in data_slots
                         if self.regions[(op.name, s, w)][0] is not None]
        slots, writes = [], []
        for k, inp in enumerate(op.desc.inputs):
            region = self.worker_region(op, k, w) if inp.role == WEIGHT else None
            if region is not None:
                slots.append(k)
                writes.append(self.buffer(dev, "param_grad", f"{op.name}.{self.param_name(op, k)}", region))
        t = self.task("backward_weight", dev, "backward", op.name, reads, writes, deps, worker=w)
        for k, buf in zip(slots, writes):
            self.weight_grad_task[(op.name, self.param_name(op, k), w)] = t
            self.param_grad_buf[(op.name, self.param_name(op, k), w)] = buf

    def lower_reduction_backward(self, op: Op, cfg: OpConfig, boxes: list[Box], data_slots: list[int]) -> None:
        """Partition-n-reduce backward: each owner takes its block's gradient through the
        activation (``activation_grad``) and sends the result to the other workers of its group;
        then every worker computes the gradients of its inputs' regions and weight slices."""
        r = cfg.reduction_degree
        grads, ready = self.grad.get(op.name), self.grad_last.get(op.name)
        pre, pre_task = [0] * cfg.workers, [0] * cfg.workers
        for b, box in enumerate(boxes):
            owner = b * r
            odev = cfg.devices[owner]
            g = self.buffer(odev, "grad_pre", op.name, box)   # the gradient before the activation
            reads = [x for x in (grads[b] if grads else None, self.act[op.name][b]) if x is not None]
            t = self.task("activation_grad", odev, "backward", op.name, reads, [g],
                          [ready[b] if ready else None, self.act_task[op.name][b]], worker=owner)
            pre[owner], pre_task[owner] = g, t
            for m in range(owner + 1, owner + r):
                mdev = cfg.devices[m]
                pre[m] = self.buffer(mdev, "grad_pre", op.name, box)
                pre_task[m] = self.task("copy", mdev, "backward", op.name, [g], [pre[m]], [t], worker=m, box=box,
                                        src_device=odev, nbytes=volume(box) * BYTES_PER_ELEMENT)
        for w, dev in enumerate(cfg.devices):
            for slot, producer in zip(data_slots, op.inputs):
                region_buf, region_task = self.regions[(op.name, slot, w)]
                src = self.graph.ops[producer]
                if region_buf is None or src.kind == "input":
                    continue
                self.lower_backward_data(op, w, dev, slot, src, [pre[w], region_buf], [pre_task[w], region_task])
            if op.has_weights:
                self.lower_backward_weight(op, w, dev, data_slots, [pre[w]], [pre_task[w]])

    def lower_batchnorm_backward_sums(self, op: Op, cfg: OpConfig, boxes: list[Box]) -> list[int]:
        stat_slot = next(k for k, i in enumerate(op.desc.inputs) if i.role == STAT)
        grads, ready_grad = self.grad.get(op.name), self.grad_last.get(op.name)
        partial, tasks = [], []
        for w, (box, dev) in enumerate(zip(boxes, cfg.devices)):
            s = self.buffer(dev, "stats", f"{op.name}.grad_stats", self.region(op, stat_slot, box))
            reads = [grads[w]] if grads else []
            partial.append(s)
            tasks.append(self.task("bn_backward_stats", dev, "backward", op.name,
                                   reads + [self.regions[(op.name, 0, w)][0]], [s],
                                   [ready_grad[w] if ready_grad else None, self.act_task[op.name][w]], worker=w))
        return self.reduce_among(op, stat_slot, partial, tasks, "backward", "stats_reduce")

    def scatter_grad(self, src: Op, pbuf: int, ptask: int, region: Box, dev: int, consumer: str, w: int,
                     slot: int) -> None:
        """Send the pieces of a partial gradient to the owners and add them up there, in order."""
        holders = self.holders(src)
        if src.name not in self.grad:
            self.grad[src.name] = [self.buffer(d, "grad", src.name, b)
                                   for b, d in zip(self.boxes[src.name], holders)]
            self.grad_last[src.name] = [None] * len(holders)
        cfg = self.config(src)
        for s, piece in overlapping_workers(region, src.shape, cfg.degrees):
            sdev = holders[s]
            read, dep = pbuf, ptask
            if sdev != dev:
                recv = self.buffer(sdev, "recv", f"{src.name}.grad", piece)
                dep = self.task("copy", sdev, "backward", consumer, [pbuf], [recv], [ptask], worker=w, slot=slot,
                                box=piece, src_device=dev, nbytes=volume(piece) * BYTES_PER_ELEMENT)
                read = recv
            self.grad_last[src.name][s] = self.task(
                "accumulate", sdev, "backward", src.name, [read], [self.grad[src.name][s]],
                [dep, self.grad_last[src.name][s]], worker=s * cfg.reduction_degree, box=piece)

    # ---- synchronization and update
    def lower_sync(self, op: Op) -> None:
        cfg = self.config(op)
        for k, inp in enumerate(op.desc.inputs):
            if inp.role != WEIGHT:
                continue
            pname = self.param_name(op, k)
            for group in self.replica_groups(op, k):
                lead = group[0]
                lead_dev = cfg.devices[lead]
                lead_grad = self.param_grad_buf[(op.name, pname, lead)]
                box = self.tg.buffers[lead_grad].box
                deps, recvs = [self.weight_grad_task[(op.name, pname, lead)]], []
                for m in group[1:]:
                    recv = self.buffer(lead_dev, "recv", f"{op.name}.{pname}.grad", box)
                    deps.append(self.task("copy", lead_dev, "sync", op.name,
                                          [self.param_grad_buf[(op.name, pname, m)]], [recv],
                                          [self.weight_grad_task[(op.name, pname, m)]], worker=m, box=box,
                                          src_device=cfg.devices[m], nbytes=volume(box) * BYTES_PER_ELEMENT))
                    recvs.append(recv)
                red = self.task("reduce", lead_dev, "sync", op.name, [lead_grad, *recvs], [lead_grad], deps,
                                worker=lead) if recvs else deps[0]
                mom = self.buffer(lead_dev, "momentum", f"{op.name}.{pname}", box)
                param = self.params[(op.name, pname, lead)]
                upd = self.task("update", lead_dev, "update", op.name, [param, lead_grad, mom], [param, mom], [red],
                                worker=lead)
                for m in group[1:]:
                    self.task("copy", cfg.devices[m], "update", op.name, [param],
                              [self.params[(op.name, pname, m)]], [upd], worker=m, box=box, src_device=lead_dev,
                              nbytes=volume(box) * BYTES_PER_ELEMENT)

    def run(self) -> TaskGraph:
        self.param_grad_buf: dict[tuple[str, str, int], int] = {}
        for op in self.graph.ops:
            self.lower_forward(op)
        for op in reversed(self.graph.ops):
            self.lower_backward(op)
        for op in self.graph.ops:
            if op.has_weights:
                self.lower_sync(op)
        return self.tg


def lower(plan: Plan) -> TaskGraph:
    """The task graph of one training iteration of ``plan`` (parameter-server synchronization)."""
    if plan.options.sync != "parameter_server":
        raise NotImplementedError("lowering ring all-reduce synchronization is not implemented yet; "
                                  "use CostOptions(sync='parameter_server')")
    import gc

    # tens of thousands of small objects: the cyclic collector would rescan them over and
    # over (none of them forms a cycle), which doubles the time on large graphs
    enabled = gc.isenabled()
    gc.disable()
    try:
        return _Lowering(plan).run()
    finally:
        if enabled:
            gc.enable()
