"""Tofu's communication model (seed 004 sections 3-4), computed from the op descriptions.

Partitions are built one recursion level at a time.  At a level with ``p`` worker
groups, every *tensor* is cut into ``p`` equal slices along one of its dimensions, and
every *op* cuts its iteration space into ``p`` equal slices along one variable: an
output dimension (each group computes a slice of the output) or a reduction dimension
(partition-n-reduce: each group computes a partial output over a slice of the
reduction, then the partials are summed).  A composite partition is the list of the
choices made so far, ``((index, parts), ...)``, one entry per level; index ``-1`` means
"not cut at that level" (replicated), used only when no dimension divides.

Worker group ``(j_1, ..., j_i)`` of level ``i`` owns, of each tensor, the box obtained by
cutting slice ``j_1`` at level 1, then slice ``j_2`` of that at level 2, and so on; the
same nesting gives the iteration box it computes.  Communication, in elements:

* an input of an op (data, weight or statistics): each group fetches the part of the
  region it reads (halos included; the C core's region arithmetic, csrc/core/region.c,
  asked for all groups in one call) that it does not own; the backward pass sends the
  same region's partial gradient back to its owners, so each input costs twice its fetch
  (once for inputs of ``input`` ops, which get no gradient);
* the output of an op: each group assembles its own slice of the output tensor from the
  pieces (or partial sums, after a reduction split) the other groups computed, and in
  the backward pass fetches the output gradient over the box it computed.

The total over all groups of the last level is the number of elements moved between
the ``k`` workers per iteration; each tensor is split equally, so each worker holds
``1/k`` of every tensor.  Weights are partitioned like any tensor (their gradients and
optimizer state alike), and the update is local.
"""
from __future__ import annotations

import functools
import itertools
from math import prod
from typing import Sequence

import numpy as np

from shardwise.graph import Graph, Op
from shardwise.ops.box import Box
from shardwise.ops.desc import DATA, OpDesc
from shardwise.planning.regions import region_problem

Parts = tuple[tuple[int, int], ...]   # ((dimension or variable index, parts), ...) per level
REPLICATE = -1



def level_groups(parts: Sequence[int]) -> list[tuple[int, ...]]:
    """Every group index ``(j_1, ..., j_i)`` of a recursion with ``parts`` groups per level."""
    return list(itertools.product(*(range(p) for p in parts)))


def nested_box(extents: Sequence[int], parts: Parts, group: Sequence[int]) -> Box:
    """The box of ``group`` when ``extents`` are cut level by level as ``parts`` says."""
    lo = [0] * len(extents)
    size = list(extents)
    for (d, p), j in zip(parts, group):
        if d == REPLICATE:
            continue
        size[d] //= p
        lo[d] += j * size[d]
    return tuple((a, a + s) for a, s in zip(lo, size))


def shard_sizes(extents: Sequence[int], parts: Parts) -> list[int]:
    """Per dimension, the size of one slice after the cuts in ``parts``."""
    size = list(extents)
    for d, p in parts:
        if d != REPLICATE:
            size[d] //= p
    return size


@functools.lru_cache(maxsize=None)
def _group_digits(parts: tuple[int, ...]) -> np.ndarray:
    """:func:`level_groups` as a (groups, levels) int64 array, the same order."""
    groups = level_groups(parts)
    digits = np.asarray(groups, dtype=np.int64).reshape(len(groups), len(parts))
    digits.setflags(write=False)   # shared by every caller
    return digits


@functools.lru_cache(maxsize=1 << 16)
def nested_boxes(extents: tuple[int, ...], parts: Parts, levels: tuple[int, ...]) -> tuple[np.ndarray, np.ndarray]:
    """:func:`nested_box` of every group of ``levels`` (groups per level, :func:`level_groups`
    order) at once: (lo, hi) arrays of shape (groups, len(extents)), read-only (memoized)."""
    digits = _group_digits(levels)
    lo = np.zeros((digits.shape[0], len(extents)), dtype=np.int64)
    size = list(extents)
    for level, (d, p) in enumerate(parts[: digits.shape[1]]):
        if d == REPLICATE:
            continue
        size[d] //= p
        lo[:, d] += digits[:, level] * size[d]
    hi = lo + np.asarray(size, dtype=np.int64)
    lo.setflags(write=False)
    hi.setflags(write=False)
    return lo, hi


def _overlap(alo: np.ndarray, ahi: np.ndarray, blo: np.ndarray, bhi: np.ndarray) -> np.ndarray:
    """Per row, the volume of the intersection of box a and box b (0 when they miss)."""
    return np.maximum(np.minimum(ahi, bhi) - np.maximum(alo, blo), 0).prod(axis=1)


def reducible_variables(op: Op) -> list[int]:
    """Reduction variables along which partition-n-reduce is exact: the description marks
    the variable additive (partial results add up: conv's ci, linear's i, matmul's k, the
    Sums of described ops; the same flag the core's cost model and the executor use), and
    every index expression using it uses no other one, so the groups read disjoint slices
    (Tofu refuses ``x + dx``; seed 004 section 3.2)."""
    desc = op.desc
    out = []
    for v in desc.additive:
        ok = True
        for inp in desc.inputs:
            for e in inp.exprs:
                if e.coefs[v] == 0:
                    continue
                others = [u for u, c in enumerate(e.coefs) if c and u != v and desc.extents[u] > 1]
                if others or not e.affine:
                    ok = False
        if ok:
            out.append(v)
    return out


def op_choices(op: Op, prev: Parts, p: int, reductions: bool) -> list[int]:
    """Iteration variables the op may cut into ``p`` slices at this level, given its earlier
    cuts ``prev``: output dimensions whose slices stay whole multiples of their granule,
    and (if ``reductions``) reducible reduction variables; ``[REPLICATE]`` if none."""
    desc = op.desc
    size = shard_sizes(desc.extents, prev)
    granules = desc.split_granules()
    out = [v for v in range(desc.out_rank)
           if v not in desc.unsplittable and size[v] % p == 0 and (size[v] // p) % granules[v] == 0]
    if reductions:
        out += [v for v in reducible_variables(op) if size[v] % p == 0]
    return out or [REPLICATE]


def tensor_choices(shape: Sequence[int], prev: Parts, p: int) -> list[int]:
    """Dimensions of a tensor that can be cut into ``p`` equal slices after ``prev``."""
    size = shard_sizes(shape, prev)
    return [d for d, s in enumerate(size) if s % p == 0] or [REPLICATE]


class CommModel:
    """Element counts of Tofu's communication model for one graph, memoized.

    Ops with equal descriptions (the timesteps of an RNN) share one signature, so their
    costs are computed once per pair of partitions.
    """

    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        signatures: dict[OpDesc, int] = {}
        self.sig = [signatures.setdefault(op.desc, len(signatures)) for op in graph.ops]
        self._rep = [0] * len(signatures)          # an op of each signature: the one regions are asked for
        for op in reversed(graph.ops):
            self._rep[self.sig[op.index]] = op.index
        self._cache: dict[tuple, int] = {}
        self._regions: dict[tuple, tuple] = {}
        self._problem = region_problem(graph)
        self.gradient = [op.kind != "input" for op in graph.ops]   # does the op's output get a gradient?

    def input_fetch(self, op: Op, slot: int, op_parts: Parts, tensor_parts: Parts) -> int:
        """Elements moved for input ``slot`` of ``op`` over all groups: the forward fetch of
        the region read and not owned, doubled for the gradient sent back (unless the
        input comes from an ``input`` op or is never differentiated)."""
        key = ("in", self.sig[op.index], slot, op_parts, tensor_parts)
        hit = self._cache.get(key)
        if hit is None:
            hit = self._fetch(op, slot, op_parts, tensor_parts)
            self._cache[key] = hit
        inp = op.desc.inputs[slot]
        if inp.role == DATA and not self.gradient[op.inputs[self._data_position(op, slot)]]:
            return hit
        return 2 * hit

    @staticmethod
    def _data_position(op: Op, slot: int) -> int:
        """Index into ``op.inputs`` (producers of DATA inputs, in order) of input ``slot``."""
        return sum(1 for s in range(slot) if op.desc.inputs[s].role == DATA)

    def regions(self, op: Op, slot: int, op_parts: Parts) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """(rlo, rhi, used, volume) of the region of input ``slot`` each group of ``op_parts``
        reads (rows in :func:`level_groups` order), from the C core in one call; memoized per
        signature, since a level asks for it under many tensor partitions."""
        key = (self.sig[op.index], slot, op_parts)
        hit = self._regions.get(key)
        if hit is None:
            lo, hi = nested_boxes(tuple(op.desc.extents), op_parts, tuple(p for _, p in op_parts))
            rlo, rhi, used = self._problem.iteration_regions(self._rep[self.sig[op.index]], slot, lo, hi)
            hit = (rlo, rhi, used, np.where(used, (rhi - rlo).prod(axis=1), 0))
            self._regions[key] = hit
        return hit

    def _fetch(self, op: Op, slot: int, op_parts: Parts, tensor_parts: Parts) -> int:
        rlo, rhi, used, size = self.regions(op, slot, op_parts)
        olo, ohi = nested_boxes(tuple(op.desc.inputs[slot].shape), tensor_parts, tuple(p for _, p in op_parts))
        return int((size - np.where(used, _overlap(rlo, rhi, olo, ohi), 0)).sum())

    def output_cost(self, op: Op, op_parts: Parts, tensor_parts: Parts) -> int:
        """Elements moved to place the op's output in its tensor's partition (forward: each
        group gathers its slice, summing one partial per reduction slice) and to give each
        group the output gradient over the box it computed (backward)."""
        key = ("out", self.sig[op.index], op_parts, tensor_parts, self.gradient[op.index])
        hit = self._cache.get(key)
        if hit is not None:
            return hit
        desc = op.desc
        rank = desc.out_rank
        partials = prod(p for v, p in op_parts if v >= rank)   # distinct reduction slices
        levels = tuple(p for _, p in op_parts)
        clo, chi = nested_boxes(tuple(desc.extents), op_parts, levels)
        clo, chi = clo[:, :rank], chi[:, :rank]                     # the output box each group computes
        olo, ohi = nested_boxes(tuple(desc.out_shape), tensor_parts, levels)
        overlap = _overlap(clo, chi, olo, ohi)
        total = int((partials * (ohi - olo).prod(axis=1) - overlap).sum())   # forward: pieces and partials
        if self.gradient[op.index]:
            total += int(((chi - clo).prod(axis=1) - overlap).sum())        # backward: output gradient
        self._cache[key] = total
        return total
