"""Describing operators in Python, tensor-as-a-lambda (Tofu's TDL, seed 004 section 3.1).

    @sw.op
    def conv1d(data, filters):
        return lambda b, co, x: sw.Sum(lambda ci, dx: data[b, ci, x + dx] * filters[ci, co, dx])

    sw.strategies_of(conv1d, data=(32, 512, 30), filters=(512, 256, 3))
    g.custom(conv1d, [x, w], name="c1")

A description is traced once with symbolic index variables: tensor elements
record their index expressions, arithmetic builds an expression tree, reducers
(``Sum``, ``Max``, ``Min``, ``Prod``) introduce reduction variables, and
``Opaque`` functions hide computation the language cannot express (a slice
``t[b, :, :]`` passed to one reads the whole of those dimensions).  The result
compiles to the same :class:`~shardwise.ops.desc.OpDesc` the built-in ops use, so
built-in and described ops are one mechanism: the C core derives their
regions, transfers and costs alike.

Extents of index variables are inferred from the tensors they index: a
variable that indexes a dimension on its own ranges over it; in ``x + dx``
with ``dx`` known, ``x`` ranges over ``size - (extent(dx) - 1)`` (a valid
convolution); in ``2*y + dy - 1`` the negative offset is read as padding on
both sides, as convolutions and pooling use it.  Index expressions must be affine (``2*y + dy - 1``), optionally
with one floor division and modulo by constants.
"""
from __future__ import annotations

import inspect
import itertools
from dataclasses import dataclass
from typing import Any, Callable, Sequence

from shardwise.errors import ShardwiseError
from shardwise.ops.desc import DATA, WEIGHT, IndexExpr, InputDesc, OpDesc


class DescriptionError(ShardwiseError, ValueError):
    """An operator description the analysis cannot accept; the message names the expression."""


# ----------------------------------------------------------------------------- index expressions
class Var:
    """A symbolic index variable (an output or a reduction dimension)."""

    _count = itertools.count()

    def __init__(self, name: str, reduction: bool = False) -> None:
        self.name = name
        self.reduction = reduction
        self.id = next(Var._count)

    def __repr__(self) -> str:
        return self.name


class Affine:
    """sum(coef * var) + const, with optional floor division and modulo by constants."""

    def __init__(self, terms: dict[Var, int] | None = None, const: int = 0, div: int = 1, mod: int = 0) -> None:
        self.terms = {v: c for v, c in (terms or {}).items() if c != 0}
        self.const = const
        self.div = div
        self.mod = mod

    @staticmethod
    def of(value: Any, where: str = "index") -> "Affine":
        if isinstance(value, Affine):
            return value
        if isinstance(value, Var):
            return Affine({value: 1})
        if isinstance(value, int) and not isinstance(value, bool):
            return Affine(const=value)
        raise DescriptionError(f"{where}: {value!r} is not an index expression (variables, ints, + - * // %)")

    def _plain(self, op: str) -> None:
        if self.div != 1 or self.mod:
            raise DescriptionError(f"non-affine index expression: {self!r} {op} ...: division and modulo "
                                   "may only come last")

    def __add__(self, other: Any) -> "Affine":
        o = Affine.of(other, f"{self!r} + {other!r}")
        self._plain("+")
        o._plain("+")
        terms = dict(self.terms)
        for v, c in o.terms.items():
            terms[v] = terms.get(v, 0) + c
        return Affine(terms, self.const + o.const)

    __radd__ = __add__

    def __neg__(self) -> "Affine":
        self._plain("-")
        return Affine({v: -c for v, c in self.terms.items()}, -self.const)

    def __sub__(self, other: Any) -> "Affine":
        return self + (-Affine.of(other, f"{self!r} - {other!r}"))

    def __rsub__(self, other: Any) -> "Affine":
        return Affine.of(other) + (-self)

    def __mul__(self, other: Any) -> "Affine":
        if isinstance(other, (Var, Affine)):
            raise DescriptionError(f"non-affine index expression: ({self!r}) * ({other!r})")
        if isinstance(other, bool) or not isinstance(other, int):
            return NotImplemented
        self._plain("*")
        return Affine({v: c * other for v, c in self.terms.items()}, self.const * other)

    __rmul__ = __mul__

    def __floordiv__(self, q: Any) -> "Affine":
        if isinstance(q, bool) or not isinstance(q, int) or q < 1:
            raise DescriptionError(f"non-affine index expression: ({self!r}) // {q!r} (divide by a positive int)")
        self._plain("//")
        return Affine(self.terms, self.const, q, 0)

    def __mod__(self, m: Any) -> "Affine":
        if isinstance(m, bool) or not isinstance(m, int) or m < 1:
            raise DescriptionError(f"non-affine index expression: ({self!r}) % {m!r} (modulo a positive int)")
        if self.mod:
            raise DescriptionError(f"non-affine index expression: ({self!r}) % {m}: one modulo at most")
        return Affine(self.terms, self.const, self.div, m)

    def __repr__(self) -> str:
        parts = [(f"{c}*{v}" if c != 1 else f"{v}") for v, c in self.terms.items()]
        text = " + ".join(parts) if parts else ""
        if self.const:
            text = f"{text} + {self.const}" if text else str(self.const)
        text = text or "0"
        if self.div != 1:
            text = f"({text}) // {self.div}"
        if self.mod:
            text = f"({text}) % {self.mod}"
        return text


for _name in ("__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__neg__", "__floordiv__",
              "__mod__"):
    setattr(Var, _name, (lambda name: lambda self, *a: getattr(Affine({self: 1}), name)(*a))(_name))


# ----------------------------------------------------------------------------- value expressions
class Expr:
    """A value: tensor elements, constants and arithmetic over them."""

    def _bin(self, op: str, other: Any, right: bool = False) -> "Expr":
        o = other if isinstance(other, Expr) else Const(other)
        return Bin(op, o, self) if right else Bin(op, self, o)

    def __add__(self, o): return self._bin("+", o)
    def __radd__(self, o): return self._bin("+", o, True)
    def __sub__(self, o): return self._bin("-", o)
    def __rsub__(self, o): return self._bin("-", o, True)
    def __mul__(self, o): return self._bin("*", o)
    def __rmul__(self, o): return self._bin("*", o, True)
    def __truediv__(self, o): return self._bin("/", o)
    def __rtruediv__(self, o): return self._bin("/", o, True)
    def __neg__(self): return Bin("-", Const(0), self)


@dataclass(eq=False)
class Const(Expr):
    value: Any


@dataclass(eq=False)
class Bin(Expr):
    op: str
    a: Expr
    b: Expr


@dataclass(eq=False)
class Access(Expr):
    tensor: "TensorArg"
    index: tuple[Affine, ...]


@dataclass(eq=False)
class Reduce(Expr):
    kind: str
    vars: tuple[Var, ...]
    body: Expr


@dataclass(eq=False)
class OpaqueCall(Expr):
    name: str
    args: tuple[Expr, ...]
    index: tuple[Affine, ...] = ()

    def __getitem__(self, idx: Any) -> "OpaqueCall":
        idx = idx if isinstance(idx, tuple) else (idx,)
        return OpaqueCall(self.name, self.args, tuple(Affine.of(i, f"{self.name}(...)[...]") for i in idx))


class TensorArg:
    """An operator's input during tracing; ``t[i, j]`` is an element, ``t[b, :, :]`` a slice."""

    def __init__(self, name: str, shape: tuple[int, ...]) -> None:
        self.name = name
        self.shape = shape

    def __getitem__(self, idx: Any) -> Access:
        idx = idx if isinstance(idx, tuple) else (idx,)
        if len(idx) != len(self.shape):
            raise DescriptionError(f"{self.name}[{', '.join(map(repr, idx))}]: {len(idx)} indices for a "
                                   f"rank-{len(self.shape)} tensor {self.shape}")
        out = []
        for d, i in enumerate(idx):
            if isinstance(i, slice):
                if i != slice(None):
                    raise DescriptionError(f"{self.name}: only full slices ':' are supported, got {i}")
                v = Var(f"{self.name}:{d}", reduction=True)  # reads the whole dimension
                v.extent = self.shape[d]
                out.append(Affine({v: 1}))
            else:
                out.append(Affine.of(i, f"{self.name}[...] dimension {d}"))
        return Access(self, tuple(out))


def _reducer(kind: str) -> Callable[..., Reduce]:
    def make(fn: Callable[..., Expr], **extents: int) -> Reduce:
        """``Sum(lambda ci, dx: ...)``; extents no tensor dimension gives (a pooling window)
        are passed by name: ``Max(lambda dy, dx: ..., dy=3, dx=3)``."""
        names = list(inspect.signature(fn).parameters)
        if not names:
            raise DescriptionError(f"{kind}(lambda: ...) reduces over nothing: give it at least one variable")
        unknown = set(extents) - set(names)
        if unknown:
            raise DescriptionError(f"{kind}: extents given for {sorted(unknown)}, which it does not reduce over")
        vars_ = tuple(Var(n, reduction=True) for n in names)
        for v in vars_:
            if v.name in extents:
                e = extents[v.name]
                if isinstance(e, bool) or not isinstance(e, int) or e < 1:
                    raise DescriptionError(f"{kind}: extent of {v.name!r} must be a positive int, got {e!r}")
                v.extent = e
        body = fn(*vars_)
        if not isinstance(body, Expr):
            raise DescriptionError(f"{kind} body must be an expression over tensor elements, got {body!r}")
        return Reduce(kind, vars_, body)
    make.__name__ = kind
    return make


Sum = _reducer("Sum")
Max = _reducer("Max")
Min = _reducer("Min")
Prod = _reducer("Prod")


class Opaque:
    """A function the language cannot express (e.g. Cholesky): ``f = Opaque("cholesky"); f(t[b, :, :])[i, j]``."""

    def __init__(self, name: str = "opaque") -> None:
        self.name = name

    def __call__(self, *args: Expr) -> OpaqueCall:
        return OpaqueCall(self.name, tuple(args))


# ----------------------------------------------------------------------------- operators
class OpDefinition:
    """A described operator: its tracing function and its parameter names."""

    def __init__(self, fn: Callable[..., Callable[..., Expr]]) -> None:
        self.fn = fn
        self.name = fn.__name__
        self.params = list(inspect.signature(fn).parameters)

    def __repr__(self) -> str:
        return f"<described op {self.name}({', '.join(self.params)})>"

    def describe(self, shapes: dict[str, Sequence[int]], weights: Sequence[str] = ()) -> OpDesc:
        """Trace with the given input shapes and compile to an OpDesc."""
        missing = [p for p in self.params if p not in shapes]
        if missing:
            raise DescriptionError(f"{self.name}: no shape for input(s) {missing}")
        args = [TensorArg(p, tuple(int(s) for s in shapes[p])) for p in self.params]
        out_fn = self.fn(*args)
        if not callable(out_fn):
            raise DescriptionError(f"{self.name} must return a lambda over the output indices")
        names = list(inspect.signature(out_fn).parameters)
        out_vars = [Var(n) for n in names]
        body = out_fn(*out_vars)
        if not isinstance(body, Expr):
            raise DescriptionError(f"{self.name}: the output must be an expression over tensor elements, "
                                   f"got {body!r}")
        return _compile(self.name, args, out_vars, body, set(weights))


def op(fn: Callable[..., Callable[..., Expr]]) -> OpDefinition:
    """Decorator: describe an operator with tensor-as-a-lambda."""
    return OpDefinition(fn)


def _walk(e: Expr):
    yield e
    if isinstance(e, Bin):
        yield from _walk(e.a)
        yield from _walk(e.b)
    elif isinstance(e, Reduce):
        yield from _walk(e.body)
    elif isinstance(e, OpaqueCall):
        for a in e.args:
            yield from _walk(a)


def _count_flops(body: Expr) -> tuple[int, int]:
    """(per point of the whole iteration space, per output element): arithmetic inside
    reducers (plus the reducer's own accumulation) runs once per point, outside once per
    output; an op without reducers does all its work per output."""
    inside = outside = 0
    reducers = 0

    def visit(e: Expr, in_reduce: bool) -> None:
        nonlocal inside, outside, reducers
        if isinstance(e, Bin):
            if in_reduce:
                inside += 1
            else:
                outside += 1
            visit(e.a, in_reduce)
            visit(e.b, in_reduce)
        elif isinstance(e, Reduce):
            reducers += 1
            visit(e.body, True)
        elif isinstance(e, OpaqueCall):
            for a in e.args:
                visit(a, in_reduce)

    visit(body, False)
    if reducers == 0:
        return 0, max(outside, 1)
    return inside + reducers, outside


def _infer_extents(accesses: list[Access], variables: list[Var]) -> None:
    known = {v: v.extent for v in variables if hasattr(v, "extent")}
    progress = True
    while progress:
        progress = False
        for acc in accesses:
            for d, ix in enumerate(acc.index):
                if ix.div != 1 or ix.mod:
                    continue
                unknown = [v for v in ix.terms if v not in known]
                if len(unknown) != 1 or ix.terms[unknown[0]] < 1:
                    continue
                v = unknown[0]
                c = ix.terms[v]
                others = sum((known[u] - 1) * abs(k) for u, k in ix.terms.items() if u is not v)
                # the largest index may run into as much padding above the tensor as a
                # negative offset runs below it (symmetric padding, as in convolutions)
                pad = max(0, -ix.const)
                extent = (acc.tensor.shape[d] - 1 + pad - ix.const - others) // c + 1
                if extent < 1:
                    raise DescriptionError(f"{acc.tensor.name}[...] dimension {d}: {ix!r} cannot stay inside "
                                           f"size {acc.tensor.shape[d]}")
                known[v] = extent
                progress = True
    for v in variables:
        if v not in known:
            raise DescriptionError(f"cannot infer the range of index variable {v.name!r}: let it index a "
                                   "tensor dimension on its own (e.g. t[..., v, ...])")
        v.extent = known[v]


def _merge_accesses(name: str, found: list[Access], nvars: int, order: dict[Var, int],
                    spread_vars: list[Var]) -> list[tuple]:
    """One index map per input: accesses that differ only in constant offsets become one
    map over an extra variable that spans the offsets (the region is their hull)."""
    first = found[0]
    exprs = []
    for d, ix in enumerate(first.index):
        consts = []
        for acc in found:
            other = acc.index[d]
            if (other.terms != ix.terms or other.div != ix.div or other.mod != ix.mod):
                raise DescriptionError(f"{name} is read with different index maps in dimension {d}: "
                                       f"{ix!r} and {other!r}")
            consts.append(other.const)
        coefs = [0] * nvars
        for v, c in ix.terms.items():
            coefs[order[v]] = c
        lo = min(consts)
        if max(consts) != lo:
            s = Var(f"{name}.spread{d}", reduction=True)
            s.extent = max(consts) - lo + 1
            spread_vars.append(s)
            exprs.append((coefs, lo, ix.div, ix.mod, s))
        else:
            exprs.append((coefs, lo, ix.div, ix.mod, None))
    return exprs


def _additive_vars(body: Expr) -> list[Var]:
    """Variables of the Sums that are terms of the body's top-level sum (``Sum(...) + b[co]``):
    splitting one gives partial outputs that add up (partition-n-reduce).  A Sum under a
    product, another reducer or an opaque function is not additive in the output."""
    if isinstance(body, Reduce):
        return list(body.vars) if body.kind == "Sum" else []
    if isinstance(body, Bin) and body.op == "+":
        return _additive_vars(body.a) + _additive_vars(body.b)
    return []


def _compile(name: str, args: list[TensorArg], out_vars: list[Var], body: Expr, weights: set[str]) -> OpDesc:
    nodes = list(_walk(body))
    accesses = [n for n in nodes if isinstance(n, Access)]
    red_vars: list[Var] = []
    for n in nodes:
        if isinstance(n, Reduce):
            red_vars.extend(n.vars)
    for acc in accesses:
        for ix in acc.index:
            for v in ix.terms:
                if v.reduction and v not in red_vars:
                    red_vars.append(v)  # slice variables
                elif not v.reduction and v not in out_vars:
                    raise DescriptionError(f"{acc.tensor.name}[...] uses index variable {v.name!r}, which "
                                           "this operator does not define")
    atomic: list[Var] = []
    for n in nodes:
        if isinstance(n, OpaqueCall):
            # the result's dimensions are those of the first argument's full slices, in order
            sliced = [v for a in n.args if isinstance(a, Access) for ix in a.index for v in ix.terms
                      if v.reduction and hasattr(v, "extent")][: len(n.index)]
            for k, ix in enumerate(n.index):
                for v in ix.terms:
                    if v not in out_vars and v not in red_vars:
                        raise DescriptionError(f"{n.name}(...)[...] uses undefined variable {v.name!r}")
                if len(ix.terms) == 1 and k < len(sliced) and not hasattr(next(iter(ix.terms)), "extent"):
                    v = next(iter(ix.terms))
                    v.extent = sliced[k].extent
                atomic.extend(v for v in ix.terms if not v.reduction)
    _infer_extents(accesses, out_vars + red_vars)
    order = {v: k for k, v in enumerate(out_vars + red_vars)}
    nvars = len(order)
    spread_vars: list[Var] = []
    per_input = []
    for arg in args:
        found = [a for a in accesses if a.tensor is arg]
        if not found:
            raise DescriptionError(f"{name}: input {arg.name!r} is never read")
        per_input.append((arg, _merge_accesses(arg.name, found, nvars, order, spread_vars)))
    inputs = []
    for arg, rows in per_input:
        exprs = []
        for coefs, lo, div, mod, spread in rows:
            full = list(coefs[:nvars]) + [0] * len(spread_vars)
            if spread is not None:
                full[nvars + spread_vars.index(spread)] = 1
            exprs.append(IndexExpr(tuple(full), lo, div, mod))
        inputs.append(InputDesc(WEIGHT if arg.name in weights else DATA, arg.shape, tuple(exprs)))
    extents = tuple(v.extent for v in out_vars + red_vars + spread_vars)
    per_point, per_output = _count_flops(body)
    additive = tuple(sorted(order[v] for v in _additive_vars(body)))
    desc = OpDesc(extents=extents, out_rank=len(out_vars), inputs=tuple(inputs),
                  flops_per_point=float(per_point), flops_per_output=float(per_output),
                  reductions=tuple(v.name for v in red_vars + spread_vars),
                  unsplittable=tuple(sorted({order[v] for v in atomic})), additive=additive)
    desc.validate()
    return desc
