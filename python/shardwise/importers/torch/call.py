"""What a converter of :mod:`shardwise.importers.torch.ops` gets, and the helpers converters share.

:class:`Call` is one call of the trace as a converter sees it (its inputs, its attributes under
the module form's names, the graph being built, the weights to record); :class:`TorchOp` is one
entry of the table (every spelling of one operation).  :class:`~shardwise.importers.common.Lazy`,
a value of the trace kept symbolic until an op reads it, is shared with the ONNX importer.  Apart from the table (import_torch_ops.py, import_torch_seq.py)
so that the converters of both, and the ONNX importer, build on one definition.  Nothing here
imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from shardwise.errors import ModelImportError
from shardwise.graph import Graph, Tensor
from shardwise.importers.common import Lazy


REQUIRED = object()
"""The default of an argument a call must give."""


@dataclass(frozen=True, repr=False)
class Attr:
    """A tensor attribute of the model read directly in ``forward`` (a parameter or a buffer)."""

    target: str      # its path, e.g. "blocks.0.w"
    value: Any       # the torch.Tensor

    def __repr__(self) -> str:   # messages show the path, not the tensor's values
        return f"<the model's tensor {self.target!r}>"


@dataclass
class Call:
    """One call of a supported operation, as its converter sees it."""

    graph: Graph
    name: str                        # the name of the op the converter builds
    where: str                       # module path (and source line) for messages
    module: Any                      # the torch.nn.Module of a module call, else None
    inputs: list[Any]                # the data arguments: shardwise Tensors, Attrs, lists, constants
    attrs: dict[str, Any]            # the other arguments (functional form) or module attributes
    activation: str | None = None    # "relu": a ReLU after this op is fused into it
    is_output: bool = False          # the op's result is what the model returns
    weights: dict[str, dict[str, Any]] = field(default_factory=dict)   # op name -> {param: torch tensor}
    parameter_op: Callable[[Attr, str], Tensor] | None = None         # an Attr as a parameter op (Attr, where)
    state: dict[str, dict[str, Any]] = field(default_factory=dict)    # op name -> {buffer: torch tensor}:
                                                                       # batch norms' running statistics
    op: str = ""                     # what the call calls, as a user writes it ("operator.mul (x * y)")
    model_names: dict[int, str] = field(default_factory=dict)   # id(parameter) -> its state_dict name

    def error(self, message: str) -> ModelImportError:
        return ModelImportError(f"{self.where}: {message}")

    def tensor(self, index: int, rank: int | None = None, ids_ok: bool = False) -> Tensor:
        """Data input ``index`` as a graph tensor (of ``rank`` dimensions when given); an
        integer input (token ids) only when ``ids_ok`` (shape queries, embeddings)."""
        return self.as_tensor(self.inputs[index], f"argument {index}", rank, ids_ok)

    def as_tensor(self, value: Any, what: str, rank: int | None = None, ids_ok: bool = False) -> Tensor:
        """``value`` (``what`` of the call) as a graph tensor, or a ModelImportError saying what it is."""
        if isinstance(value, Lazy):
            value = value.tensor(self.graph, self.where, what)
        if isinstance(value, Attr):
            raise self.error(f"reads the tensor attribute {value.target!r} as data; a parameter is supported "
                             f"only as an operand of a matrix product (x @ W)")
        if not isinstance(value, Tensor):
            raise self.error(f"expects a tensor as {what}, got {_show(value)} "
                             f"(operations with constants are not supported)")
        if rank is not None and len(value.shape) != rank:
            raise self.error(f"expects a rank-{rank} tensor as {what}, got shape {value.shape}")
        src = self.graph.ops[value.op]
        if not ids_ok and src.kind == "input" and src.attrs.get("dtype") == "int64":
            raise self.error(f"reads the integer input {src.name!r} (token ids, torch.int64) as {what}; only "
                             f"nn.Embedding may read integer inputs")
        return value

    def parameter(self, value: Any, what: str, rank: int) -> Any:
        """``value`` (argument ``what``), a trainable parameter of the model read in ``forward``
        (``F.linear(x, self.w)``), as its torch tensor."""
        if not isinstance(value, Attr):
            raise self.error(f"expects a parameter of the model as {what}, got {_show(value)} "
                             f"(computed weights are not supported)")
        if not getattr(value.value, "requires_grad", False):
            raise self.error(f"{what} {value.target!r} is a constant tensor (a buffer, or a parameter without "
                             f"requires_grad); only trainable parameters are supported as weights")
        if value.value.dim() != rank:
            raise self.error(f"expects a rank-{rank} {what}, got {value.target!r} of shape {tuple(value.value.shape)}")
        return value.value

    def set_weights(self, **params: Any) -> None:
        """Record the op's parameters (torch tensors; None for an absent bias), each under the
        model's name for it where that is not ``<op>.<param>`` (``F.layer_norm(x, s, self.weight)``
        in a module ``norm``: ``norm.weight``; ``F.linear(x, self.w1)``: ``w1``)."""
        given = {k: v for k, v in params.items() if v is not None}
        record_weights(self.weights, self.name, given, self.where)
        for k, v in given.items():
            name = self.model_names.get(id(v))
            if name is not None and name != f"{self.name}.{k}":
                self.graph.weight_names[f"{self.name}.{k}"] = name


def record_weights(weights: dict[str, dict[str, Any]], op: str, params: dict[str, Any], where: str,
                   what: str = "its {}") -> None:
    """``weights[op] = params``, refusing a tensor another op already owns: shardwise gives every
    op its own weights, so tied weights (``fc2.weight = fc1.weight``, one parameter read by two
    calls) would silently come apart in training.  ``what`` names a parameter in the message
    (``"{}"`` is its key)."""
    for other, owned in weights.items():
        for pname, t in owned.items():
            for k, v in params.items():
                if v is t:
                    raise ModelImportError(f"{where}: {what.format(k)} is also the {pname} of op {other!r}; "
                                           f"shared (tied) weights are not supported")
    weights[op] = params


def _show(value: Any) -> str:
    """A short description of an argument for messages (not a whole tensor's repr)."""
    if isinstance(value, Attr):
        return f"the model's tensor {value.target!r}"
    if isinstance(value, Tensor):
        return f"a tensor of shape {value.shape}"
    if isinstance(value, Lazy):
        return repr(value)
    if is_torch_tensor(value):
        return f"a constant tensor of shape {tuple(value.shape)}"
    return f"the constant {value!r}"


def is_torch_tensor(value: Any) -> bool:
    """Whether ``value`` is a torch.Tensor (a constant the import evaluated), without importing torch."""
    return any(c.__name__ == "Tensor" and c.__module__.startswith("torch") for c in type(value).__mro__)


@dataclass(frozen=True)
class TorchOp:
    """One PyTorch operation and how to import it.

    ``params`` are the arguments after the ``inputs`` data arguments, as (name, default) with
    :data:`REQUIRED` for none; a module call reads them as module attributes of the same names.
    ``variadic`` collects the arguments after the data inputs into ``attrs[params[0][0]]``
    (``x.view(n, -1)`` and ``x.view((n, -1))`` alike).  ``fuses_relu``: a ReLU that is the
    only user of this op's result is fused into it (the graph builder's ``activation``).
    ``weight_arg``: the data input that is the op's weight (``F.linear(x, self.fc.weight)``);
    the op is named after that parameter, less a ``.weight`` suffix, so the weights dict keeps
    the model's ``state_dict`` keys.  ``call_params`` are the arguments a module call may pass
    after its data inputs (``mha(x, x, x, need_weights=False)``), as (name, default), bound
    into ``attrs`` beside the module's attributes.

    ``op`` and ``doc`` are the entry's row of the table of supported operations in
    docs/importing.md (``tools/ops_docs.py`` generates it, with the spellings above as its
    modules, functions and methods columns): ``op`` the shardwise op(s) it builds, as the
    table's first column spells it (markdown: ``"`conv2d`"``, ``"`pool2d` (max)"``), ``doc``
    the conditions column (markdown, never empty).  Consecutive entries with equal ``op`` and
    ``doc`` share one row (``nn.Conv2d`` and ``F.conv2d``)."""

    name: str
    convert: Callable[[Call], Any]
    inputs: int = 1
    params: tuple[tuple[str, Any], ...] = ()
    modules: tuple[str, ...] = ()
    functions: tuple[str, ...] = ()
    methods: tuple[str, ...] = ()
    variadic: bool = False
    fuses_relu: bool = False
    weight_arg: int | None = None
    call_params: tuple[tuple[str, Any], ...] = ()
    op: str = ""
    doc: str = ""


# ----------------------------------------------------------------------------- helpers
def _pair(c: Call, value: Any, what: str) -> tuple[int, int]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value, value)
    if isinstance(value, (tuple, list)) and len(value) == 1:
        return _pair(c, value[0], what)
    if (isinstance(value, (tuple, list)) and len(value) == 2
            and all(isinstance(v, int) and not isinstance(v, bool) for v in value)):
        return (int(value[0]), int(value[1]))
    raise c.error(f"{what}={value!r} is not supported (an int or a pair of ints)")


def _dim(c: Call, dim: Any, rank: int, what: str = "dim") -> int:
    if isinstance(dim, bool) or not isinstance(dim, int) or not -rank <= dim < rank:
        raise c.error(f"{what}={dim!r} is out of range for a rank-{rank} tensor")
    return dim % rank


def _dim_attr(c: Call, name: str, rank: int) -> int:
    """The dimension attribute ``name`` of the call (e.g. ``dim0``, ``start_dim``), checked and made
    non-negative for a rank-``rank`` tensor; the error names the attribute."""
    return _dim(c, c.attrs[name], rank, name)
