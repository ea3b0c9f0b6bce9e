"""The CPU backend: runs the tasks of a task graph with the C kernels.

Every device of the plan is a worker with its own buffers (NumPy arrays, one
per :class:`~shardwise.lower.Buffer`); copies between devices are real copies.
Kernels work on views in global coordinates (csrc/cpu/kernels.h), so a
buffer's box is passed along as its ``lo``.  This module is the only place that
knows what each task kind means.
"""
from __future__ import annotations

import threading
import weakref
from functools import partial
from typing import Any

import numpy as np

from . import _core
from .backend_cpu_reduce import PartialSumTasks
from .backend_cpu_rnn import RecurrentOpKernels
from .graph import Graph, Op
from .boxes import Box, intersect, lo_of, shape_of
from .lower import Task, TaskGraph
from .opdesc import DATA
from .reference import BN_EPS
from .worker_pool import WorkerPool


_MALLOC_TUNED = False


def keep_freed_memory() -> bool:
    """Ask glibc to keep freed blocks for reuse instead of returning them to the OS.

    The executor allocates its buffers afresh every step.  By default glibc serves
    blocks above 128 KiB with mmap and unmaps them when freed, so every step
    page-faults all its activations back in: measured on the scaled ResNet-18, steps
    took 450-800 ms instead of 315-330 ms.  Raising the mmap threshold to 32 MiB
    (glibc's maximum) and the trim threshold keeps that memory in the heap, as a
    caching allocator would.

    Those two settings hold only for glibc's main arena.  Worker threads get arenas
    of their own, made of 64 MiB heaps that glibc unmaps as soon as their top is
    free, whatever the trim threshold: with two data-parallel workers on the scaled
    ResNet-18 the second worker spent more time page-faulting its gradients in
    (accumulate, batchnorm and ReLU backward: 26 ms of CPU where the first spent 3)
    than computing them, and two workers ran no faster than one.  Limiting the
    process to one arena (M_ARENA_MAX) puts every thread's blocks in the main heap;
    the workers allocate a few blocks per task, so the shared lock costs nothing
    measurable.  It applies to the whole process, once; elsewhere than glibc it does
    nothing.  Buffer reuse inside the executor is the lasting fix."""
    global _MALLOC_TUNED
    if _MALLOC_TUNED:
        return True
    try:
        import ctypes
        import ctypes.util

        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        m_trim_threshold, m_mmap_threshold, m_arena_max = -1, -3, -8
        ok = (libc.mallopt(m_mmap_threshold, 32 << 20) == 1 and libc.mallopt(m_trim_threshold, 1 << 30) == 1
              and libc.mallopt(m_arena_max, 1) == 1)
    except (OSError, AttributeError):
        ok = False
    _MALLOC_TUNED = ok
    return ok


def executor_threads(devices: int, shared_cores: int | None) -> int:
    """Threads the CPU executor runs ``devices`` workers on: one each, at most ``shared_cores``."""
    return max(1, min(devices, shared_cores or devices))


def window(op: Op) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding) pairs of a conv2d or pool2d op."""
    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))

    a = op.attrs
    kernel = pair(a["kernel"])
    stride = pair(a["stride"] if a.get("stride") is not None else a["kernel"])
    return kernel, stride, pair(a.get("padding", 0))


class CpuExecutor(PartialSumTasks, RecurrentOpKernels):
    """Executes the tasks of one iteration in order; parameters and momentum persist."""

    def __init__(self, graph: Graph, tg: TaskGraph) -> None:
        keep_freed_memory()
        self.graph = graph
        self.tg = tg
        self.ops = {op.name: op for op in graph.ops}
        self.plan_configs = tg.plan.configs
        self.persistent: dict[int, np.ndarray] = {}
        for b in tg.buffers:
            if b.kind in ("param", "momentum"):
                self.persistent[b.id] = np.zeros(shape_of(b.box), np.float32)
        self.data: dict[int, np.ndarray] = {}
        self._schedules: dict[tuple[str, ...], tuple] = {}
        # (op, worker) -> the buffers its forward task read: the backward of an op whose
        # gradient for one input needs the *other* inputs (matmul, the LSTM ops) finds
        # their regions there (a backward_data task reads only its own slot's region)
        self.forward_reads: dict[tuple[str, int], tuple[int, ...]] = {
            (t.op, t.worker): t.reads for t in tg.tasks if t.kind in ("forward", "forward_partial")}

    # ---- buffers
    def arr(self, buf: int) -> np.ndarray:
        a = self.data.get(buf)
        if a is None:
            b = self.tg.buffers[buf]
            a = self.persistent.get(buf)
            if a is None:
                dtype = np.float64 if b.kind == "stats" else np.float32
                a = np.zeros(shape_of(b.box), dtype)
            self.data[buf] = a
        return a

    def view(self, buf: int) -> tuple[np.ndarray, tuple[int, ...]]:
        return self.arr(buf), lo_of(self.tg.buffers[buf].box)

    def box(self, buf: int) -> Box:
        return self.tg.buffers[buf].box

    def store(self, buf: int, value: np.ndarray) -> None:
        """Make ``value`` the content of ``buf``: adopted without a copy when it is a fresh
        contiguous array of the right shape (kernels return new arrays), copied otherwise."""
        persistent = self.persistent.get(buf)
        if persistent is not None:
            persistent[...] = value
            return
        want = shape_of(self.tg.buffers[buf].box)
        if (isinstance(value, np.ndarray) and value.shape == want and value.flags.c_contiguous
                and value.dtype in (np.float32, np.float64) and buf not in self.data):
            self.data[buf] = value
        else:
            self.arr(buf)[...] = value

    # ---- one iteration
    def run(self, images: np.ndarray, labels: np.ndarray, phases: tuple[str, ...] = ("forward", "backward", "sync",
                                                                                  "update"),
            optimizer: Any = None, threads: bool = True) -> float:
        """Run the tasks of ``phases``; with ``threads``, on the executor's threads (one per
        device, at most one per shared core: :meth:`threads`).

        Every buffer is written only by tasks of its own device and gradient sums
        are chained in a fixed order, so the result is the same with or without
        threads.  The kernels release the GIL, so devices really run in parallel.
        """
        self.data = {}
        self.images, self.labels = images, labels
        self.optimizer = optimizer
        self.losses: dict[int, float] = {}
        self.fwd_stats: dict[tuple[str, int], int] = {}
        self.bwd_stats: dict[tuple[str, int], int] = {}
        self.dz: dict[tuple[str, int], np.ndarray] = {}
        tasks, per_thread, waits = self._schedule(tuple(phases))
        if threads and len(per_thread) > 1:
            self._run_threads(per_thread, waits)
        else:
            for t in tasks:
                getattr(self, "do_" + t.kind)(t)
        n = self.graph.ops[0].shape[0]
        return sum(self.losses[k] for k in sorted(self.losses)) / n  # fixed order: same sum every run

    @property
    def peak_bytes(self) -> dict[int, int]:
        """Bytes each device held at the end of the last step (its buffers stay until the
        next one); counted when asked, not every step (0.1-0.2 ms of a 7 ms LeNet-5 step)."""
        return self.bytes_per_device()

    def bytes_per_device(self) -> dict[int, int]:
        """Bytes of the distinct arrays each device holds now (a view is counted with its base)."""
        seen: set[int] = set()
        out: dict[int, int] = {}
        for buf, a in list(self.persistent.items()) + list(self.data.items()):
            base = a.base if a.base is not None else a
            if id(base) in seen:
                continue
            seen.add(id(base))
            dev = self.tg.buffers[buf].device
            out[dev] = out.get(dev, 0) + base.nbytes
        return out

    def threads(self) -> int:
        """How many threads run a step: one per device, but no more than the cores the
        device graph says its CPU workers share (``DeviceGraph.cpu`` sets that).  Thread c
        runs the tasks of devices c, c + threads, ... in program order: four workers on two
        cores as four threads only made the operating system and the interpreter lock
        interleave them (LeNet-5 on four workers took 11.6 ms a step, on one 6.5 ms).
        The simulator follows the same rule (``shardwise.simulate``)."""
        devices = self.tg.plan.devices
        return executor_threads(len(devices), getattr(devices, "shared_cores", None))

    def _schedule(self, phases: tuple[str, ...]) -> tuple[list[Task], dict[int, list[Task]],
                                                          dict[int, tuple[int, ...]]]:
        """The tasks of ``phases`` in program order; per thread, its own (of its devices, in
        program order); per task, the tasks of *other* threads it waits for (those of its own
        thread ran before it: the list is a topological order).  Cached per phases: the task
        graph does not change between steps."""
        hit = self._schedules.get(phases)
        if hit is not None:
            return hit
        threads = self.threads()
        tasks = [t for t in self.tg.tasks if t.phase in phases]
        thread_of = {t.id: t.device % threads for t in tasks}
        per_thread: dict[int, list[Task]] = {}
        waits: dict[int, tuple[int, ...]] = {}
        for t in tasks:
            per_thread.setdefault(thread_of[t.id], []).append(t)
            waits[t.id] = tuple(d for d in t.deps if d in thread_of and thread_of[d] != thread_of[t.id])
        self._schedules[phases] = (tasks, per_thread, waits)
        return tasks, per_thread, waits

    def _run_threads(self, per_thread: dict[int, list[Task]], waits: dict[int, tuple[int, ...]]) -> None:
        """Thread c (of a :class:`~shardwise.worker_pool.WorkerPool` kept across steps) runs
        ``per_thread[c]`` in order; a task waits on an Event only for its dependencies on
        other threads, set by the task that satisfies them (no global lock: with many small
        tasks a shared condition made the threads wake each other after every task)."""
        events = {d: threading.Event() for ds in waits.values() for d in ds}
        failure: list[BaseException] = []

        def fail(exc: BaseException) -> None:
            failure.append(exc)
            for ev in events.values():   # wake every waiting thread: they see the failure and stop
                ev.set()

        def worker(thread: int) -> None:
            for t in per_thread[thread]:
                for d in waits[t.id]:
                    events[d].wait()
                if failure:
                    return
                try:
                    getattr(self, "do_" + t.kind)(t)
                except BaseException as exc:  # re-raised on the calling thread
                    fail(exc)
                    return
                ev = events.get(t.id)
                if ev is not None:
                    ev.set()

        self._worker_pool().run([partial(worker, c) for c in sorted(per_thread)])
        if failure:
            raise failure[0]

    def _worker_pool(self) -> WorkerPool:
        """The executor's threads, started on the first threaded step and ended when the
        executor is collected."""
        pool = getattr(self, "_pool", None)
        if pool is None:
            pool = self._pool = WorkerPool(self.threads())
            weakref.finalize(self, pool.close)
        return pool

    def probabilities(self, op_name: str) -> np.ndarray:
        """Assemble the softmax output of the last run from its workers' shards."""
        op = self.ops[op_name]
        out = np.zeros(op.shape, np.float32)
        for t in self.tg.tasks:
            if t.kind == "loss" and t.op == op_name:
                b = self.tg.buffers[t.writes[0]]
                out[tuple(slice(lo, hi) for lo, hi in b.box)] = self.arr(b.id)
        return out

    # ---- moving data
    def do_join(self, t: Task) -> None:
        pass

    def do_copy(self, t: Task) -> None:
        (src,), (dst,) = t.reads, t.writes
        s, slo = self.view(src)
        d, dlo = self.view(dst)
        if s.dtype == np.float64 or d.dtype == np.float64:  # statistics stay in double precision
            sl = tuple(slice(a - o, b - o) for (a, b), o in zip(t.box, slo))
            dl = tuple(slice(a - o, b - o) for (a, b), o in zip(t.box, dlo))
            d[dl] = s[sl]
        else:
            _core.copy_box(s, slo, d, dlo)

    def do_accumulate(self, t: Task) -> None:
        (src,), (dst,) = t.reads, t.writes
        s, slo = self.view(src)
        if dst not in self.data and t.box == self.box(dst):
            # the first piece covers the whole gradient: take a copy instead of zeros + add
            self.data[dst] = np.array(s[tuple(slice(a - o, b - o) for (a, b), o in zip(t.box, slo))])
            return
        d, dlo = self.view(dst)
        _core.accumulate_box(s, slo, d, dlo)

    def do_load_input(self, t: Task) -> None:
        """The worker's box of the input op's array: ``images`` is one array (a graph with
        one input) or a dict {input op name: array}."""
        box = self.box(t.writes[0])
        images = self.images[t.op] if isinstance(self.images, dict) else self.images
        self.store(t.writes[0], images[tuple(slice(lo, hi) for lo, hi in box)])

    # ---- forward
    def params_of(self, t: Task, op: Op) -> list[int]:
        ndata = sum(1 for i in op.desc.inputs if i.role == DATA)
        return list(t.reads[ndata:])

    def do_forward(self, t: Task, relu: bool | None = None) -> None:
        op = self.ops[t.op]
        out = t.writes[0]
        ybox = self.box(out)
        if relu is None:
            relu = op.attrs.get("activation") == "relu"
        kind = op.kind
        shift = self.reduction_shift(op, t.worker)
        if kind == "conv2d":
            x, w, *b = [self.view(r) for r in t.reads]
            x, w = (x[0], self.rebased(op, 0, x[1], shift)), (w[0], self.rebased(op, 1, w[1], shift))
            bias = b[0] if b else (None, None)
            _, stride, padding = window(op)
            y = _core.conv2d_forward(x[0], x[1], w[0], w[1], bias[0], bias[1], lo_of(ybox), shape_of(ybox),
                                     stride, padding, relu)
        elif kind == "linear":
            x, w, *b = [self.view(r) for r in t.reads]
            x, w = (x[0], self.rebased(op, 0, x[1], shift)), (w[0], self.rebased(op, 1, w[1], shift))
            bias = b[0] if b else (None, None)
            y = _core.linear_forward(x[0], x[1], w[0], w[1], bias[0], bias[1], lo_of(ybox), shape_of(ybox), relu)
        elif kind == "pool2d":
            x, xlo = self.view(t.reads[0])
            kernel, stride, padding = window(op)
            y = _core.pool2d_forward(op.attrs["kind"], x, xlo, lo_of(ybox), shape_of(ybox), kernel, stride, padding)
        elif kind == "relu":
            x, xlo = self.view(t.reads[0])
            y = _core.relu_forward(x, xlo, lo_of(ybox), shape_of(ybox))
        elif kind == "add":
            (a, alo), (b2, blo) = self.view(t.reads[0]), self.view(t.reads[1])
            y = _core.add_forward(a, alo, b2, blo, lo_of(ybox), shape_of(ybox))
        elif kind == "concat":
            y = self.arr(out)
            axis = op.attrs["axis"]
            slot_bufs = iter(t.reads)
            for inp in op.desc.inputs:
                lo_w = inp.window[axis][0]
                if intersect(ybox, inp.window) is not None:
                    x, xlo = self.view(next(slot_bufs))
                    shifted = tuple(v + (lo_w if d == axis else 0) for d, v in enumerate(xlo))
                    _core.copy_box(x, shifted, y, lo_of(ybox))
            return
        elif kind == "flatten":
            x, _ = self.view(t.reads[0])
            y = x.reshape(shape_of(ybox))
        elif kind == "parameter":
            # the worker's slice of the weight (its region is the output box): a copy, since
            # the update changes the weight in place while readers may still hold the output
            p, plo = self.view(t.reads[0])
            y = np.array(p[tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(ybox, plo))])
        elif kind == "matmul":
            y = self.matmul_forward(op, t, ybox, shift)
        elif kind in ("lstm_cell", "lstm_hidden"):
            y = self.lstm_forward(op, t, ybox)
        else:
            raise NotImplementedError(f"no CPU forward for op kind {kind!r}")
        self.store(out, y)

    def do_loss(self, t: Task) -> None:
        x, xlo = self.view(t.reads[0])
        pbox = self.box(t.writes[0])
        labels = self.labels[xlo[0]:xlo[0] + x.shape[0]]
        p, loss = _core.softmax_xent_forward(x, xlo, labels, lo_of(pbox), shape_of(pbox))
        self.store(t.writes[0], p)
        self.losses[t.id] = loss

    # ---- batchnorm
    def bn_moments(self, op: Op, stats_buf: int) -> tuple[np.ndarray, np.ndarray]:
        n, _, h, w = op.shape
        m = n * h * w
        sums = self.arr(stats_buf)
        mean = sums[0] / m
        var = np.maximum(sums[1] / m - mean * mean, 0.0)
        return mean.astype(np.float32), (1.0 / np.sqrt(var + BN_EPS)).astype(np.float32)

    def do_bn_stats(self, t: Task) -> None:
        x, xlo = self.view(t.reads[0])
        self.store(t.writes[0], _core.bn_partial_sums(x, xlo))
        self.fwd_stats[(t.op, t.worker)] = t.writes[0]

    def do_stats_reduce(self, t: Task) -> None:
        total = self.arr(t.writes[0])
        for r in t.reads[1:]:
            total += self.arr(r)

    def do_bn_apply(self, t: Task) -> None:
        op = self.ops[t.op]
        region, stats, gamma, beta = t.reads
        x, xlo = self.view(region)
        mean, invstd = self.bn_moments(op, stats)
        ybox = self.box(t.writes[0])
        y = _core.bn_apply(x, xlo, mean, invstd, self.arr(gamma), self.arr(beta), lo_of(ybox), shape_of(ybox))
        self.store(t.writes[0], y)

    def do_bn_backward_stats(self, t: Task) -> None:
        op = self.ops[t.op]
        grad, region = t.reads[:2]   # then the statistics of x
        x, xlo = self.view(region)
        dy, dylo = self.view(grad)
        mean, invstd = self.bn_moments(op, self.fwd_stats[(t.op, t.worker)])
        self.store(t.writes[0], _core.bn_backward_sums(x, xlo, dy, dylo, mean, invstd))
        self.bwd_stats[(t.op, t.worker)] = t.writes[0]

    # ---- backward
    def grad_of(self, t: Task, op: Op) -> tuple[np.ndarray, tuple[int, ...]] | None:
        """dy of the worker's output (after the fused ReLU's mask), or None if nothing flows back."""
        key = (op.name, t.worker)
        if key in self.dz:
            return self.dz[key], lo_of(self.box(t.reads[0]))
        if op.kind == "softmax" or not t.reads or self.tg.buffers[t.reads[0]].kind not in ("grad", "grad_pre"):
            return None
        dy, dylo = self.view(t.reads[0])
        if self.tg.buffers[t.reads[0]].kind == "grad_pre":   # partition-n-reduce: through the activation already
            self.dz[key] = dy
            return dy, dylo
        if op.attrs.get("activation") == "relu":
            y, ylo = self.view(t.reads[1])
            dy = _core.relu_backward(y, ylo, dy, dylo, dylo, dy.shape)
        self.dz[key] = dy
        return dy, dylo

    def do_backward_data(self, t: Task) -> None:
        op = self.ops[t.op]
        out = t.writes[0]
        dxbox = self.box(out)
        dxlo, dxshape = lo_of(dxbox), shape_of(dxbox)
        kind = op.kind
        if kind == "softmax":
            pbuf = t.reads[0]
            p, plo = self.view(pbuf)
            labels = self.labels[plo[0]:plo[0] + p.shape[0]]
            dx = _core.softmax_xent_backward(p, plo, labels, op.shape[0])
            target = self.arr(out)
            _core.copy_box(dx, plo, target, dxlo)
            return
        g = self.grad_of(t, op)
        if g is None:
            return  # nothing reaches this op: its partial gradient stays zero
        dy, dylo = g
        # reads: dy and y (dy absent when nothing flows back; the gradient before the activation
        # under a split reduction), this slot's region, then what some kernels also need
        region_buf = t.reads[2 if self.tg.buffers[t.reads[0]].kind == "grad" else 1]
        shift = self.reduction_shift(op, t.worker)
        if kind == "conv2d":
            w, wlo = self.view(self.weight_buf(op, t.worker))
            kernel, stride, padding = window(op)
            dx = _core.conv2d_backward_data(w, self.rebased(op, 1, wlo, shift), dy, dylo,
                                            self.rebased(op, 0, dxlo, shift), dxshape, kernel, stride, padding)
        elif kind == "linear":
            w, wlo = self.view(self.weight_buf(op, t.worker))
            dx = _core.linear_backward_data(w, self.rebased(op, 1, wlo, shift), dy, dylo,
                                            self.rebased(op, 0, dxlo, shift), dxshape)
        elif kind == "pool2d":
            x, xlo = self.view(region_buf)
            kernel, stride, padding = window(op)
            dx = _core.pool2d_backward(op.attrs["kind"], x, xlo, dy, dylo, dxlo, dxshape, kernel, stride, padding)
        elif kind == "relu":
            y, ylo = self.view(t.reads[1])
            dx = _core.relu_backward(y, ylo, dy, dylo, dxlo, dxshape)
        elif kind in ("add", "concat"):
            dx = np.zeros(dxshape, np.float32)
            if kind == "concat":
                axis = op.attrs["axis"]
                shift = op.desc.inputs[t.slot].window[axis][0]
                src_lo = tuple(v - (shift if d == axis else 0) for d, v in enumerate(dylo))
            else:
                src_lo = dylo
            _core.copy_box(np.ascontiguousarray(dy), src_lo, dx, dxlo)
        elif kind == "flatten":
            dx = dy.reshape(dxshape)
        elif kind == "matmul":
            dx = self.matmul_backward(op, t, dy, dylo, dxbox, shift)
        elif kind in ("lstm_cell", "lstm_hidden"):
            dx = self.lstm_backward(op, t, dy, dylo, dxbox)
        elif kind == "batchnorm2d":
            x, xlo = self.view(region_buf)
            mean, invstd = self.bn_moments(op, self.fwd_stats[(op.name, t.worker)])
            gamma = self.arr(self.param_buf(op, "weight", t.worker))
            sums = self.arr(self.bwd_stats[(op.name, t.worker)])
            n, _, h, w = op.shape
            dx = _core.bn_backward_apply(x, xlo, dy, dylo, mean, invstd, gamma, sums, n * h * w, dxlo, dxshape)
        else:
            raise NotImplementedError(f"no CPU backward for op kind {kind!r}")
        self.store(out, dx)

    def do_backward_weight(self, t: Task) -> None:
        op = self.ops[t.op]
        g = self.grad_of(t, op)
        outs = list(t.writes)
        if g is None:
            return
        dy, dylo = g
        region = self.regions_of(t, op)
        shift = self.reduction_shift(op, t.worker)
        if op.kind == "conv2d":
            x, xlo = self.view(region[0])
            _, stride, padding = window(op)
            wshape = self.rebased_shape(op, 1, shift)  # the whole weight; dw comes back for dy's channel range
            dw, db = _core.conv2d_backward_weight(x, self.rebased(op, 0, xlo, shift), dy, dylo, wshape, stride,
                                                  padding, len(outs) > 1)
        elif op.kind == "linear":
            x, xlo = self.view(region[0])
            dw, db = _core.linear_backward_weight(x, self.rebased(op, 0, xlo, shift), dy, dylo,
                                                  self.rebased_shape(op, 1, shift), len(outs) > 1)
        elif op.kind == "batchnorm2d":
            x, xlo = self.view(region[0])
            mean, invstd = self.bn_moments(op, self.fwd_stats[(op.name, t.worker)])
            sums = _core.bn_backward_sums(x, xlo, dy, dylo, mean, invstd)
            dw, db = sums[1].astype(np.float32), sums[0].astype(np.float32)  # dgamma, dbeta
        elif op.kind == "parameter":
            # the weight slice is the output box: its gradient is the output's, summed over
            # every reader by the accumulate tasks already (a copy: the grad buffer stays intact)
            wbox = self.box(outs[0])
            dw = np.array(dy[tuple(slice(lo - o, hi - o) for (lo, hi), o in zip(wbox, dylo))])
            db = None
        else:
            raise NotImplementedError(f"no CPU weight gradient for op kind {op.kind!r}")
        self.store(outs[0], dw)
        if len(outs) > 1:
            self.store(outs[1], db)

    def regions_of(self, t: Task, op: Op) -> list[int]:
        return [r for r in t.reads if self.tg.buffers[r].kind in ("region", "activation")
                and self.tg.buffers[r].op != op.name]

    # ---- synchronization and update
    def do_reduce(self, t: Task) -> None:
        total = self.arr(t.writes[0])
        for r in t.reads[1:]:
            total += self.arr(r)

    def do_update(self, t: Task) -> None:
        param, grad, mom = t.reads
        self.optimizer.apply(self.arr(param), self.arr(grad), self.arr(mom), self.momentum_started)

    # ---- lookups
    def param_buf(self, op: Op, pname: str, worker: int) -> int:
        return self.param_index[(op.name, pname, worker)]

    def weight_buf(self, op: Op, worker: int) -> int:
        return self.param_buf(op, "weight", worker)
