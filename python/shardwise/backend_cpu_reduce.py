"""Partition-n-reduce on the CPU backend: tasks of ops whose configuration splits a reduction.

A mixin of :class:`~shardwise.backend_cpu.CpuExecutor`.  A worker of a reduction group
computes a partial output over its part of the split variable with the ordinary kernels,
its coordinates along that variable shifted down so that the part looks like the whole
reduction; the group's owner sums the partial outputs and applies the activation
(``sum_partials``), and takes the gradient back through it for the group
(``activation_grad``).
"""
from __future__ import annotations

import numpy as np

from . import _core
from .graph import Op
from .boxes import lo_of, shape_of
from .lower import Task


class PartialSumTasks:
    """reduction_shift / rebased coordinates and the three partition-n-reduce task kinds."""

    def reduction_shift(self, op: Op, worker: int) -> tuple[int, int] | None:
        """(variable, start) of the reduction part ``worker`` computes, or None.  Its kernels run
        as if that part were the whole reduction: every coordinate indexed by the variable is
        shifted down by ``start`` (views only move their ``lo``, no data is copied)."""
        cfg = self.plan_configs[op.name]
        if cfg.reduction is None:
            return None
        var = op.desc.out_rank + op.desc.reductions.index(cfg.reduction[0])
        return var, (worker % cfg.reduction[1]) * (op.desc.extents[var] // cfg.reduction[1])

    def rebased(self, op: Op, slot: int, lo: tuple[int, ...], shift: tuple[int, int] | None) -> tuple[int, ...]:
        if shift is None:
            return lo
        var, start = shift
        exprs = op.desc.inputs[slot].exprs
        return tuple(v - start if exprs[d].coefs[var] else v for d, v in enumerate(lo))

    def rebased_shape(self, op: Op, slot: int, shift: tuple[int, int] | None) -> tuple[int, ...]:
        """The shape of input ``slot`` as the kernels of one reduction part see it."""
        shape = op.desc.inputs[slot].shape
        if shift is None:
            return shape
        var = shift[0]
        part = op.desc.extents[var] // self.plan_configs[op.name].reduction[1]
        return tuple(part if e.coefs[var] else n for e, n in zip(op.desc.inputs[slot].exprs, shape))

    def do_forward_partial(self, t: Task) -> None:
        """This worker's part of the reduction (no activation: it applies to the sum)."""
        self.do_forward(t, relu=False)

    def do_sum_partials(self, t: Task) -> None:
        """The owner's partial output plus the others', then the activation (csrc eltwise)."""
        op = self.ops[t.op]
        total = np.array(self.arr(t.reads[0]))
        for r in t.reads[1:]:
            total += self.arr(r)
        if op.attrs.get("activation") == "relu":
            lo = lo_of(self.box(t.writes[0]))
            total = _core.relu_forward(total, lo, lo, total.shape)
        self.store(t.writes[0], total)

    def do_activation_grad(self, t: Task) -> None:
        """The block's gradient through the activation, for every worker of the group."""
        op = self.ops[t.op]
        gbox = self.box(t.writes[0])
        if len(t.reads) < 2:   # nothing flows back into this op
            self.store(t.writes[0], np.zeros(shape_of(gbox), np.float32))
            return
        dy, dylo = self.view(t.reads[0])
        if op.attrs.get("activation") == "relu":
            y, ylo = self.view(t.reads[1])
            dy = _core.relu_backward(y, ylo, dy, dylo, dylo, dy.shape)
        self.store(t.writes[0], dy)
