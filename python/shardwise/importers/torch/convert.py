"""Import a PyTorch model: ``g, weights = sw.from_torch(model, example_inputs=(x,))``.

The model is traced with ``torch.fx`` (symbolic tracing: no tensor is computed, so importing
has no side effects on the model), and every node of the trace is mapped to shardwise ops by
the table of :mod:`shardwise.importers.torch.ops`.  Shapes come from the example inputs (only
their shapes are read) through the graph builder, so shape arithmetic in ``forward``
(``x.view(x.size(0), -1)``) is evaluated during the import.

torch is imported here only when :func:`from_torch` is called: the package never needs it.
"""
from __future__ import annotations

import importlib
import operator
import os
import sys
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardwise.errors import ModelImportError, ShardwiseError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import Lazy, check_weight_shapes, unique_name, without_dead_ops
from shardwise.importers.torch.call import REQUIRED, Attr, Call, TorchOp, is_torch_tensor, record_weights
from shardwise.importers.torch.ops import TORCH_OPS, VIEW_OPS

__all__ = ["from_torch"]

# Python operators as a user writes them, for messages about the ones not imported.
_OPERATORS = {"mul": "x * y", "imul": "x *= y", "sub": "x - y", "isub": "x -= y", "truediv": "x / y",
              "itruediv": "x /= y", "floordiv": "x // y", "pow": "x ** y", "neg": "-x", "getitem": "x[...]",
              "setitem": "x[...] = y", "mod": "x % y", "lt": "x < y", "gt": "x > y", "eq": "x == y"}


def _import_torch() -> Any:
    try:
        import torch
        import torch.fx
    except ImportError as exc:
        raise ImportError("shardwise.from_torch needs PyTorch, which is not installed: pip install torch") from exc
    return torch


def from_torch(model: Any, example_inputs: Any, name: str | None = None,
               method: str = "auto") -> tuple[Graph, dict[str, np.ndarray]]:
    """Import ``model`` (a ``torch.nn.Module``) as a shardwise graph and its weights.

    ``example_inputs`` is a tuple with one tensor per argument of ``model.forward`` (a single
    tensor is taken as a 1-tuple); only their shapes are used, and they fix the graph's shapes,
    the first dimension being the minibatch.  The graph's input ops are named after
    ``forward``'s arguments; ``name`` is the graph's (default: the model's class name).

    The model must return one (N, classes) tensor of logits: a softmax op (shardwise's
    softmax cross-entropy loss, PyTorch's ``CrossEntropyLoss`` with mean reduction) named
    ``"softmax"`` is appended.  A model whose last op is a softmax or log-softmax over the
    classes has that op become the loss instead.

    Ops are named after the modules that run them (``"layer1.0.conv1"``), and function calls
    after their enclosing module and the function (``"layer1.0.add"``), so the weights dict,
    ``{"<op>.weight": array, "<op>.bias": array}`` in PyTorch's layouts (the form
    :meth:`~shardwise.Trainer.set_weights` takes), has the keys of the model's
    ``state_dict()`` for module weights; batch norms add ``"<op>.running_mean"``,
    ``"<op>.running_var"`` and ``"<op>.num_batches_tracked"`` and keep their momentum.  ``F.linear`` and ``F.conv2d`` ops are named after
    their weight's owner (``F.linear(x, self.fc.weight, self.fc.bias)`` is op ``"fc"``).  A
    parameter read directly in ``forward`` as a matrix (``x @ self.w``) becomes a ``parameter``
    op named after it, with the weight ``"<name>.weight"``.  A ReLU that is the only user of a
    convolution or linear layer is fused into it.  Ops the output does not depend on are left out.

    Raises ImportError if torch is missing, and :class:`~shardwise.ModelImportError` (a
    :class:`~shardwise.GraphError`) naming the module path, the op and, for function calls,
    the source line, for an unsupported op or argument or a model torch.fx cannot trace.
    The supported ops are the table in docs/importing.md.

    ``method``: ``"fx"`` traces with torch.fx; ``"export"`` records the ATen graph of
    ``torch.export`` (models with control flow: Hugging Face transformers;
    :mod:`shardwise.importers.torch.export`); ``"auto"`` (the default) traces with torch.fx and
    falls back to torch.export where torch.fx cannot trace the model.
    """
    torch = _import_torch()
    if not isinstance(model, torch.nn.Module):
        raise ModelImportError(f"from_torch takes a torch.nn.Module, got {type(model).__name__}")
    if method not in ("auto", "fx", "export"):
        raise ModelImportError(f"from_torch method must be 'auto', 'fx' or 'export', got {method!r}")
    shapes = _example_shapes(torch, example_inputs)
    if method == "export":
        return _from_export(torch, model, shapes, example_inputs, name)
    index = resolve(torch)
    try:
        fx_graph = _trace(torch, model, tuple(index.modules))
    except _TraceFailed as failed:
        if method == "fx":
            raise failed.error from None
        try:
            return _from_export(torch, model, shapes, example_inputs, name)
        except ModelImportError as exc:
            raise ModelImportError(f"{exc} (imported with torch.export, as torch.fx could not trace "
                                   f"{type(model).__name__}.forward: {failed.error.__cause__})") from exc
    importer = _Importer(torch, index, model, fx_graph, name or type(model).__name__)
    g = importer.run(shapes)
    return without_dead_ops(g, importer.weights())


def _from_export(torch: Any, model: Any, shapes: list, example_inputs: Any,
                 name: str | None) -> tuple[Graph, dict[str, np.ndarray]]:
    from shardwise.importers.torch.export import from_torch_export

    xs = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    return from_torch_export(torch, model, shapes, xs, name or type(model).__name__)


class _TraceFailed(Exception):
    """torch.fx could not trace the model; ``error`` says why (a ModelImportError)."""

    def __init__(self, error: ModelImportError) -> None:
        super().__init__(str(error))
        self.error = error


def _example_shapes(torch: Any, example_inputs: Any) -> list[tuple[tuple[int, ...], str]]:
    if isinstance(example_inputs, torch.Tensor):
        example_inputs = (example_inputs,)
    if not isinstance(example_inputs, (tuple, list)) or not example_inputs:
        raise ModelImportError(f"example_inputs must be a tuple of tensors, got {type(example_inputs).__name__}")
    shapes = []
    for k, x in enumerate(example_inputs):
        if not isinstance(x, torch.Tensor):
            raise ModelImportError(f"example input {k} is a {type(x).__name__}, not a tensor")
        if x.dtype.is_complex or x.dtype == torch.bool:
            raise ModelImportError(f"example input {k} has dtype {x.dtype}; shardwise's inputs are float32 (or "
                                   f"integer token ids for nn.Embedding)")
        dtype = "float32" if x.dtype.is_floating_point else "int64"   # integers: token ids (embeddings read them)
        shapes.append((tuple(int(s) for s in x.shape), dtype))
    return shapes


def _trace(torch: Any, model: Any, leaves: tuple = ()) -> Any:
    """The model's fx graph; modules of the classes ``leaves`` (the import table's, those
    outside torch.nn included: torchvision's StochasticDepth) are calls, not traced into."""
    class Tracer(torch.fx.Tracer):
        def is_leaf_module(self, m: Any, qualname: str) -> bool:
            return type(m) in leaves or super().is_leaf_module(m, qualname)

    tracer = Tracer()
    tracer.record_stack_traces = True   # source lines for messages
    tracer.proxy_buffer_attributes = True   # buffers as get_attr nodes: a causal mask `self.bias[:, :, :T, :T]`
    try:
        return tracer.trace(model)
    except Exception as exc:   # TraceError, or whatever forward raises on proxies
        error = ModelImportError(f"torch.fx could not trace {type(model).__name__}.forward ({type(exc).__name__}: "
                                 f"{exc}); from_torch needs a forward without control flow that depends on "
                                 f"tensor values")
        error.__cause__ = exc
        raise _TraceFailed(error) from exc


# ----------------------------------------------------------------------------- the table, resolved and bound
@dataclass
class Index:
    """:data:`TORCH_OPS` resolved against the installed torch: lookups by module class, function, method."""

    modules: dict[type, TorchOp]
    functions: dict[Any, TorchOp]
    methods: dict[str, TorchOp]


def _resolve_name(dotted: str) -> Any:
    module, _, attr = dotted.rpartition(".")
    if module.split(".")[0] not in ("torch", "operator", "_operator", "builtins", "math"):
        return _loaded_class(dotted)   # torchvision's functions: never imported here
    try:
        return getattr(importlib.import_module(module), attr)
    except (ImportError, AttributeError):
        return None   # not in this version of torch: that spelling cannot occur in a trace either


def _loaded_class(dotted: str) -> Any:
    """The class ``dotted`` names when its package is already imported (a model built with
    torchvision imported it), else None: from_torch never imports torchvision itself."""
    module, _, attr = dotted.rpartition(".")
    return getattr(sys.modules.get(module), attr, None) if module in sys.modules else None


def resolve(torch: Any, table: Sequence[TorchOp] = TORCH_OPS) -> Index:
    """Look every spelling of ``table`` up in the installed torch; a spelling listed twice is an error."""
    index = Index({}, {}, {})

    def put(d: dict, key: Any, entry: TorchOp, what: str) -> None:
        if key is None:
            return
        if key in d and d[key] is not entry:
            raise ValueError(f"import table: {what} is listed by both {d[key].name!r} and {entry.name!r}")
        d[key] = entry

    for entry in table:
        for cls in entry.modules:
            # a dotted name is a class outside torch.nn (torchvision.ops.StochasticDepth)
            put(index.modules, _loaded_class(cls) if "." in cls else getattr(torch.nn, cls, None), entry,
                cls if "." in cls else f"nn.{cls}")
        for fn in entry.functions:
            put(index.functions, _resolve_name(fn), entry, fn)
        for m in entry.methods:
            put(index.methods, m, entry, f"Tensor.{m}")
    return index


def bind(entry: TorchOp, module: Any, args: Sequence[Any], kwargs: dict[str, Any],
         where: str) -> tuple[list[Any], dict[str, Any]]:
    """The data inputs and the named arguments of one call of ``entry`` (a module call when
    ``module`` is given: its attributes are the named arguments)."""
    names = [p for p, _ in entry.params]
    if module is not None:
        call_names = [p for p, _ in entry.call_params]
        extra = dict(zip(call_names, args[entry.inputs:]))
        if (len(args) < entry.inputs or len(args) > entry.inputs + len(call_names)
                or any(k not in call_names or k in extra for k in kwargs)):
            raise ModelImportError(f"{where}: a call with {len(args)} positional argument(s) and keyword(s) "
                                   f"{sorted(kwargs)} is not supported")
        attrs = {p: getattr(module, p, d) for p, d in entry.params}
        attrs.update({p: kwargs.get(p, extra.get(p, d)) for p, d in entry.call_params})
        return list(args[:entry.inputs]), attrs
    kwargs = dict(kwargs)
    inputs = list(args[:entry.inputs])
    names_in = ("input", "other", "tensors", "self", "mat2", "weight")
    for key in [k for k in kwargs if k in names_in]:
        if len(inputs) < entry.inputs:
            inputs.append(kwargs.pop(key))
    if len(inputs) != entry.inputs:
        raise ModelImportError(f"{where}: {entry.name} takes {entry.inputs} tensor argument(s)")
    rest = list(args[entry.inputs:])
    if entry.variadic:
        if len(rest) == 1 and isinstance(rest[0], (tuple, list)):
            rest = [tuple(rest[0])]
        elif rest:
            rest = [tuple(rest)]
    if len(rest) > len(names):
        raise ModelImportError(f"{where}: {entry.name} got {len(rest)} extra positional arguments")
    attrs = dict(zip(names, rest))
    for key, value in kwargs.items():
        if key not in names or key in attrs:
            raise ModelImportError(f"{where}: argument {key}={value!r} of {entry.name} is not supported")
        attrs[key] = tuple(value) if entry.variadic and isinstance(value, list) else value
    for p, default in entry.params:
        if p not in attrs:
            if default is REQUIRED:
                raise ModelImportError(f"{where}: {entry.name} needs the argument {p!r}")
            attrs[p] = default
    return inputs, attrs


FOLDABLE_MODULES = ("_operator", "operator", "builtins", "math")
"""Functions of these modules applied to constants only (shape arithmetic such as
``x.size(0) * 2``) are evaluated during the import."""


def is_inplace(op: str, target: Any, attrs: dict[str, Any]) -> bool:
    """Whether a call writes its first input (``relu_``, ``add_``, ``inplace=True``, ``+=``)."""
    if attrs.get("inplace") is True:
        return True
    name = target if op == "call_method" else getattr(target, "__name__", "")
    return (isinstance(name, str) and name.endswith("_") and not name.endswith("__")) or target is operator.iadd


class _Stale:
    """The value of a tensor after an in-place op on a view of it (see :meth:`_Importer._write`)."""

    def __init__(self, written_at: str) -> None:
        self.written_at = written_at

    def fail(self, where: str) -> None:
        raise ModelImportError(f"{where}: reads a tensor that an in-place op on a view of it changed "
                               f"(at {self.written_at}); in-place ops on views (flatten, view, reshape) "
                               f"are not supported when the original tensor is read afterwards")


class _Importer:
    """One pass over the trace, building a graph.

    ``env`` maps every node to its value: a graph :class:`Tensor`, an :class:`Attr`, a
    constant (shapes, sizes), or a :class:`_Stale` for a tensor an in-place op on a view of
    it has changed.  Nodes naming one tensor share one :class:`Tensor` object, which is how
    an in-place op reaches every name of the tensor it writes (see :meth:`_write`)."""

    def __init__(self, torch: Any, index: Index, model: Any, fx_graph: Any, name: str) -> None:
        self.torch, self.index, self.model, self.fx = torch, index, model, fx_graph
        self.g = Graph(name)
        self.env: dict[Any, Any] = {}
        self.view_of: dict[Tensor, Tensor] = {}    # a flatten's output -> its input (PyTorch: a view of it)
        self.fused: set[Any] = set()               # ReLU nodes fused into their producer
        self.params: dict[str, dict[str, Any]] = {}
        # every parameter's state_dict name, by identity: a weight an op reads keeps the model's name
        self.model_names = {id(p): n for n, p in model.named_parameters()}
        self.state: dict[str, dict[str, Any]] = {}   # batch norms' running statistics
        self.parameter_ops: dict[str, Tensor] = {}
        self.module_calls: dict[str, int] = {}
        # names that modules and attributes own: a function's op never takes one of them
        self.reserved = {n.target for n in fx_graph.nodes if n.op in ("call_module", "get_attr")}
        self.torch_dir = os.path.dirname(torch.__file__)

    # ----- the pass
    def run(self, shapes: list[tuple[tuple[int, ...], str]]) -> Graph:
        placeholders = [n for n in self.fx.nodes if n.op == "placeholder"]
        if len(placeholders) != len(shapes):
            raise ModelImportError(f"{type(self.model).__name__}.forward takes {len(placeholders)} tensor(s) "
                                   f"({', '.join(n.target for n in placeholders)}); example_inputs has {len(shapes)}")
        shape_of = dict(zip(placeholders, shapes))
        for node in self.fx.nodes:
            if node.op == "placeholder":
                shape, dtype = shape_of[node]
                self.env[node] = self.g.input(self._unique(node.target.lstrip("*"), owner=True), shape, dtype=dtype)
            elif node.op == "get_attr":
                self.env[node] = Attr(node.target, self._fetch(node.target))
            elif node.op == "output":
                self._output(node)
            else:
                self._call(node)
        return self.g

    def _fetch(self, target: str) -> Any:
        obj = self.model
        for part in target.split("."):
            obj = getattr(obj, part)
        return obj

    def _call(self, node: Any) -> None:
        fx = self.torch.fx
        args = fx.node.map_arg(node.args, self.env.__getitem__)
        kwargs = fx.node.map_arg(node.kwargs, self.env.__getitem__)
        fx.node.map_aggregate((args, kwargs), lambda v: v.fail(self._where(node)) if isinstance(v, _Stale) else v)
        if node.op == "call_function" and self._foldable(node.target, args, kwargs):
            self.env[node] = node.target(*args, **kwargs)   # shape arithmetic on constants
            return
        if node.op in ("call_function", "call_method") and self._constant(node, args, kwargs):
            self.env[node] = self._evaluate(node, args, kwargs)   # torch.arange(T), a causal mask from a buffer
            return
        entry, module = self._entry(node)
        where = self._where(node, module)
        if entry is None:
            place = f"module {node.target!r}" if module is not None else where
            raise ModelImportError(f"{place}: {self._describe(node, module)} is not supported "
                                   f"(the supported ops are listed in docs/importing.md)")
        if node in self.fused:
            self.env[node] = args[0]
            return
        inputs, attrs = bind(entry, module, args, kwargs, where)
        if module is not None and any(True for _ in module.parameters()):
            calls = self.module_calls[node.target] = self.module_calls.get(node.target, 0) + 1
            if calls > 1:
                raise ModelImportError(f"{where}: the module is called more than once; its weights would be shared, "
                                       f"which is not supported")
        call = Call(self.g, self._op_name(node, entry, inputs), where, module, inputs, attrs,
                    activation=self._fuse_relu(node, entry), is_output=self._is_output(node),
                    weights=self.params, parameter_op=self._parameter_op, state=self.state,
                    op=self._describe(node, module), model_names=self.model_names)
        try:
            value = entry.convert(call)
        except ModelImportError:
            raise
        except ShardwiseError as exc:   # a builder's ShapeError/GraphError: say where it came from
            raise type(exc)(f"{where}: {exc}") from None
        if entry.name in VIEW_OPS and isinstance(value, Tensor) and value is not inputs[0]:
            self.view_of[value] = inputs[0]
        if is_inplace(node.op, node.target, attrs) and inputs and isinstance(inputs[0], Tensor):
            self._write(inputs[0], value, node)
        self.env[node] = value

    def _write(self, old: Tensor, new: Any, node: Any) -> None:
        """An in-place op changed ``old`` to ``new``: every node naming ``old`` (the input node,
        and those that returned it unchanged: ``x.contiguous()``, ``nn.Identity``) now names
        ``new``, as later readers see the updated tensor in PyTorch.  The base of a view
        changes too in PyTorch, which shardwise's flatten (a copy) cannot follow: reading the
        base afterwards is refused rather than silently given the old values."""
        for n, v in self.env.items():
            if v is old:
                self.env[n] = new
        base = self.view_of.get(old)
        while base is not None:
            stale = _Stale(self._where(node))
            for n, v in self.env.items():
                if v is base:
                    self.env[n] = stale
            base = self.view_of.get(base)

    def _output(self, node: Any) -> None:
        out = node.args[0]
        value = self.env.get(out) if isinstance(out, self.torch.fx.Node) else out
        where = f"{type(self.model).__name__}.forward"
        if isinstance(value, Lazy):
            value = value.tensor(self.g, where, "the output")
        if not isinstance(value, Tensor):
            raise ModelImportError(f"{where} returns {type(value).__name__}; from_torch takes a model that returns "
                                   f"one (N, classes) or (N, T, classes) tensor of logits")
        if len(value.shape) not in (2, 3):
            raise ModelImportError(f"{where} returns shape {value.shape}; from_torch takes a model that returns "
                                   f"(N, classes) or (N, T, classes) logits")
        if self.g.ops[value.op].kind != "softmax":
            self.g.softmax(value, name=self._unique("softmax"))

    # ----- weights
    def weights(self) -> dict[str, np.ndarray]:
        out = {}
        for op_name, params in self.params.items():
            for pname, t in params.items():
                out[f"{op_name}.{pname}"] = np.array(t.detach().cpu().float().numpy(), dtype=np.float32)
        check_weight_shapes(self.g, out)
        for op_name, buffers in self.state.items():   # running statistics (float32) and the count (int64)
            for bname, t in buffers.items():
                a = t.detach().cpu().numpy()
                out[f"{op_name}.{bname}"] = np.array(a, dtype=np.int64 if bname == "num_batches_tracked"
                                                     else np.float32)
        return out

    def _parameter_op(self, attr: Attr, where: str) -> Tensor:
        """A model parameter read as data (at ``where``): one parameter op per attribute, shared
        by its readers (the parameter op sums their gradients)."""
        if attr.target not in self.parameter_ops:
            op = self._unique(attr.target, owner=True)
            record_weights(self.params, op, {"weight": attr.value}, where, what=f"the parameter {attr.target!r}")
            self.parameter_ops[attr.target] = self.g.parameter(tuple(attr.value.shape), name=op)
            # get_weights and set_weights under the model's own name (a state_dict loads as it is)
            self.g.weight_names[f"{op}.weight"] = attr.target
        return self.parameter_ops[attr.target]

    # ----- lookups and names
    def _entry(self, node: Any) -> tuple[TorchOp | None, Any]:
        if node.op == "call_module":
            module = self.model.get_submodule(node.target)
            return self.index.modules.get(type(module)), module
        if node.op == "call_method":
            return self.index.methods.get(node.target), None
        try:
            return self.index.functions.get(node.target), None
        except TypeError:   # an unhashable callable
            return None, None

    def _foldable(self, target: Any, args: Any, kwargs: Any) -> bool:
        if getattr(target, "__module__", None) not in FOLDABLE_MODULES:
            return False
        found: list[bool] = []
        self.torch.fx.node.map_aggregate((args, kwargs), lambda v: found.append(isinstance(v, (Tensor, Attr, Lazy))
                                                                                 or is_torch_tensor(v)))
        return not any(found)

    def _constant(self, node: Any, args: Any, kwargs: Any) -> bool:
        """Whether a call of a torch function or Tensor method reads constants only: numbers,
        tensors it made (``torch.ones``), the model's buffers; never graph values or trainable
        parameters, whose values change in training."""
        if node.op == "call_function" and not str(getattr(node.target, "__module__", "") or "").startswith("torch") \
                and getattr(node.target, "__module__", None) not in FOLDABLE_MODULES:
            return False
        found: list[bool] = []

        def visit(v: Any) -> None:
            found.append(isinstance(v, (Tensor, Lazy)) or (isinstance(v, Attr) and bool(v.value.requires_grad)))
        self.torch.fx.node.map_aggregate((args, kwargs), visit)
        return not any(found)

    def _evaluate(self, node: Any, args: Any, kwargs: Any) -> Any:
        """The call run by torch on its constant arguments (buffers as their tensors)."""
        args, kwargs = self.torch.fx.node.map_aggregate((args, kwargs), lambda v: v.value if isinstance(v, Attr) else v)
        try:
            with self.torch.no_grad():
                if node.op == "call_method":
                    return getattr(args[0], node.target)(*args[1:], **kwargs)
                return node.target(*args, **kwargs)
        except Exception as exc:
            raise ModelImportError(f"{self._where(node)}: {self._describe(node, None)} on constants failed "
                                   f"({type(exc).__name__}: {exc})") from None

    def _fuse_relu(self, node: Any, entry: TorchOp) -> str | None:
        """"relu" when ``node``'s only user is a ReLU of it, which is then fused into ``node``'s op."""
        if not entry.fuses_relu or len(node.users) != 1:
            return None
        user = next(iter(node.users))
        relu, _ = self._entry(user) if user.op.startswith("call_") else (None, None)
        if relu is None or relu.name != "relu" or not user.args or user.args[0] is not node:
            return None
        self.fused.add(user)
        return "relu"

    def _is_output(self, node: Any) -> bool:
        return len(node.users) == 1 and next(iter(node.users)).op == "output"

    def _unique(self, base: str, owner: bool = False) -> str:
        """``base``, or ``base_1``, ``base_2``, ...: a name no op has; only the owner of a reserved
        name (the module or attribute itself) gets it."""
        return unique_name(self.g, self.reserved, base, owner)

    def _op_name(self, node: Any, entry: TorchOp, inputs: list[Any]) -> str:
        """The module's path; for ``F.linear(x, self.fc.weight)``, the weight's owner (``"fc"``);
        for other functions, the enclosing module's path and the operation (``"layer1.0.add"``)."""
        if node.op == "call_module":
            return self._unique(node.target, owner=True)
        weight = inputs[entry.weight_arg] if entry.weight_arg is not None else None
        if isinstance(weight, Attr) and weight.target != "weight":   # "weight": the root module's own
            target = weight.target
            return self._unique(target[:-len(".weight")] if target.endswith(".weight") else target, owner=True)
        path = self._module_path(node)
        return self._unique(f"{path}.{entry.name}" if path else entry.name)

    @staticmethod
    def _module_path(node: Any) -> str:
        stack = node.meta.get("nn_module_stack") or {}
        return list(stack.values())[-1][0] if stack else ""

    def _where(self, node: Any, module: Any = None) -> str:
        """Where a call is, for messages: ``module 'layer1.0.conv1' (nn.Conv2d)`` for a module call;
        for a function call, the module whose ``forward`` makes it and the source line:
        ``module 'layer1.0' (model.py:12 `out += identity`)``."""
        if node.op == "call_module":
            module = self.model.get_submodule(node.target) if module is None else module
            return f"module {node.target!r} ({self._describe(node, module)})"
        path = self._module_path(node)
        place = f"module {path!r}" if path else f"{type(self.model).__name__}.forward"
        line = self._source_line(node)
        return f"{place} ({line})" if line else place

    def _source_line(self, node: Any) -> str:
        """``file.py:12 `code``` of the innermost frame of user code that made ``node``."""
        lines = (node.stack_trace or "").splitlines()
        for k in range(len(lines) - 1, -1, -1):
            text = lines[k].strip()
            if not text.startswith('File "'):
                continue
            path = text[6:text.index('"', 6)]
            if os.path.abspath(path).startswith(self.torch_dir + os.sep):
                continue
            lineno = text.split(", line ")[1].split(",")[0] if ", line " in text else "?"
            code = lines[k + 1].strip() if k + 1 < len(lines) else ""
            return f"{os.path.basename(path)}:{lineno} `{code}`" if code else f"{os.path.basename(path)}:{lineno}"
        return ""

    def _describe(self, node: Any, module: Any) -> str:
        """What a node calls, as a user would write it: nn.GELU, torch.sigmoid, Tensor.exp, ..."""
        if node.op == "call_module":
            cls = type(module)
            return f"nn.{cls.__name__}" if getattr(self.torch.nn, cls.__name__, None) is cls else cls.__name__
        if node.op == "call_method":
            return f"Tensor.{node.target}"
        target = node.target
        fname = getattr(target, "__name__", None)
        for prefix, ns in (("torch", self.torch), ("torch.nn.functional", self.torch.nn.functional)):
            if fname and getattr(ns, fname, None) is target:
                return f"{prefix}.{fname}"
        if fname and getattr(operator, fname, None) is target:   # x * y, x[i], -x: say which operator
            return f"operator.{fname} ({_OPERATORS.get(fname, 'an operator')})"
        return f"{getattr(target, '__module__', None) or '?'}.{getattr(target, '__qualname__', repr(target))}"
