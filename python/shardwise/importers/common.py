"""What the torch and ONNX importers share: scaffolding that is the same logic in both.

* :class:`Lazy`: a value of the import that is not (yet) one graph tensor;
* :func:`without_dead_ops` (:func:`live_ops`, :func:`prune`): the ops the loss does not read
  left out of the imported graph, and their weights with them;
* :func:`linear_layer`: ``y = x W^T + b`` on (N, in) or (N, T, in), checked;
* :func:`check_ceil_mode`: PyTorch's ceil_mode pooling accepted where it equals floor mode;
* :func:`unique_name`, :func:`check_weight_shapes`: op names no other op has, and the
  imported weights checked against the parameters the graph's ops declare;
* :func:`normalize_trailing`: a layer or RMS norm over the last k dimensions.

A converter here gets a call object of either importer (``torch.call.Call``, ``onnx.ops.OnnxCall``):
both have ``graph``, ``name``, ``where``, ``activation`` and ``error(message)``.  Nothing here
imports torch or onnx.
"""
from __future__ import annotations

from typing import Any, Sequence

from shardwise.errors import ModelImportError, ShapeError
from shardwise.graph import Graph, Tensor
from shardwise.train.init import parameter_shapes


class Lazy:
    """A value of the import that is not (yet) one graph tensor: attention scores waiting for
    their scale and causal mask to reach a softmax, an LSTM's output sequence kept as its
    steps (:mod:`shardwise.importers.torch.seq`, :mod:`shardwise.importers.onnx.seq`)."""

    folds_into: tuple[str, ...] = ()
    """ONNX op types that take the value as it is when they alone read it (the next step of a
    pattern: a group norm's reshape back, scale and bias, :mod:`shardwise.importers.onnx.groupnorm`);
    any other reader gets :meth:`tensor`."""

    shared: bool = False
    """True for a value that any number of readers may take as it is: its ``folds_into`` readers
    each derive a value of their own from it, and nothing is built until a reader needs a graph
    tensor (adaptive pooling's windows, :mod:`shardwise.importers.onnx.adaptive`: the exporter's
    ``masked_fill`` reads a value twice, by a ``CastLike`` of its 0 and by the ``Where``)."""

    def tensor(self, g: Graph, where: str, what: str) -> Tensor:
        """The value as one graph tensor (building ops if need be), or a ModelImportError."""
        raise NotImplementedError


def live_ops(g: Graph) -> set[int]:
    """Indices of the ops the loss (the last op) depends on."""
    live = {len(g.ops) - 1}
    for op in reversed(g.ops):
        if op.index in live:
            live.update(op.inputs)
    return live


def prune(g: Graph, live: set[int]) -> Graph:
    """A copy of ``g`` with only the ops in ``live``, same names and attributes.

    Rebuilding by replaying the builders (rather than importing again without the dead
    nodes) keeps one trace and one pass: a dead tensor may still be read by a live shape
    query (``dead.size(0)``), which a second pass without it could not answer."""
    out = Graph(g.name)
    new: dict[int, Tensor] = {}
    for op in g.ops:
        if op.index not in live:
            continue
        ins = [new[i] for i in op.inputs]
        if op.kind == "input":
            t = out.input(op.name, op.shape, dtype=op.attrs.get("dtype", "float32"))
        elif op.kind == "parameter":
            t = out.parameter(op.shape, name=op.name)
        elif op.kind == "concat":
            t = out.concat(ins, name=op.name, **op.attrs)
        elif op.kind == "embedding" and len(ins) == 2:   # the table a data input (tied weights)
            t = out.embedding(ins[0], table=ins[1], name=op.name)
        else:   # the builder's keyword arguments are the attributes it recorded
            t = getattr(out, op.kind)(*ins, name=op.name, **op.attrs)
        new[op.index] = t
    out.weight_names = {k: v for k, v in g.weight_names.items() if k.rsplit(".", 1)[0] in out}
    live_names = set(out.model_weights(dict.fromkeys(parameter_shapes(out))))
    out.weight_aliases = {k: v for k, v in g.weight_aliases.items() if v in live_names}
    return out


def without_dead_ops(g: Graph, weights: dict[str, Any]) -> tuple[Graph, dict[str, Any]]:
    """The imported graph and weights without the ops the loss does not depend on (an unused
    branch, a computed-but-ignored value), which would still be planned and computed every step;
    the weights under the model's own names where the graph records one (``Graph.weight_names``)."""
    live = live_ops(g)
    if len(live) < len(g.ops):
        g = prune(g, live)
        weights = {k: v for k, v in weights.items() if k.rsplit(".", 1)[0] in g}
    return g, g.model_weights(weights)


def unique_name(g: Graph, reserved: Any, base: str, owner: bool = False) -> str:
    """``base``, or ``base_1``, ``base_2``, ...: a name no op of ``g`` has; a name in ``reserved``
    (a module's or an initializer's, kept for the op that owns it) only for its ``owner``."""
    if base not in g and (owner or base not in reserved):
        return base
    k = 1
    while f"{base}_{k}" in g or f"{base}_{k}" in reserved:
        k += 1
    return f"{base}_{k}"


def check_weight_shapes(g: Graph, weights: dict[str, Any]) -> None:
    """The imported weights are exactly the parameters the graph's ops declare, shape for shape
    (a converter that recorded weights other than its op's is an internal error)."""
    want = parameter_shapes(g)
    got = {k: v.shape for k, v in weights.items()}
    if got != want:
        raise ModelImportError(f"internal error: imported weights {got} differ from the graph's {want}")


def linear_layer(c: Any, x: Tensor, weight_shape: Sequence[int], has_bias: bool, *, unsupported_rank: str,
                 weight_text: str = "", bias_shape: Sequence[int] | None = None) -> Tensor:
    """``y = x W^T + b`` with W (out, in) on ``x`` (N, in), (N, T, in) or (N, ..., in) (ConvNeXt's
    channels-last (N, H, W, C)): the checks and the
    linear op both importers build (the converter records the weights).  ``unsupported_rank``
    begins the message for another rank (``{rank}``, ``{shape}`` filled in); ``weight_text``
    comes before the weight's shape in the message for a feature count that does not match;
    ``bias_shape``, when given, must be (out,)."""
    if len(x.shape) < 2:
        raise c.error(unsupported_rank.format(rank=len(x.shape), shape=x.shape)
                      + " is not supported (it takes (N, features), (N, T, features) or (N, ..., features))")
    if x.shape[-1] != weight_shape[1]:
        raise ShapeError(f"{c.where}: the weight {weight_text}{tuple(weight_shape)} takes {weight_shape[1]} features "
                         f"but the input has shape {x.shape}")
    if bias_shape is not None and tuple(bias_shape) != (weight_shape[0],):
        raise ShapeError(f"{c.where}: bias of shape {tuple(bias_shape)} for {weight_shape[0]} output features")
    return c.graph.linear(x, int(weight_shape[0]), activation=c.activation, bias=has_bias, name=c.name)


def check_ceil_mode(c: Any, shape: tuple[int, ...], kernel: tuple[int, int], stride: tuple[int, int],
                    padding: tuple[int, int]) -> None:
    """ceil_mode=True is accepted where it gives the windows of floor mode (PyTorch's rule:
    a last window must start inside the input or its left padding)."""
    for size, k, s, p in zip(shape[2:], kernel, stride, padding):
        floor = (size + 2 * p - k) // s + 1
        ceil = -(-(size + 2 * p - k) // s) + 1
        if (ceil - 1) * s >= size + p:
            ceil -= 1
        if ceil != floor:
            raise c.error(f"ceil_mode=True adds a partial window on a {shape[2]}x{shape[3]} input "
                          f"(kernel {kernel}, stride {stride}, padding {padding}); it is not supported")


def normalize_trailing(c: Any, x: Tensor, dims: int, eps: float, rms: bool = False) -> Tensor:
    """A layer norm (or, ``rms``, an RMS norm) of ``x`` over its last ``dims`` dimensions, as
    ``torch.nn.LayerNorm(x.shape[-dims:])`` and ONNX's ``LayerNormalization(axis=-dims)``: over
    the last one the op itself (named ``c.name``); over several a ``reshape`` merging them into
    one (``<name>.merge``), the op on that, and a ``reshape`` back (``<name>.split``).  The
    caller records the weights flattened to ``(prod(x.shape[-dims:]),)``."""
    g = c.graph
    build = g.rms_norm if rms else g.layer_norm
    if not 1 <= dims < len(x.shape):
        raise c.error(f"a normalization over the last {dims} dimension(s) of an input {x.shape} is not supported "
                      f"(never the batch dimension)")
    if dims == 1:
        return build(x, eps=eps, name=c.name)
    lead = x.shape[:-dims]
    size = 1
    for d in x.shape[-dims:]:
        size *= d
    h = g.reshape(x, lead + (size,), name=f"{c.name}.merge")
    h = build(h, eps=eps, name=c.name)
    return g.reshape(h, x.shape, name=f"{c.name}.split")
