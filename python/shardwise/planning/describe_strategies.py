"""The strategies of one described operator: :func:`shardwise.strategies_of` and :class:`Strategy`.

Which dimensions of an ``@sw.op`` definition (or of an op of a graph) can be partitioned, and what
partitioning each costs in transfers, read off the same compiled :class:`~shardwise.ops.desc.OpDesc`
the planner uses (``analysis="exact"``) or Tofu's rule of the paper (``analysis="tofu"``).  Apart
from describe.py, which traces and compiles descriptions, because this is the analysis of one.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Sequence

from shardwise.ops.describe import DescriptionError, OpDefinition, TensorArg
from shardwise.ops.desc import IndexExpr, OpDesc

if TYPE_CHECKING:
    from shardwise.graph import Op


@dataclass(frozen=True)
class Strategy:
    """Splitting one dimension of an operator's iteration space between two workers."""

    dimension: str
    kind: str                       # "output" or "reduction" (partition-n-reduce)
    valid: bool
    reason: str                     # why a split is refused ("" when valid)
    regions: tuple[dict[str, tuple[tuple[int, int], ...]], ...]   # per worker: input name -> box

    def __str__(self) -> str:
        if not self.valid:
            return f"{self.kind} {self.dimension}: refused ({self.reason})"
        text = "; ".join(", ".join(f"{k}{list(v)}" for k, v in r.items()) for r in self.regions)
        return f"{self.kind} {self.dimension}: {text}"


def _single_op_problem(definition: OpDefinition, shapes: dict[str, Sequence[int]]):
    """The C core's problem for one described op whose inputs are graph inputs, on one
    device: the region arithmetic then comes from the same C code as the planner's."""
    from shardwise.machine.devices import DeviceGraph
    from shardwise.graph import Graph
    from shardwise.planning.problem import CostOptions, make_problem

    g = Graph(f"{definition.name} alone")
    xs = [g.input(p, tuple(int(v) for v in shapes[p])) for p in definition.params]
    g.custom(definition, xs)
    return make_problem(g, DeviceGraph.cpu(1), CostOptions(threads=1)), len(xs)


def strategies_of(definition: "OpDefinition | Op", analysis: str = "exact", **shapes: Sequence[int]) -> list[Strategy]:
    """Every way of splitting the operator between two workers along one dimension, with the
    region of each input each worker reads, or why the split is refused.

    ``definition`` is an operator described with ``@sw.op`` (its input shapes as keyword
    arguments) or an op of a graph (``g["conv1"]``, built-in or custom: its data inputs are
    named ``input0, input1, ...``, its weights ``<op>.weight`` / ``<op>.bias``, the
    dimensions ``n, c, h, w`` and the description's reduction names).

    ``analysis="exact"`` accepts a split when every region is exactly a box (``x + dx`` in
    a convolution gives a halo); ``analysis="tofu"`` is the Tofu paper's symbolic interval
    analysis, which cannot add two intervals and so refuses any dimension whose variable
    appears in an index together with another variable (conv1d's ``x`` and ``dx``).
    Regions and exactness come from the C core (``sw_iteration_region`` in
    csrc/core/region.c), the same interval arithmetic the planner and the lowering use."""
    from shardwise.graph import Op

    if analysis not in ("exact", "tofu"):
        raise DescriptionError(f"unknown analysis {analysis!r}; expected 'exact' or 'tofu'")
    if isinstance(definition, Op):
        if shapes:
            raise DescriptionError("a graph op has its shapes already; pass no shapes")
        return _strategies(definition.desc, *_graph_op_problem(definition), analysis)
    if not isinstance(definition, OpDefinition):
        raise DescriptionError(f"strategies_of needs an @sw.op definition or a graph op, got "
                               f"{type(definition).__name__}")
    desc = definition.describe(shapes)
    problem, op_index = _single_op_problem(definition, shapes)
    var_names = [*(_out_names(definition, shapes)), *desc.reductions]
    return _strategies(desc, list(definition.params), var_names, problem, op_index, analysis)


def _graph_op_problem(op: "Op"):
    """(input names, variable names, problem, op index) for an op of a graph: the op alone,
    its data inputs made graph inputs of the same shapes."""
    from shardwise.machine.devices import DeviceGraph
    from shardwise.graph import Graph
    from shardwise.ops.desc import DATA, STAT
    from shardwise.planning.problem import CostOptions, dim_names, make_problem

    g = Graph(f"{op.name} alone")
    names, xs, weights = [], [], 0
    for k, inp in enumerate(op.desc.inputs):
        if inp.role == DATA:
            names.append(f"input{len(xs)}")
            xs.append(g.input(f"input{len(xs)}", inp.shape))
        else:
            names.append(f"{op.name}.stats" if inp.role == STAT else f"{op.name}.{('weight', 'bias')[min(weights, 1)]}")
            weights += inp.role != STAT
    alone = g._add(op.kind, xs, op.desc, op.name, **op.attrs)
    var_names = [*dim_names(op.desc.out_rank), *op.desc.reductions]
    return names, var_names, make_problem(g, DeviceGraph.cpu(1), CostOptions(threads=1)), alone.op


def _strategies(desc: OpDesc, names: list[str], var_names: list[str], problem, op_index: int,
                analysis: str) -> list[Strategy]:
    """strategies_of for a description whose op is ``op_index`` of ``problem``."""
    out = []
    for v, extent in enumerate(desc.extents):
        kind = "output" if v < desc.out_rank else "reduction"
        label = var_names[v] if v < len(var_names) else f"v{v}"
        if extent < 2:
            out.append(Strategy(label, kind, False, f"extent {extent} cannot be split", ()))
            continue
        if v in desc.unsplittable:
            out.append(Strategy(label, kind, False, "computed as a whole by an opaque function", ()))
            continue
        if ":" in label:  # a full slice handed to an opaque function: not a reduction to split
            out.append(Strategy(label, kind, False, "read whole by an opaque function", ()))
            continue
        half = extent // 2
        reason = ""
        regions = []
        for lo_v, hi_v in ((0, half), (half, extent)):
            lo, hi = [0] * len(desc.extents), list(desc.extents)
            lo[v], hi[v] = lo_v, hi_v
            worker = {}
            for slot, (name, inp) in enumerate(zip(names, desc.inputs)):
                box, exact = problem.iteration_region(op_index, slot, lo, hi)
                for d, e in enumerate(inp.exprs):
                    if e.coefs[v] == 0:
                        continue
                    partners = [u for u, c in enumerate(e.coefs) if c and u != v and desc.extents[u] > 1]
                    if analysis == "tofu" and partners:
                        reason = (f"{name} dimension {d} is indexed by {_expr_text(e, var_names)}: "
                                  "symbolic intervals of two variables cannot be added")
                    elif not exact[d]:
                        reason = f"{name} dimension {d} ({_expr_text(e, var_names)}) is not a box"
                worker[name] = box
            regions.append(worker)
        out.append(Strategy(label, kind, not reason, reason, tuple(regions) if not reason else ()))
    return out


def _out_names(definition: OpDefinition, shapes: dict[str, Sequence[int]]) -> list[str]:
    args = [TensorArg(p, tuple(int(s) for s in shapes[p])) for p in definition.params]
    return list(inspect.signature(definition.fn(*args)).parameters)


def _expr_text(e: IndexExpr, names: Sequence[str]) -> str:
    parts = [(f"{c}*" if c != 1 else "") + (names[u] if e.vdiv(u) == 1 else f"({names[u]} // {e.vdiv(u)})")
             for u, c in enumerate(e.coefs) if c and u < len(names)]
    text = " + ".join(parts) or "0"
    if e.offset:
        text += f" + {e.offset}"
    return text
