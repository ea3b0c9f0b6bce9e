"""The pass over a ``torch.export`` program (:mod:`shardwise.importers.torch.export`): ATen ops
to graph builder calls.

Values of the pass:

* a graph :class:`Tensor`;
* :class:`Param`: a trainable parameter of the model, not yet an op: the op reading it decides
  whether it owns it (a linear's weight) or reads it as data (a ``parameter`` op);
* :class:`Const`: a tensor computed from constants only (``arange`` position ids, masks), never
  an op; only patterns below give one a meaning;
* :class:`Flat`: a tensor (N, T, D) seen as (N T, D): ``view(x, [-1, D])`` before an ``addmm``
  (Hugging Face's ``Conv1D``, GPT-2's linears), undone by the ``view`` after it;
* a :class:`Pattern`: part of a composition that becomes one op when complete (an RMS norm
  spelled ``x * rsqrt(mean(x ** 2) + eps) * w``; a rotary embedding spelled
  ``x * cos + rotate_half(x) * sin``), refused if read any other way;
* plain Python values (sizes, lists of tensors from ``split``).
"""
from __future__ import annotations

import math
import operator
import os
from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import numpy as np

from shardwise.errors import ModelImportError, ShardwiseError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import unique_name
from shardwise.importers.torch.export_gelu import tanh_gelus

WRAPPER_PREFIX = "model."   # export.py's wrapper module holds the model under this attribute


def strip_prefix(name: str) -> str:
    return name[len(WRAPPER_PREFIX):] if name.startswith(WRAPPER_PREFIX) else name


@dataclass(eq=False)
class Param:
    name: str    # state_dict key
    value: Any   # torch tensor


@dataclass(eq=False)
class Const:
    value: Any   # torch tensor


@dataclass(eq=False)
class Flat:
    x: Tensor    # (lead.., D), seen as (prod(lead), D)


class Pattern:
    """Part of a composition recognized as one op (see the converters below); ``what``: the
    composition, for messages when the part is read in any other way."""

    what = ""   # what the part is, for messages


@dataclass(eq=False)
class RmsPart(Pattern):
    """Steps of ``x * rsqrt(mean(x ** 2, -1, keepdim) + eps)``: ``stage`` "square", "mean",
    "mean+eps", "rsqrt" or "normalized" (then times the weight: ``rms_norm``)."""
    x: Tensor
    stage: str
    eps: float = 0.0

    @property
    def what(self) -> str:
        return (f"the {self.stage} step of an RMS norm (x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps) * weight, "
                f"the only composition that may read it)")


@dataclass(eq=False)
class RotaryPart(Pattern):
    """Steps of ``x * cos + rotate_half(x) * sin``: ``stage`` "neg" (of x's upper half, ``half``
    the slice op), "rotated" (``rotate_half(x)``), "cos" or "sin" (times the constant ``table``)."""
    x: Tensor
    stage: str
    table: Any = None

    @property
    def what(self) -> str:
        step = {"cos": "a product by a constant tensor", "sin": "a product by a constant tensor",
                "neg": "a negation", "rotated": "a concatenation with a negated half"}[self.stage]
        return (f"{step}, accepted only as part of a rotary position embedding (x * cos + rotate_half(x) * sin "
                f"with constant tables)")


def _owner_name(param_name: str) -> str:
    return param_name[:-len(".weight")] if param_name.endswith(".weight") else param_name


class ExportImporter:
    """One pass over an ExportedProgram's graph, building a shardwise graph."""

    def __init__(self, torch: Any, model: Any, program: Any, name: str, aliases: dict[str, list[str]],
                 torch_dir: str) -> None:
        self.torch, self.model, self.program = torch, model, program
        self.aliases, self.torch_dir = aliases, torch_dir
        self.g = Graph(name)
        self.env: dict[Any, Any] = {}
        self.params: dict[str, dict[str, np.ndarray]] = {}
        self.owners: dict[str, str] = {}            # parameter name -> what owns it (for the tied-weights message)
        self.parameter_ops: dict[str, Tensor] = {}
        self.reserved = {_owner_name(strip_prefix(t)) for t in program.state_dict}
        self.shared: set[str] = set()   # parameters read by more than one op (tied weights): parameter ops
        # GELU's tanh approximation written as its formula (NewGELUActivation): its last node -> x
        self.tanh_gelus, self.gelu_inner = tanh_gelus(program.graph, aten_name)

    # ----- the pass
    def run(self, shapes: list[tuple[tuple[int, ...], str]], names: list[str]) -> Graph:
        specs = self.program.graph_signature.input_specs
        user = iter(zip(shapes, names))
        by_arg = {}
        placeholders = {n.name: n for n in self.program.graph.nodes if n.op == "placeholder"}
        for spec in specs:
            kind = spec.kind.name
            if kind == "PARAMETER":
                by_arg[spec.arg.name] = Param(strip_prefix(spec.target), self.program.state_dict[spec.target])
                if len(_reading_ops(placeholders[spec.arg.name])) > 1:
                    self.shared.add(by_arg[spec.arg.name].name)
            elif kind in ("BUFFER", "CONSTANT_TENSOR"):
                store = self.program.state_dict if spec.target in self.program.state_dict else self.program.constants
                by_arg[spec.arg.name] = Const(store[spec.target])
            elif kind == "USER_INPUT":
                (shape, dtype), arg_name = next(user)
                by_arg[spec.arg.name] = self.g.input(unique_name(self.g, self.reserved, arg_name, True),
                                                     shape, dtype=dtype)
            else:
                raise ModelImportError(f"the exported program's input {spec.arg.name!r} of kind {kind} is not "
                                       f"supported")
        for node in self.program.graph.nodes:
            if node.op == "placeholder":
                self.env[node] = by_arg[node.name]
            elif node.op == "call_function":
                self._call(node)
            elif node.op == "output":
                self._output(node)
            else:
                raise ModelImportError(f"node {node.name!r}: {node.op} nodes are not supported")
        return self.g

    def _call(self, node: Any) -> None:
        if node in self.gelu_inner:   # a step of a tanh GELU's formula: built at its last node
            return
        if node in self.tanh_gelus:
            x = self.env[self.tanh_gelus[node]]
            call = ExportCall(self, node, "aten.mul", node.args, node.kwargs)
            self.env[node] = self.g.gelu(call.tensor(x, "the input"), approximate="tanh", name=call.name("gelu"))
            return
        fx = self.torch.fx
        args = fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, self.env.__getitem__)
        if node.target is operator.getitem:
            self.env[node] = args[0][args[1]]
            return
        op = aten_name(node.target)
        if not _reads_graph_values((args, kwargs), fx):
            self.env[node] = self._evaluate(node, op, args, kwargs)   # arange, masks: computed now
            return
        convert = CONVERTERS.get(op)
        call = ExportCall(self, node, op, args, kwargs)
        if convert is None:
            raise call.error(f"{op} is not supported (the supported ops are listed in docs/importing.md)")
        try:
            self.env[node] = convert(call)
        except ModelImportError:
            raise
        except ShardwiseError as exc:   # a builder's ShapeError/GraphError: say where it came from
            raise type(exc)(f"{call.where}: {exc}") from None

    def _evaluate(self, node: Any, op: str, args: Any, kwargs: Any) -> Any:
        """A call of constants only, run by torch: its result is a constant."""
        fx = self.torch.fx
        args, kwargs = fx.node.map_aggregate((args, kwargs), lambda v: v.value if isinstance(v, Const) else v)
        try:
            with self.torch.no_grad():
                value = node.target(*args, **kwargs)
        except Exception as exc:
            raise ExportCall(self, node, op, args, kwargs).error(
                f"{op} on constants failed ({type(exc).__name__}: {exc})") from None
        return fx.node.map_aggregate(value, lambda v: Const(v) if isinstance(v, self.torch.Tensor) else v)

    def _output(self, node: Any) -> None:
        outs = node.args[0]
        outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
        kinds = [spec.kind.name for spec in self.program.graph_signature.output_specs]
        # the first of the model's own outputs (buffer updates, such as batch norms' statistics, come first)
        first = kinds.index("USER_OUTPUT") if "USER_OUTPUT" in kinds else 0
        value = self.env[outs[first]] if isinstance(outs[first], self.torch.fx.Node) else outs[first]
        where = f"{type(self.model).__name__}.forward"
        if not isinstance(value, Tensor):
            what = value.what if isinstance(value, Pattern) else "a constant" if isinstance(value, Const) else \
                f"the parameter {value.name!r}" if isinstance(value, Param) else type(value).__name__
            raise ModelImportError(f"{where} returns {what}; from_torch takes a model that returns one (N, classes) "
                                   f"or (N, T, classes) tensor of logits")
        if len(value.shape) not in (2, 3):
            raise ModelImportError(f"{where} returns shape {value.shape}; from_torch takes a model that returns "
                                   f"(N, classes) or (N, T, classes) logits")
        if self.g.ops[value.op].kind != "softmax":
            self.g.softmax(value, name=unique_name(self.g, self.reserved, "softmax"))

    # ----- weights
    def weights(self) -> dict[str, np.ndarray]:
        return {f"{op}.{k}": v for op, ws in self.params.items() for k, v in ws.items()}

    def claim(self, call: "ExportCall", param: Param, what: str) -> None:
        """``param`` is owned by the op ``what`` now; a parameter read twice is a tied weight."""
        if param.name in self.owners:
            others = [n for n in self.aliases.get(param.name, []) if n != param.name]
            also = f" (also named {', '.join(map(repr, others))}: tied weights)" if others else ""
            raise call.error(f"the parameter {param.name!r}{also} is read by {self.owners[param.name]} and by "
                             f"{what} (node {call.node.name!r}); an embedding's table and a linear layer's weight "
                             f"(aten.embedding, aten.linear) may be shared, but this op owns its weights, so shared "
                             f"weights are not supported here (untie them)")
        self.owners[param.name] = f"{what} (node {call.node.name!r})"

    def record(self, op_name: str, weights: dict[str, Any]) -> None:
        self.params[op_name] = {k: np.array(v.detach().cpu().double().numpy(), dtype=np.float32)
                                if not isinstance(v, np.ndarray) else np.asarray(v, dtype=np.float32)
                                for k, v in weights.items()}

    def parameter_op(self, call: "ExportCall", param: Param) -> Tensor:
        """``param`` read as data: one ``parameter`` op, shared by its readers.  A parameter held
        under several names (tied weights) is named by the first in ``named_parameters`` order
        (a Hugging Face model's input embedding); the others become the graph's weight aliases."""
        if param.name not in self.parameter_ops:
            names = self.aliases.get(param.name, [param.name])
            name = unique_name(self.g, self.reserved, _owner_name(names[0]), owner=True)
            if f"{name}.weight" != names[0]:   # a bias read as data: "<m>.bias" is the op "<m>.bias"'s weight
                self.g.weight_names[f"{name}.weight"] = names[0]
            for alias in names[1:]:
                self.g.weight_aliases[alias] = names[0]
            self.claim(call, param, f"the parameter op {name!r}")
            self.record(name, {"weight": param.value})
            self.parameter_ops[param.name] = self.g.parameter(tuple(param.value.shape), name=name)
        return self.parameter_ops[param.name]


def _reading_ops(node: Any) -> list[Any]:
    """The ops that read ``node``'s value, through views that only pass it on (``alias``)."""
    out = []
    for user in node.users:
        if user.op == "call_function" and aten_name(user.target) in ("aten.alias", "aten.detach"):
            out.extend(_reading_ops(user))
        elif not (user.op == "call_function" and aten_name(user.target).startswith("aten._assert")):
            out.append(user)
    return out


def aten_name(target: Any) -> str:
    """``aten.view``, ``aten.add.Tensor`` -> ``aten.add``: the op, whatever the overload."""
    schema = getattr(target, "_schema", None)
    if schema is not None:
        return schema.name.replace("::", ".")
    return f"{getattr(target, '__module__', '?')}.{getattr(target, '__name__', repr(target))}"


def _reads_graph_values(value: Any, fx: Any) -> bool:
    found: list[bool] = []
    fx.node.map_aggregate(value, lambda v: found.append(isinstance(v, (Tensor, Param, Flat, Pattern))))
    return any(found)


class ExportCall:
    """One ATen call being converted: its arguments (values of the pass) and where it is."""

    def __init__(self, imp: ExportImporter, node: Any, op: str, args: Any, kwargs: Any) -> None:
        self.imp, self.node, self.op, self.args, self.kwargs = imp, node, op, args, kwargs
        self.g = imp.g

    def arg(self, k: int, name: str, default: Any = None) -> Any:
        if k < len(self.args):
            return self.args[k]
        return self.kwargs.get(name, default)

    @property
    def module_path(self) -> str:
        stack = self.node.meta.get("nn_module_stack") or {}
        path = list(stack.values())[-1][0] if stack else ""
        return "" if path == "model" else strip_prefix(path)

    @property
    def where(self) -> str:
        path = self.module_path
        place = f"module {path!r}" if path else "the model's forward"
        line = self._source_line()
        return f"node {self.node.name!r} ({self.op}, {place}{', ' + line if line else ''})"

    def _source_line(self) -> str:
        lines = (self.node.meta.get("stack_trace") or "").splitlines()
        for k in range(len(lines) - 1, -1, -1):
            text = lines[k].strip()
            if not text.startswith('File "'):
                continue
            path = text[6:text.index('"', 6)]
            if os.path.abspath(path).startswith(self.imp.torch_dir + os.sep):
                continue
            lineno = text.split(", line ")[1].split(",")[0] if ", line " in text else "?"
            code = lines[k + 1].strip() if k + 1 < len(lines) else ""
            return f"{os.path.basename(path)}:{lineno} `{code}`" if code else f"{os.path.basename(path)}:{lineno}"
        return ""

    def error(self, message: str) -> ModelImportError:
        cls = self.module_class
        if "gelu" in cls.lower():
            message += (f" ({cls}: GELU's tanh approximation is imported from F.gelu(x, approximate='tanh') or "
                        f"from exactly 0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3))), as "
                        f"NewGELUActivation writes it; this one is written otherwise: a Hugging Face config with "
                        f"activation_function='gelu_new', 'gelu_pytorch_tanh' or 'gelu' imports)")
        return ModelImportError(f"{self.where}: {message}")

    @property
    def module_class(self) -> str:
        stack = self.node.meta.get("nn_module_stack") or {}
        cls = list(stack.values())[-1][1] if stack else ""
        return (cls if isinstance(cls, str) else getattr(cls, "__name__", str(cls))).rpartition(".")[2]

    def name(self, kind: str) -> str:
        path = self.module_path
        return unique_name(self.g, self.imp.reserved, f"{path}.{kind}" if path else kind)

    def owned_name(self, param: Param) -> str:
        return unique_name(self.g, self.imp.reserved, _owner_name(param.name), owner=True)

    def tensor(self, v: Any, what: str) -> Tensor:
        """``v`` as a graph tensor: a parameter read as data becomes a ``parameter`` op."""
        if isinstance(v, Tensor):
            return v
        if isinstance(v, Param):
            return self.imp.parameter_op(self, v)
        if isinstance(v, Pattern):
            raise self.error(f"{what} is {v.what}, not read that way here")
        if isinstance(v, Flat):
            raise self.error(f"{what} is a (N T, D) view of an (N, T, D) tensor, read by {self.op}; only a "
                             f"linear layer (addmm, mm) may read it")
        if isinstance(v, Const):
            raise self.error(f"{what} is a constant tensor of shape {tuple(v.value.shape)} (computed from "
                             f"constants only: position ids, masks, tables); constants are not supported in the "
                             f"computation")
        raise self.error(f"{what} is {v!r}, not a tensor; a constant number in the computation is not supported")


# ----------------------------------------------------------------------------- converters
CONVERTERS: dict[str, Callable[[ExportCall], Any]] = {}


def converts(*ops: str) -> Callable:
    def register(fn: Callable) -> Callable:
        for op in ops:
            CONVERTERS[op] = fn
        return fn
    return register


def _sizes(c: ExportCall, shape: Any, numel: int) -> tuple[int, ...]:
    dims = [int(s) for s in shape]
    if dims.count(-1) > 1:
        raise c.error(f"the shape {dims} has more than one -1")
    if -1 in dims:
        rest = math.prod(d for d in dims if d != -1)
        dims[dims.index(-1)] = numel // rest if rest else 0
    return tuple(dims)


@converts("aten.view", "aten._unsafe_view", "aten.reshape")
def _view(c: ExportCall) -> Any:
    x = c.arg(0, "self")
    if isinstance(x, Flat):   # back from (N T, O) to (N, T, O)
        shape = _sizes(c, c.arg(1, "size"), math.prod(x.x.shape))
        if shape == x.x.shape:
            return x.x
        raise c.error(f"a view of the (N T, D) rows of {x.x.shape} as {shape} is not supported")
    x = c.tensor(x, "the input")
    shape = _sizes(c, c.arg(1, "size"), math.prod(x.shape))
    if shape == x.shape:
        return x
    if len(x.shape) >= 3 and shape == (math.prod(x.shape[:-1]), x.shape[-1]):
        return Flat(x)   # the rows of a linear layer (Conv1D's addmm)
    if shape[0] != x.shape[0]:
        raise c.error(f"a reshape of {x.shape} to {shape} changes the batch dimension, which is not supported")
    return c.g.reshape(x, shape, name=c.name("reshape"))


def _linear_weight(c: ExportCall, w: Any, what: str) -> Param:
    if not isinstance(w, Param):
        raise c.error(f"{what} must be a parameter of the model (a linear layer's weight), got "
                      f"{type(w).__name__}")
    return w


def _rows(c: ExportCall, x: Any) -> tuple[Tensor, bool]:
    """The input of a linear layer spelled on rows (addmm, mm): (N, .., D) and whether it was a Flat."""
    if isinstance(x, Flat):
        return x.x, True
    x = c.tensor(x, "the input")
    if len(x.shape) != 2:
        raise c.error(f"{c.op} of a {len(x.shape)}-d input is not supported")
    return x, False


@converts("aten.addmm", "aten.mm")
def _addmm(c: ExportCall) -> Any:
    """``bias + x @ W`` with W (in, out), as Hugging Face's Conv1D (GPT-2) computes its linears:
    a linear op whose imported weight is W transposed to (out, in), under W's name."""
    if c.op == "aten.addmm":
        bias, x, w = c.arg(0, "self"), c.arg(1, "mat1"), c.arg(2, "mat2")
        if c.kwargs.get("beta", 1) != 1 or c.kwargs.get("alpha", 1) != 1:
            raise c.error("addmm with alpha or beta other than 1 is not supported")
    else:
        bias, x, w = None, c.arg(0, "self"), c.arg(1, "mat2")
    w = _linear_weight(c, w, "the second operand of the product")
    x, flat = _rows(c, x)
    if len(w.value.shape) != 2 or w.value.shape[0] != x.shape[-1]:
        raise c.error(f"a product of {x.shape} by a weight of shape {tuple(w.value.shape)} is not supported")
    if bias is not None and not (isinstance(bias, Param) and tuple(bias.value.shape) == (w.value.shape[1],)):
        raise c.error("the added term must be a bias parameter of the model, one per output feature")
    c.imp.claim(c, w, f"the linear layer {_owner_name(w.name)!r}")
    name = c.owned_name(w)
    if bias is not None:
        c.imp.claim(c, bias, f"the linear layer {name!r}")
    y = c.g.linear(x, int(w.value.shape[1]), bias=bias is not None, name=name)
    weights = {"weight": w.value.detach().t()}
    if bias is not None:
        weights["bias"] = bias.value
    c.imp.record(name, weights)
    return Flat(y) if flat else y


@converts("aten.linear")
def _linear(c: ExportCall) -> Tensor:
    x, w, bias = c.tensor(c.arg(0, "input"), "the input"), c.arg(1, "weight"), c.arg(2, "bias")
    w = _linear_weight(c, w, "the weight")
    if bias is not None and not isinstance(bias, Param):
        raise c.error("the bias must be a parameter of the model")
    if w.name in c.imp.shared:
        return _shared_linear(c, x, w, bias)
    c.imp.claim(c, w, f"the linear layer {_owner_name(w.name)!r}")
    name = c.owned_name(w)
    if bias is not None:
        c.imp.claim(c, bias, f"the linear layer {name!r}")
    y = c.g.linear(x, int(w.value.shape[0]), bias=bias is not None, name=name)
    c.imp.record(name, {"weight": w.value, **({"bias": bias.value} if bias is not None else {})})
    return y


def _shared_linear(c: ExportCall, x: Tensor, w: Param, bias: Param | None) -> Tensor:
    """``x @ W^T (+ b)`` with W (out, in) a parameter other ops read too (a language model's head
    tied to its input embedding): W's parameter op broadcast over the samples, (N, out, in), and a
    ``matmul`` with ``transpose_b``.  The broadcast holds N copies of W's rows of each worker's
    block (fewer bytes than the (N, T, out) logits whenever T > in)."""
    table = c.imp.parameter_op(c, w)
    if len(x.shape) == 2:
        y = c.g.matmul(x, table, transpose_b=True, name=c.name("linear"))
    else:
        rows = c.g.expand(table, x.shape[:-2] + table.shape, name=c.name("weight_rows"))
        y = c.g.matmul(x, rows, transpose_b=True, name=c.name("linear"))
    if bias is not None:
        y = c.g.add(y, c.imp.parameter_op(c, bias), name=c.name("bias"))
    return y


@converts("aten.embedding")
def _embedding(c: ExportCall) -> Tensor:
    weight, ids = c.arg(0, "weight"), c.arg(1, "indices")
    if not isinstance(weight, Param):
        raise c.error("the embedding table must be a parameter of the model")
    if c.arg(2, "padding_idx", -1) != -1:
        raise c.error(f"padding_idx={c.arg(2, 'padding_idx')} is not supported (PyTorch gives that row no gradient; "
                      f"shardwise's embedding has no padding row): build the model without one (a Hugging Face "
                      f"config with pad_token_id=None)")
    if c.arg(3, "scale_grad_by_freq", False) or c.arg(4, "sparse", False):
        raise c.error("scale_grad_by_freq and sparse are not supported")
    vocab, dim = (int(s) for s in weight.value.shape)
    if isinstance(ids, Const):
        return _constant_rows(c, weight, ids.value)
    if not isinstance(ids, Tensor):
        raise c.error("the indices must be token ids, an integer input of the model")
    if weight.name in c.imp.shared:   # tied: the table is a parameter op's, read by this op and others
        return c.g.embedding(ids, table=c.imp.parameter_op(c, weight), name=c.name("embedding"))
    c.imp.claim(c, weight, f"the embedding {_owner_name(weight.name)!r}")
    name = c.owned_name(weight)
    out = c.g.embedding(ids, vocab, dim, name=name)
    c.imp.record(name, {"weight": weight.value})
    return out


def _constant_rows(c: ExportCall, weight: Param, ids: Any) -> Tensor:
    """A table read at constant indices, the same for every sample: rows ``0..T-1`` at every
    position (learned positions, ``wpe(arange(T))``) are the table's first T rows (T, D); one
    row everywhere (BERT's token types, all 0) is that row (1, D).  Either is a slice of a
    ``parameter`` op, added to (N, T, D) by broadcasting."""
    table = c.imp.parameter_op(c, weight)
    rows = ids.reshape(-1, ids.shape[-1]) if ids.dim() else ids.reshape(1, 1)
    first = rows[0]
    if bool((rows == first).all()):
        t = int(first.numel())
        if bool((first == c.imp.torch.arange(t)).all()):
            return c.g.slice(table, 0, 0, t, name=c.name("positions")) if t < table.shape[0] else table
        if bool((first == first[0]).all()):
            k = int(first[0])
            return c.g.slice(table, 0, k, k + 1, name=c.name("row"))
    raise c.error(f"an embedding of constant indices {tuple(ids.shape)} other than 0..T-1 at every position "
                  f"or one index everywhere is not supported")


@converts("aten.layer_norm")
def _layer_norm(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "input"), "the input")
    shape, w, b, eps = c.arg(1, "normalized_shape"), c.arg(2, "weight"), c.arg(3, "bias"), c.arg(4, "eps", 1e-5)
    if list(shape) != [x.shape[-1]]:
        raise c.error(f"a layer norm over {list(shape)} of {x.shape} is not supported (the last dimension only)")
    if not isinstance(w, Param) or not isinstance(b, Param):
        raise c.error("a layer norm needs a weight and a bias, parameters of the model")
    c.imp.claim(c, w, f"the layer norm {_owner_name(w.name)!r}")
    name = c.owned_name(w)
    c.imp.claim(c, b, f"the layer norm {name!r}")
    out = c.g.layer_norm(x, eps=float(eps), name=name)
    c.imp.record(name, {"weight": w.value, "bias": b.value})
    return out


def _keeps_batch(c: ExportCall, x: Tensor, moved: bool, what: str) -> None:
    """Refuse ``what`` where it moves, slices or joins the batch (dimension 0 of a tensor that has
    samples: not a parameter op's), as the fx importer does: every worker's samples are rows of it."""
    if moved and c.g.ops[x.op].kind != "parameter":
        raise c.error(f"{what} of the batch dimension (0) of {x.shape} is not supported")


@converts("aten.split", "aten.split_with_sizes")
def _split(c: ExportCall) -> list:
    x = c.tensor(c.arg(0, "self"), "the input")
    _keeps_batch(c, x, c.arg(2, "dim", 0) % len(x.shape) == 0, "a split")
    return c.g.split(x, c.arg(1, "split_size"), dim=c.arg(2, "dim", 0), name=c.name("split"))


@converts("aten.transpose")
def _transpose(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "self"), "the input")
    r = len(x.shape)
    a, b = c.arg(1, "dim0") % r, c.arg(2, "dim1") % r
    dims = list(range(r))
    dims[a], dims[b] = dims[b], dims[a]
    _keeps_batch(c, x, dims[0] != 0, "a transpose")
    return c.g.permute(x, dims, name=c.name("transpose"))


@converts("aten.permute")
def _permute(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "self"), "the input")
    dims = [d % len(x.shape) for d in c.arg(1, "dims")]
    _keeps_batch(c, x, dims[0] != 0, "a permutation")
    return c.g.permute(x, dims, name=c.name("permute"))


def _mask_is(torch: Any, mask: Any, causal: bool) -> bool:
    """Whether ``mask`` (bool: True = attend; float: 0 = attend, very negative = not) lets every
    query see every key (``causal=False``) or exactly the keys up to its own position."""
    t, s = mask.shape[-2], mask.shape[-1]
    want = torch.ones(t, s, dtype=torch.bool)
    if causal:
        want = torch.tril(want, diagonal=s - t)
    if mask.dtype == torch.bool:
        allowed = mask
    else:
        allowed = mask == 0
        if not bool(((mask == 0) | (mask <= -1e9)).all()):
            return False
    return bool((allowed == want).all())


@converts("aten.scaled_dot_product_attention")
def _sdpa(c: ExportCall) -> Tensor:
    """g.attention's composition; a constant mask must be no mask or the causal one."""
    torch = c.imp.torch
    q, k, v = (c.tensor(c.arg(i, n), n) for i, n in enumerate(("query", "key", "value")))
    mask, p = c.arg(3, "attn_mask"), c.arg(4, "dropout_p", 0.0)
    causal, scale = bool(c.arg(5, "is_causal", False)), c.arg(6, "scale")
    if p:
        raise c.error(f"attention dropout (dropout_p={p}) is not supported")
    if c.kwargs.get("enable_gqa", False) and k.shape[1] != q.shape[1]:
        raise c.error("grouped-query attention inside scaled_dot_product_attention (enable_gqa) is not supported")
    if mask is not None:
        if not isinstance(mask, Const):
            raise c.error("an attention mask computed from the inputs or weights is not supported")
        if _mask_is(torch, mask.value, causal=False) and not causal:
            pass
        elif _mask_is(torch, mask.value, causal=True):
            causal = True
        else:
            raise c.error("an attention mask other than none or the causal mask is not supported (a padding "
                          "mask: pass no attention_mask, or one of all ones)")
    return c.g.attention(q, k, v, causal=causal, scale=None if scale is None else float(scale),
                         name=c.name("attention"))


@converts("aten.dropout")
def _dropout(c: ExportCall) -> Tensor:
    x, p, train = c.tensor(c.arg(0, "input"), "the input"), float(c.arg(1, "p")), bool(c.arg(2, "train"))
    if not train or p == 0.0:
        return x
    return c.g.dropout(x, p, name=c.name("dropout"))


def _binary(c: ExportCall, build: Callable[..., Tensor], kind: str) -> Tensor:
    a, b = c.arg(0, "self"), c.arg(1, "other")
    if c.kwargs.get("alpha", 1) != 1:
        raise c.error("alpha other than 1 is not supported")
    return build(c.tensor(a, "the first operand"), c.tensor(b, "the second operand"), name=c.name(kind))


@converts("aten.add")
def _add(c: ExportCall) -> Any:
    a, b = c.arg(0, "self"), c.arg(1, "other")
    if isinstance(a, RmsPart) and a.stage == "mean" and isinstance(b, (int, float)) and c.kwargs.get("alpha", 1) == 1:
        return RmsPart(a.x, "mean+eps", float(b))
    if isinstance(a, RotaryPart) and isinstance(b, RotaryPart):
        return _rotary(c, a, b)
    return _binary(c, c.g.add, "add")


@converts("aten.mul")
def _mul(c: ExportCall) -> Any:
    a, b = c.arg(0, "self"), c.arg(1, "other")
    for x, y in ((a, b), (b, a)):
        if isinstance(x, Tensor) and isinstance(y, RmsPart) and y.stage == "rsqrt" and y.x is x:
            return RmsPart(x, "normalized", y.eps)
        if isinstance(x, Param) and isinstance(y, RmsPart) and y.stage == "normalized":
            return _rms_norm(c, y, x)
        if isinstance(y, Const) and isinstance(x, Tensor):
            return RotaryPart(x, "cos", y.value)
        if isinstance(y, Const) and isinstance(x, RotaryPart) and x.stage == "rotated":
            return RotaryPart(x.x, "sin", y.value)
    return _binary(c, c.g.mul, "mul")


# ----- RMS norm, as Llama's LlamaRMSNorm spells it
@converts("aten.pow")
def _pow(c: ExportCall) -> RmsPart:
    x = c.tensor(c.arg(0, "self"), "the base")
    if c.arg(1, "exponent") != 2:
        raise c.error(f"x ** {c.arg(1, 'exponent')} is not supported (only the square of an RMS norm)")
    return RmsPart(x, "square")


@converts("aten.mean")
def _mean(c: ExportCall) -> RmsPart:
    x, dims, keep = c.arg(0, "self"), c.arg(1, "dim"), c.arg(2, "keepdim", False)
    if not (isinstance(x, RmsPart) and x.stage == "square" and dims is not None and list(dims) in ([-1],
            [len(x.x.shape) - 1]) and keep):
        raise c.error("a mean is supported only as the mean square over the last dimension of an RMS norm")
    return RmsPart(x.x, "mean")


@converts("aten.rsqrt")
def _rsqrt(c: ExportCall) -> RmsPart:
    x = c.arg(0, "self")
    if not (isinstance(x, RmsPart) and x.stage == "mean+eps"):
        raise c.error("rsqrt is supported only as 1 / sqrt(mean(x ** 2) + eps) of an RMS norm")
    return RmsPart(x.x, "rsqrt", x.eps)


def _rms_norm(c: ExportCall, part: RmsPart, w: Param) -> Tensor:
    if tuple(w.value.shape) != (part.x.shape[-1],):
        raise c.error(f"an RMS norm of {part.x.shape} with a weight of shape {tuple(w.value.shape)} is not supported")
    if not part.eps > 0:
        raise c.error(f"an RMS norm with eps {part.eps} is not supported (a positive eps)")
    c.imp.claim(c, w, f"the RMS norm {_owner_name(w.name)!r}")
    name = c.owned_name(w)
    out = c.g.rms_norm(part.x, eps=part.eps, name=name)
    c.imp.record(name, {"weight": w.value})
    return out


# ----- rotary position embedding, as Llama's apply_rotary_pos_emb spells it
@converts("aten.neg")
def _neg(c: ExportCall) -> RotaryPart:
    x = c.tensor(c.arg(0, "self"), "the input")
    src = c.g.ops[x.op]
    if src.kind == "slice" and src.attrs["dim"] == len(x.shape) - 1:
        return RotaryPart(x, "neg")
    raise c.error("a negation is supported only of the upper half of a rotary embedding's input (rotate_half)")


def _half_of(c: ExportCall, t: Tensor, upper: bool) -> Tensor | None:
    """The tensor whose lower or upper half of the last dimension ``t`` is (a slice op), or None."""
    op = c.g.ops[t.op]
    if op.kind != "slice" or op.attrs["dim"] != len(t.shape) - 1 or op.attrs.get("step", 1) != 1:
        return None
    src = c.g.ops[op.inputs[0]]
    dh = src.shape[-1]
    want = (dh // 2, dh) if upper else (0, dh // 2)
    if dh % 2 or (op.attrs["start"], op.attrs["stop"]) != want:
        return None
    return Tensor(c.g, src.index, src.shape)


@converts("aten.cat")
def _cat(c: ExportCall) -> Any:
    xs = list(c.arg(0, "tensors"))
    if any(isinstance(x, RotaryPart) for x in xs):
        # rotate_half(x) = cat([-x[..., h:], x[..., :h]], -1)
        ok = len(xs) == 2 and isinstance(xs[0], RotaryPart) and xs[0].stage == "neg" and isinstance(xs[1], Tensor)
        upper = _half_of(c, xs[0].x, upper=True) if ok else None
        lower = _half_of(c, xs[1], upper=False) if ok else None
        if upper is None or lower is None or upper.op != lower.op:
            raise c.error("a concatenation with a negated half is supported only as rotate_half(x) = "
                          "cat([-x[..., h:], x[..., :h]], -1)")
        return RotaryPart(upper, "rotated")
    ts = [c.tensor(x, f"tensor {k}") for k, x in enumerate(xs)]
    axis = c.arg(1, "dim", 0) % len(ts[0].shape)
    _keeps_batch(c, ts[0], axis == 0, "a concatenation")
    return c.g.concat(ts, axis=axis, name=c.name("cat"))


def _rotary(c: ExportCall, a: RotaryPart, b: RotaryPart) -> Tensor:
    """``x * cos + rotate_half(x) * sin`` with constant tables: a ``rotary`` op when the tables
    are RoPE's for some base (checked entry by entry), refused otherwise (scaled RoPE variants)."""
    torch = c.imp.torch
    cos, sin = (a, b) if a.stage == "cos" else (b, a)
    if not (cos.stage == "cos" and sin.stage == "sin" and cos.x.op == sin.x.op):
        raise c.error("a sum of products by constants is supported only as x * cos + rotate_half(x) * sin "
                      "(a rotary position embedding)")
    x = cos.x
    t, dh = x.shape[-2], x.shape[-1]
    tables = []
    for table in (cos.table, sin.table):
        table = table.to(torch.float64)
        if table.dim() > len(x.shape) or tuple(table.shape[-2:]) != (t, dh):
            raise c.error(f"rotary tables of shape {tuple(table.shape)} for an input {x.shape} are not supported "
                          f"(one (T, Dh) table for every sample and head)")
        flat = table.reshape(-1, t, dh)
        if not bool((flat == flat[0]).all()):
            raise c.error("rotary tables that differ between samples or heads (position ids other than 0..T-1) "
                          "are not supported")
        tables.append(flat[0])
    base = _rope_base(torch, tables[0], tables[1], t, dh)
    want = torch.arange(t, dtype=torch.float64)[:, None] * (base ** (-2.0 * (torch.arange(dh) % (dh // 2)) / dh))
    tol = 1e-6 + 2e-7 * t   # float32 tables: the angle t f rounded to float32 before cos and sin
    if base is None or not (torch.allclose(tables[0], torch.cos(want), rtol=0, atol=tol)
                            and torch.allclose(tables[1], torch.sin(want), rtol=0, atol=tol)):
        raise c.error("rotary tables other than RoPE's (cos and sin of t base^(-2i/Dh), positions 0..T-1, no "
                      "scaling) are not supported: a Hugging Face config without rope_scaling")
    return c.g.rotary(x, base=base, name=c.name("rotary"))


def _rope_base(torch: Any, cos: Any, sin: Any, t: int, dh: int) -> float | None:
    """The base of RoPE's frequencies from the tables' angles at position 1 (f_1 = base^(-2/Dh)),
    rounded to 6 significant digits (the configs' thetas: 10000, 500000); None when T < 2."""
    if t < 2:
        return None
    if dh == 2:
        return 10000.0   # one frequency, 1: every base gives the same tables
    f1 = float(torch.atan2(sin[1, 1], cos[1, 1]))
    if not f1 > 0:
        return None
    return float(f"{f1 ** (-dh / 2):.6g}")


@converts("aten.unsqueeze")
def _unsqueeze(c: ExportCall) -> Tensor:
    """A dimension of 1 inserted after the batch (Llama's repeat_kv: unsqueeze, expand, reshape)."""
    x = c.tensor(c.arg(0, "self"), "the input")
    d = c.arg(1, "dim") % (len(x.shape) + 1)
    if d == 0:
        raise c.error("a new leading (batch) dimension is not supported")
    return c.g.reshape(x, x.shape[:d] + (1,) + x.shape[d:], name=c.name("unsqueeze"))


@converts("aten.gelu")
def _gelu(c: ExportCall) -> Tensor:
    approximate = c.kwargs.get("approximate", c.arg(1, "approximate", "none"))
    if approximate not in ("none", "tanh"):
        raise c.error(f"approximate={approximate!r} is not a GELU form; PyTorch's are 'none' and 'tanh'")
    return c.g.gelu(c.tensor(c.arg(0, "self"), "the input"), approximate=approximate, name=c.name("gelu"))


def _unary(kind: str) -> Callable[[ExportCall], Tensor]:
    def convert(c: ExportCall) -> Tensor:
        return getattr(c.g, kind)(c.tensor(c.arg(0, "self"), "the input"), name=c.name(kind))
    return convert


for _kind in ("silu", "tanh", "sigmoid", "relu"):
    CONVERTERS[f"aten.{_kind}"] = _unary(_kind)


@converts("aten.alias", "aten.clone", "aten.contiguous", "aten.detach", "aten.lift_fresh_copy")
def _identity(c: ExportCall) -> Any:
    return c.arg(0, "self")


@converts("aten.to", "aten._to_copy")
def _to(c: ExportCall) -> Any:
    x = c.arg(0, "self")
    torch = c.imp.torch
    dtypes = [v for v in (*c.args[1:], *c.kwargs.values()) if isinstance(v, torch.dtype)]   # to.dtype: positional
    dtype = dtypes[0] if dtypes else None
    if dtype is not None and dtype != torch.float32:
        raise c.error(f"a conversion to {dtype} is not supported (shardwise computes in float32)")
    return x


@converts("aten._assert_tensor_metadata")
def _assert(c: ExportCall) -> None:
    return None


@converts("aten.select")
def _select(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "self"), "the input")
    _keeps_batch(c, x, c.arg(1, "dim") % len(x.shape) == 0, "a select")
    return c.g.select(x, c.arg(1, "dim"), c.arg(2, "index"), name=c.name("select"))


@converts("aten.slice")
def _slice(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "self"), "the input")
    dim, start, end, step = c.arg(1, "dim", 0), c.arg(2, "start"), c.arg(3, "end"), c.arg(4, "step", 1)
    d = dim % len(x.shape)
    start = 0 if start is None else start
    end = x.shape[d] if end is None else min(end, x.shape[d])
    return c.g.slice(x, d, start, end, step, name=c.name("slice"))


@converts("aten.expand")
def _expand(c: ExportCall) -> Tensor:
    x = c.tensor(c.arg(0, "self"), "the input")
    return c.g.expand(x, list(c.arg(1, "size")), name=c.name("expand"))




# ----------------------------------------------------------------------------- the docs' table
class ExportDocRow(NamedTuple):
    """A row of the table of ATen ops in docs/importing.md (markdown; tools/ops_docs.py writes it)."""

    op: str     # the shardwise op(s) built
    aten: str   # the ATen ops, each in backquotes, or the pattern of them
    doc: str    # the conditions


EXPORT_DOC_ROWS: tuple[ExportDocRow, ...] = (
    ExportDocRow("`linear`", "`aten.linear`", "weight (and bias) parameters of the model (`nn.Linear`)"),
    ExportDocRow("`linear`", "`aten.view` + `aten.addmm` (or `aten.mm`) + `aten.view`",
                 "`x @ W + b` on the rows of (N, T, D) with W (in, out) and b parameters (Hugging Face's `Conv1D`, "
                 "GPT-2's linears): the imported weight is W transposed to (out, in), under W's `state_dict` name"),
    ExportDocRow("`embedding`", "`aten.embedding`",
                 "a table parameter read by token ids (an integer input); no `padding_idx`"),
    ExportDocRow("`parameter` + `embedding`; `parameter` + `expand` + `matmul` (+ `add`)",
                 "`aten.embedding` and `aten.linear` of one parameter",
                 "tied weights (an output layer reading the token embedding's table): one `parameter` op read by "
                 "an `embedding` with a table input and by `matmul(x, table, transpose_b=True)` over the table "
                 "broadcast to the samples; the parameter op sums both gradients"),
    ExportDocRow("`parameter` + `slice`", "`aten.embedding`",
                 "of constant indices: 0..T-1 at every position (learned positions: the table's first T rows) or "
                 "one index everywhere (BERT's token types without `token_type_ids`: that row), added by broadcasting"),
    ExportDocRow("`layer_norm`", "`aten.layer_norm`", "over the last dimension, weight and bias parameters; any eps"),
    ExportDocRow("`rms_norm`", "`aten.pow`, `aten.mean`, `aten.add`, `aten.rsqrt`, `aten.mul`",
                 "only `x * rsqrt(mean(x ** 2, -1, keepdim=True) + eps) * w` (Llama's RMS norm), w a parameter"),
    ExportDocRow("`rotary`", "`aten.mul`, `aten.slice`, `aten.neg`, `aten.cat`, `aten.add`",
                 "only `x * cos + cat(-x[..., h:], x[..., :h]) * sin` (Llama's rotary embedding) with constant "
                 "tables equal to RoPE's for positions 0..T-1 without scaling; the base is read from the tables"),
    ExportDocRow("attention: `matmul`, `softmax_dim`, `matmul`", "`aten.scaled_dot_product_attention`",
                 "no mask, or a constant mask that is all True or the causal one (boolean, or additive 0 and "
                 "-inf): `causal=True`; `dropout_p=0`; grouped-query attention through `repeat_kv` (below), not "
                 "`enable_gqa`"),
    ExportDocRow("`reshape`", "`aten.view`, `aten.reshape`, `aten._unsafe_view`, `aten.unsqueeze`",
                 "the batch dimension kept: split or merge dimensions, insert one of size 1 (`repeat_kv`: "
                 "`unsqueeze`, `expand`, `reshape`); a reshape to the same shape is no op"),
    ExportDocRow("`permute`", "`aten.transpose`, `aten.permute`", "the batch dimension stays first"),
    ExportDocRow("`slice` per piece", "`aten.split`, `aten.split_with_sizes`", "any dimension but the batch"),
    ExportDocRow("`slice`", "`aten.slice`", "any dimension but the batch; positive steps"),
    ExportDocRow("`select`", "`aten.select`", "one index of a dimension after the batch (BERT's pooler)"),
    ExportDocRow("`expand`", "`aten.expand`", "constant sizes"),
    ExportDocRow("`concat`", "`aten.cat`", "any dimension but the batch"),
    ExportDocRow("`add`, `broadcast_add`", "`aten.add`",
                 "two tensors (a parameter operand: a `parameter` op), `alpha=1`; no constants"),
    ExportDocRow("`mul`", "`aten.mul`", "two tensors that broadcast (SwiGLU's gate); no constants"),
    ExportDocRow("`gelu`", "`aten.gelu`", "`approximate=\"none\"` or `\"tanh\"`"),
    ExportDocRow("`gelu` (`approximate=\"tanh\"`)",
                 "`aten.mul`, `aten.pow`, `aten.add`, `aten.tanh`",
                 "exactly `0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))` (Hugging Face's "
                 "`NewGELUActivation`, GPT-2's `gelu_new`), each intermediate read by the formula only"),
    ExportDocRow("`silu`, `tanh`, `sigmoid`, `relu`", "`aten.silu`, `aten.tanh`, `aten.sigmoid`, `aten.relu`",
                 "element-wise, any shape"),
    ExportDocRow("`dropout`", "`aten.dropout`", "in train mode with `p > 0`; none otherwise"),
    ExportDocRow("none (identity)", "`aten.alias`, `aten.clone`, `aten.contiguous`, `aten.detach`, "
                 "`aten.lift_fresh_copy`, `aten.to`, `aten._to_copy`, `aten._assert_tensor_metadata`",
                 "conversions to float32 only"),
)
"""What the export path imports: every key of :data:`CONVERTERS` is named in a row (a test checks)."""
