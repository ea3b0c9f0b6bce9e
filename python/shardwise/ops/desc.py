"""Operator descriptions: one affine index map per input dimension.

Every operator is described once, in the spirit of Tofu's tensor-as-a-lambda:

    conv2d:  out[n, co, y, x] = Sum(ci, dy, dx) data[n, ci, y*s + dy - p, x*s + dx - p]
                                                * weight[co, ci, dy, dx] + bias[co]

An :class:`OpDesc` holds the *iteration space* (the output dimensions followed
by the reduction dimensions, each with an extent) and, for every input, one
:class:`IndexExpr` per input dimension saying which input index an iteration
point reads.  Everything the planner needs is derived from this one
description in the C core: which output dimensions may be split, the input
region a worker needs for its output box (convolution halos included),
transfer volumes between two configurations, parameter replicas, FLOPs and
parameter counts.  No op has hand-written cost code.

An index expression is ``((sum_v coef[v] * (iter[v] // vdiv[v]) + offset) // div) % mod``
(``mod == 0`` means no modulo).  Plain affine maps have every ``vdiv`` 1, ``div == 1``
and ``mod == 0``; the quasi-affine forms describe ``flatten`` (``div``, ``mod``) and a
grouped convolution's input channel ``cig * (co // cog) + ci`` (``vdiv``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import Sequence

# Roles an input can play; they decide how the cost model treats it.
DATA = 0     # an activation produced by another op: moved between workers (t_x)
WEIGHT = 1   # a trainable parameter: replicas are synchronized (t_s), counted as parameters
STAT = 2     # per-channel statistics reduced among replicas (batchnorm): t_s, not parameters
ROLE_BIAS = 3   # the C core's code for a WEIGHT input with bias=True (InputDesc.bias)

ROLE_NAMES = {DATA: "data", WEIGHT: "weight", STAT: "stat"}

# The index arithmetic the C core accepts when it decodes a graph (csrc/core/problem.c): larger
# strides, offsets or flatten periods are refused there as a ValueError at search time, so
# the graph builder refuses them first (shardwise.graph).
MAX_INDEX_COEF = 2**20     # |coefficient|: a stride
MAX_INDEX_OFFSET = 2**40   # |offset|: a padding, a concat offset
MAX_INDEX_PERIOD = 2**40   # div and mod: flatten's strides and sizes


@dataclass(frozen=True)
class IndexExpr:
    """``((sum_v coefs[v] * (iter[v] // vdivs[v]) + offset) // div) % mod`` over the iteration
    variables; ``vdivs`` empty means every variable's divisor is 1 (a plain affine sum)."""

    coefs: tuple[int, ...]
    offset: int = 0
    div: int = 1
    mod: int = 0
    vdivs: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.div < 1:
            raise ValueError(f"index expression divisor must be >= 1, got {self.div}")
        if self.mod < 0:
            raise ValueError(f"index expression modulus must be >= 0, got {self.mod}")
        if self.vdivs and (len(self.vdivs) != len(self.coefs) or min(self.vdivs) < 1):
            raise ValueError(f"index expression variable divisors {self.vdivs} must be >= 1, one per variable")

    def vdiv(self, v: int) -> int:
        """The divisor of variable ``v`` (1 unless a ``vdivs`` entry says otherwise)."""
        return self.vdivs[v] if self.vdivs else 1

    @property
    def affine(self) -> bool:
        """A plain affine map: no divisor anywhere, no modulo."""
        return self.div == 1 and self.mod == 0 and not any(q != 1 for q in self.vdivs)

    def variables(self) -> list[int]:
        """Indices of the iteration variables this expression depends on."""
        return [v for v, c in enumerate(self.coefs) if c != 0]


def var(nvars: int, v: int, coef: int = 1, offset: int = 0) -> IndexExpr:
    """The expression ``coef * iter[v] + offset`` in an iteration space of ``nvars`` variables."""
    coefs = [0] * nvars
    coefs[v] = coef
    return IndexExpr(tuple(coefs), offset)


def affine(nvars: int, terms: dict[int, int], offset: int = 0) -> IndexExpr:
    """The expression ``sum(coef * iter[v] for v, coef in terms) + offset``."""
    coefs = [0] * nvars
    for v, c in terms.items():
        coefs[v] = c
    return IndexExpr(tuple(coefs), offset)


@dataclass(frozen=True)
class InputDesc:
    """How one input of an op is read.

    ``exprs[d]`` gives the index into input dimension ``d``.  ``window`` (one
    half-open ``(lo, hi)`` range per *output* dimension) restricts the output
    points that read this input at all; concat uses it so that each input
    feeds only its own slice of the output.  ``bias`` marks a WEIGHT input that
    is added to the output (a convolution's or linear layer's bias, a batch
    norm's beta): its gradient is the output's gradient summed over the
    dimensions it does not index, so the task computing it reads nothing else
    and runs apart from the weight gradient (the dB sub-task of the TurboDL
    paper).
    """

    role: int
    shape: tuple[int, ...]
    exprs: tuple[IndexExpr, ...]
    window: tuple[tuple[int, int], ...] | None = None
    bias: bool = False

    def __post_init__(self) -> None:
        if self.bias and self.role != WEIGHT:
            raise ValueError("only a WEIGHT input can be a bias")


@dataclass(frozen=True)
class OpDesc:
    """The iteration space of an op and how each input is indexed from it.

    ``extents[:out_rank]`` is the output shape; the remaining extents are
    reduction dimensions.  ``flops_per_point`` counts floating-point operations
    per point of the whole iteration space (2 for a multiply-add),
    ``flops_per_output`` adds a per-output-element term (e.g. an activation).
    """

    extents: tuple[int, ...]
    out_rank: int
    inputs: tuple[InputDesc, ...]
    flops_per_point: float = 0.0
    flops_per_output: float = 0.0
    reductions: tuple[str, ...] = field(default=())
    unsplittable: tuple[int, ...] = field(default=())   # output dims computed as a whole (opaque functions)
    # reduction variables (iteration indices >= out_rank) whose partial results add up: splitting
    # one gives partial outputs and a sum (partition-n-reduce, seed 004 section 3.2)
    additive: tuple[int, ...] = field(default=())

    @property
    def out_shape(self) -> tuple[int, ...]:
        return self.extents[: self.out_rank]

    @property
    def nvars(self) -> int:
        return len(self.extents)

    def forward_flops(self) -> int:
        """FLOPs of one forward pass, derived from the iteration space."""
        points = prod(self.extents)
        outputs = prod(self.out_shape)
        return int(round(points * self.flops_per_point + outputs * self.flops_per_output))

    def num_parameters(self) -> int:
        return sum(prod(i.shape) for i in self.inputs if i.role == WEIGHT)

    def split_granules(self) -> tuple[int, ...]:
        """Per output dimension, the size every shard of that dimension must be a multiple of.

        A split is exact (the region a worker reads is a box) only if no shard
        boundary falls inside a ``div``/``mod`` period: for ``(v // q) % m`` the
        shard size must be a multiple of ``q * m``, for ``v // q`` a multiple of
        ``q``.  Plain affine maps impose nothing (granule 1).  Made once per OpDesc (frozen):
        the baselines ask for every op's, once per op and strategy.
        """
        cached = self.__dict__.get("_split_granules")
        if cached is not None:
            return cached
        granules = [1] * self.out_rank
        for v in self.unsplittable:
            granules[v] = self.extents[v]  # only degree 1 keeps whole shards
        for inp in self.inputs:
            for e in inp.exprs:
                if e.div == 1 and e.mod == 0:
                    continue
                period = e.div * (e.mod if e.mod else 1)
                for v in e.variables():
                    if v < self.out_rank:
                        granules[v] = _lcm(granules[v], period)
        object.__setattr__(self, "_split_granules", tuple(granules))   # derived data, not a field
        return self.__dict__["_split_granules"]

    def validate(self) -> None:
        """Check internal consistency: ranks, coefficient counts, windows, additive variables."""
        if not 1 <= self.out_rank <= len(self.extents):
            raise ValueError(f"out_rank {self.out_rank} outside 1..{len(self.extents)}")
        for v in self.additive:
            if not self.out_rank <= v < len(self.extents):
                raise ValueError(f"additive variable {v} is not a reduction variable "
                                 f"({self.out_rank}..{len(self.extents) - 1})")
        for e in self.extents:
            if e <= 0:
                raise ValueError(f"iteration extents must be positive, got {self.extents}")
        for k, inp in enumerate(self.inputs):
            if len(inp.exprs) != len(inp.shape):
                raise ValueError(f"input {k}: {len(inp.exprs)} index expressions for rank {len(inp.shape)}")
            for e in inp.exprs:
                if len(e.coefs) != self.nvars:
                    raise ValueError(f"input {k}: expression over {len(e.coefs)} variables, op has {self.nvars}")
            if inp.window is not None and len(inp.window) != self.out_rank:
                raise ValueError(f"input {k}: window rank {len(inp.window)} != output rank {self.out_rank}")


def _lcm(a: int, b: int) -> int:
    from math import gcd

    return a * b // gcd(a, b)


def identity_exprs(nvars: int, rank: int) -> tuple[IndexExpr, ...]:
    """``in[i0, ..., i_{rank-1}]`` read at the output's own indices."""
    return tuple(var(nvars, d) for d in range(rank))


def channel_exprs(nvars: int, channel_var: int = 1) -> tuple[IndexExpr, ...]:
    """A per-channel vector ``v[c]`` indexed by iteration variable ``channel_var``."""
    return (var(nvars, channel_var),)


def shape_tuple(shape: Sequence[int]) -> tuple[int, ...]:
    return tuple(int(s) for s in shape)
