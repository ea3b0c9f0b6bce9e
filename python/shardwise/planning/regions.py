"""The region of an input that a box of an op's iteration space reads, asked of the C core.

csrc/core/region.c is the one implementation of the interval arithmetic on index expressions
(halos, padding, strides, concat windows, flatten's quasi-affine map); the planner, the lowering
and the cost model use it there, and Python asks the same code through ``_core.Problem``:
``iteration_region`` for one box, ``iteration_regions`` for many boxes in one call (Tofu's
model asks for every group of a partition at once).  Nothing here derives a region itself.

:func:`region_problem` encodes a graph for these questions alone (one notional device, no cost
options); :func:`input_region` and :func:`iteration_region` answer for an op description that
is not in a graph (its data inputs become graph inputs of their shapes).
"""
from __future__ import annotations

import numpy as np

from shardwise import _core
from shardwise.graph import Graph
from shardwise.ops.box import Box
from shardwise.ops.builtin import input_op
from shardwise.ops.desc import DATA, OpDesc
from shardwise.planning.problem import encode_graph, encode_ops

_ONE_DEVICE = (np.ones(1), np.ones(1), np.zeros((1, 1)))   # regions do not depend on the machine


def region_problem(graph: Graph) -> "_core.Problem":
    """The C core's problem of ``graph`` for region questions (op ``i`` is ``graph.ops[i]``)."""
    blob, flops = encode_graph(graph)
    return _core.Problem(blob, flops, *_ONE_DEVICE)


_ALONE: dict[int, tuple[OpDesc, "_core.Problem", int]] = {}
_ALONE_LIMIT = 512


def desc_problem(desc: OpDesc) -> tuple["_core.Problem", int]:
    """(problem, op index) of ``desc`` alone, its data inputs made inputs of their shapes.
    Cached per description object."""
    hit = _ALONE.get(id(desc))
    if hit is not None and hit[0] is desc:
        return hit[1], hit[2]
    inputs = [input_op(tuple(inp.shape)) for inp in desc.inputs if inp.role == DATA]
    n = len(inputs) + 1
    blob, _ = encode_ops([*inputs, desc], [()] * len(inputs) + [range(len(inputs))])
    problem = _core.Problem(blob, np.zeros((n, 2)), *_ONE_DEVICE)
    if len(_ALONE) >= _ALONE_LIMIT:
        _ALONE.clear()
    _ALONE[id(desc)] = (desc, problem, n - 1)
    return problem, n - 1


def iteration_region(desc: OpDesc, slot: int, ibox: Box) -> Box | None:
    """The box of input ``slot`` read by the iteration points of ``ibox`` (one non-empty range
    per iteration variable: output dimensions, then reductions), clipped to the input; None
    when the input is not read there (outside its concat window)."""
    problem, op = desc_problem(desc)
    lo = np.asarray([[a for a, _ in ibox]], dtype=np.int64)
    hi = np.asarray([[b for _, b in ibox]], dtype=np.int64)
    rlo, rhi, used = problem.iteration_regions(op, slot, lo, hi)
    if not used[0]:
        return None
    return tuple((int(a), int(b)) for a, b in zip(rlo[0], rhi[0]))


def input_region(desc: OpDesc, slot: int, out_box: Box) -> Box | None:
    """The box of input ``slot`` read by the points of ``out_box`` (every reduction in full),
    clipped to the input; None when the input is not read (outside its window) or the box
    is empty."""
    if any(hi <= lo for lo, hi in out_box):
        return None
    ibox = tuple(out_box) + tuple((0, e) for e in desc.extents[desc.out_rank:])
    return iteration_region(desc, slot, ibox)


__all__ = ["region_problem", "desc_problem", "iteration_region", "input_region"]
