"""The ONNX ``LSTM`` node, imported as :func:`shardwise.from_torch` imports ``nn.LSTM``: unrolled
over the steps by :func:`~shardwise.importers.torch.seq.lstm_layer`, with its weights in PyTorch's
layout (:func:`~shardwise.importers.torch.seq.lstm_weights`), so an exported model imports as the
graph from_torch builds from it.

PyTorch's exporters write one ``LSTM`` node per layer of an ``nn.LSTM(batch_first=True)``::

    X = Transpose(x, perm=[1, 0, 2])                       (N, T, E) -> (T, N, E), layout 0
    Y, Y_h, Y_c = LSTM(X, W, R, B, '', initial_h, initial_c)
        W (1, 4H, E), R (1, 4H, H): gate blocks in ONNX's order i, o, f, c (PyTorch's: i, f, g, o)
        B (1, 8H): W's biases then R's; initial states zeros (computed constants)
        Y (T, 1, N, H); Y_h, Y_c (1, N, H)
    out = Transpose(Reshape(Transpose(Y, [0, 2, 1, 3])), [1, 0, 2])      back to (N, T, H)
    h_n = Concat(Y_h of each layer, axis=0); h_n[-1] = Gather(h_n, -1, axis=0)

The outputs are kept lazy until read, as from_torch keeps them (shapes: N samples, T steps, H
hidden units):

* ``Y`` is a :class:`~shardwise.importers.onnx.seq.View` of the layer's steps
  (:class:`~shardwise.importers.torch.seq.Steps`, (N, T, H)): the exporter's transposes and reshapes
  are followed as NumPy views; the next layer reads it (the sequence is built then), a
  ``Gather`` along T picks one step (no op), anything else builds the sequence;
* ``Y_h`` and ``Y_c`` are views of the last step's (N, H) states; a ``Concat`` of them over the
  layers is a :class:`~shardwise.importers.torch.seq.Layers`, from which a ``Gather`` picks one.

Nothing here imports onnx.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

import numpy as np

from shardwise.errors import ShapeError
from shardwise.graph import Tensor
from shardwise.importers.onnx.const import Const
from shardwise.importers.onnx.ops import LAZY_READERS, MULTI_OUTPUT, ONNX_OPS, OnnxCall, Outputs, _show
from shardwise.importers.onnx.seq import View, _view, resolve, same_layout
from shardwise.importers.common import Lazy
from shardwise.importers.torch.seq import GATES, Layers, Steps, lstm_layer, lstm_weights

ONNX_GATES = "iofg"
"""ONNX's LSTM gate order (input, output, forget, cell; the cell gate is PyTorch's g): the
blocks of H rows of W, R and each half of B."""

_DEFAULT_ACTIVATIONS = ["Sigmoid", "Tanh", "Tanh"]

MAX_STEPS = 10_000
"""The most steps an LSTM node is unrolled over (each step is a few ops of the graph)."""


@dataclass(eq=False)
class LayerSteps(Steps):
    """One layer's steps: named ``<p>.out`` when the model reads them (the last layer's, as
    from_torch names them), ``<p>.l<l>.out`` when the next layer does."""

    layer_name: str = ""


@dataclass(eq=False)
class StateLayers(Layers):
    """An LSTM's final states over its layers, concatenated along ``axis`` (0 for layout 0,
    1 for layout 1)."""

    axis: int = 0


def torch_order(w: np.ndarray, hid: int) -> np.ndarray:
    """(4H, ...) gate blocks in ONNX's order i, o, f, c -> PyTorch's i, f, g, o."""
    blocks = {k: w[q * hid:(q + 1) * hid] for q, k in enumerate(ONNX_GATES)}
    return np.concatenate([blocks[k] for k in GATES])


def _weight(c: OnnxCall, index: int, what: str, shape: tuple[int, ...]) -> Const:
    v = c.inputs[index] if index < len(c.inputs) else None
    if not isinstance(v, Const) or v.value.dtype.kind != "f":
        raise c.error(f"expects a constant float tensor (an initializer, or computed from initializers) as {what}, "
                      f"got {_show(v)} (computed weights are not supported)")
    if tuple(v.value.shape) != shape:
        raise ShapeError(f"{c.where}: {what} has shape {tuple(v.value.shape)}, expected {shape}")
    return v


def _zero_state(c: OnnxCall, index: int, what: str, shape: tuple[int, ...]) -> None:
    v = c.inputs[index] if index < len(c.inputs) else None
    if v is None:
        return
    if not isinstance(v, Const):
        raise c.error(f"{what} {_show(v)} is not supported; only zero initial states (absent, or constant zeros)")
    if tuple(v.value.shape) != shape:   # PyTorch's dynamo exporter writes proj_size so: a wider initial_c
        raise c.error(f"{what} has shape {tuple(v.value.shape)}, expected {shape} (N samples, the hidden size of R); "
                      f"an LSTM with projections (PyTorch's proj_size) is not supported")
    if np.any(v.value != 0):
        raise c.error(f"a nonzero {what} is not supported; only zero initial states (absent, or constant zeros)")


def _check_attrs(c: OnnxCall) -> int:
    """Refuse what the unrolled LSTM does not compute; the layout (0 or 1)."""
    a = c.attrs
    if a.get_str("direction", "forward") != "forward":
        raise c.error(f"direction={a['direction']!r} is not supported (a one-way LSTM, 'forward'; bidirectional and "
                      f"reverse LSTMs are refused)")
    for key in ("clip", "activation_alpha", "activation_beta"):
        if key in a:
            raise c.error(f"{key}={a[key]!r} is not supported (an LSTM without cell clipping, with sigmoid and tanh)")
    if a.get_strs("activations", _DEFAULT_ACTIVATIONS) != _DEFAULT_ACTIVATIONS:
        raise c.error(f"activations={list(a['activations'])} is not supported (only {_DEFAULT_ACTIVATIONS}, "
                      f"PyTorch's)")
    if a.get_int("input_forget", 0):
        raise c.error("input_forget=1 (coupled input and forget gates) is not supported")
    layout = a.get_int("layout", 0)
    if layout not in (0, 1):
        raise c.error(f"layout={layout!r} is not supported (0 or 1)")
    return int(layout)


def _input(c: OnnxCall, layout: int) -> Tensor:
    """X as the batch-first (N, T, E) tensor it is a view of."""
    x = c.inputs[0]
    if layout == 0:
        ok = isinstance(x, View) and x.origin.ndim == 3 and same_layout(x.arr, x.origin.transpose(1, 0, 2))
        if not ok:
            raise c.error(f"its input X, {_show(x)}, is not supported: with layout=0, X (T, N, input) must be the "
                          f"transpose of a batch-first (N, T, input) tensor (an nn.LSTM with batch_first=True); a time-major "
                          f"LSTM (batch_first=False) reading the model's input is not supported")
        x = x.base
    if isinstance(x, LayerSteps) and x.built is None:   # the previous layer's steps, read by this layer
        x.name = x.layer_name
    if isinstance(x, Lazy):
        x = x.tensor(c.graph, c.where, "its input X")
    c.inputs[0] = x
    return c.tensor(0, rank=3)


def _lstm(c: OnnxCall) -> Outputs:
    """LSTM(X, W, R, B, sequence_lens, initial_h, initial_c, P): one forward layer from zero
    states, unrolled as from_torch unrolls nn.LSTM; its ops are named ``<p>.l<l>....`` with ``p``
    the module's path (the node's name in models without one) and ``l`` the count of LSTM
    nodes of that prefix before it.  Returns the lazy (Y, Y_h, Y_c)."""
    layout = _check_attrs(c)
    for index, what in ((4, "sequence_lens (sequences of different lengths)"), (7, "P (peephole weights)")):
        if index < len(c.inputs) and c.inputs[index] is not None:
            raise c.error(f"input {index}, {what}, is not supported")
    x = _input(c, layout)
    n, steps, e = x.shape
    if steps > MAX_STEPS:
        raise c.error(f"an LSTM over {steps} steps is not supported (it is unrolled: at most {MAX_STEPS:,} steps)")
    r = c.inputs[2] if len(c.inputs) > 2 else None
    hidden_size = c.attrs.get_int("hidden_size", None, lo=1)
    hid = int(r.value.shape[-1]) if isinstance(r, Const) and r.value.ndim == 3 else (hidden_size or 0)
    if isinstance(r, Const) and r.value.ndim == 3 and r.value.shape[1] != 4 * hid:
        # PyTorch's dynamo exporter writes an nn.LSTM with proj_size so: R (1, 4 hidden, proj), no projection
        raise c.error(f"its R has shape {tuple(r.value.shape)}, not (1, 4 hidden, hidden): an LSTM with projections "
                      f"(PyTorch's proj_size) is not supported")
    if hidden_size is not None and hidden_size != hid:
        raise ShapeError(f"{c.where}: hidden_size={c.attrs['hidden_size']} but R has shape {_show(r)}")
    w = _weight(c, 1, "W", (1, 4 * hid, e))
    r = _weight(c, 2, "R", (1, 4 * hid, hid))
    b = _weight(c, 3, "B", (1, 8 * hid)) if len(c.inputs) > 3 and c.inputs[3] is not None else None
    state = (1, n, hid) if layout == 0 else (n, 1, hid)
    _zero_state(c, 5, "initial_h", state)
    _zero_state(c, 6, "initial_c", state)

    g, p = c.graph, c.name
    layer = 0
    while f"{p}.l{layer}.i.ih" in g:   # one node per layer: the layers before this one are built
        layer += 1
    first = f"{p}.l{layer}.i.ih"
    for what, const in (("W", w), ("R", r), ("B", b)):   # an initializer read by two LSTM nodes: tied weights
        if const is not None and const.source is not None:
            owner = c.owners.get(const.source)
            if owner is not None:
                raise c.error(f"its {what} is the initializer {const.source!r}, which is also the {owner[1]} of op "
                              f"{owner[0]!r}; shared (tied) weights are not supported")
            c.owners[const.source] = (first, what)
    out, cell = lstm_layer(g, x, p, layer, hid, b is not None)
    biases = [None, None] if b is None else [torch_order(half, hid) for half in (b.value[0, :4 * hid],
                                                                               b.value[0, 4 * hid:])]
    c.weights.update(lstm_weights(p, layer, hid, torch_order(w.value[0], hid), torch_order(r.value[0], hid),
                                  *biases))

    seq = np.empty((n, steps, hid), dtype=np.int8)
    y = View(LayerSteps(out, f"{p}.out", layer_name=f"{p}.l{layer}.out"), seq,
             seq.transpose(1, 0, 2)[:, None] if layout == 0 else seq[:, :, None], c.where)
    states = []
    for t in (out[-1], cell):
        o = np.empty((n, hid), dtype=np.int8)
        states.append(View(t, o, o[None] if layout == 0 else o[:, None], c.where))
    return Outputs((y, *states))


def _index(c: OnnxCall) -> tuple[int, int] | None:
    """(axis, index) of a Gather by a constant scalar index, else None."""
    idx = c.inputs[1] if len(c.inputs) > 1 else None
    if isinstance(idx, Const) and idx.value.ndim == 0 and idx.value.dtype.kind in "iu":
        return c.attrs.get_int("axis", 0), int(idx.value)
    return None


def _gather(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Gather by a constant scalar index (PyTorch's ``x[:, t]``, ``h_n[-1]``): a layer of an
    LSTM's states or a step of its output (no op), an index of a view, a ``select`` op of a
    tensor along a dimension after the batch; a table's rows as before."""
    def convert(c: OnnxCall) -> Any:
        x, picked = c.inputs[0], _index(c)
        if isinstance(x, Const) or picked is None:
            return previous(c)
        axis, i = picked
        if not isinstance(x, (Layers, Steps, View, Tensor)):
            return previous(c)
        if isinstance(x, Layers):
            layer_axis = x.axis if isinstance(x, StateLayers) else 0
            if axis != layer_axis or not -len(x.layers) <= i < len(x.layers):
                raise c.error(f"Gather(axis={axis}) of {x!r} by {i} is not supported (one layer: axis {layer_axis})")
            return x.layers[i]
        rank = len(x.shape)
        if not -rank <= axis < rank or not -x.shape[axis] <= i < x.shape[axis]:
            raise c.error(f"Gather(axis={axis}) by the index {i} is out of range for {_show(x)}")
        axis %= rank
        if isinstance(x, Steps) and axis == 1:
            return x.steps[i]
        if isinstance(x, View):
            return _view(c, x, lambda a: a[(slice(None),) * axis + (i,)], "indexing")
        if isinstance(x, Tensor) and axis > 0:
            return c.graph.select(c.tensor(0), axis, i % x.shape[axis], name=c.name)
        raise c.error(f"Gather(axis={axis}) of {_show(x)} by the index {i} is not supported (one index of a "
                      f"dimension after the batch)")
    return convert


def _concat(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Concat of LSTM states (1, N, H) over axis 0 ((N, 1, H) over axis 1 for layout 1): the
    states of the layers (h_n), kept as their (N, H) tensors; anything else as before."""
    def convert(c: OnnxCall) -> Any:
        if not any(isinstance(v, View) for v in c.inputs):
            return previous(c)
        axis = c.attrs.get_int("axis", 0)
        layers = []
        for v in c.inputs:
            one = None
            if isinstance(v, View) and v.arr.ndim == 3 and -3 <= axis < 3 and v.arr.shape[axis] == 1:
                one = resolve(View(v.base, v.origin, v.arr[(slice(None),) * (axis % 3) + (0,)], v.where))
            if not isinstance(one, Tensor):
                raise c.error(f"Concat(axis={axis}) of {_show(v)} is not supported (views of a tensor are "
                              f"concatenated only as an LSTM's final states over its layers)")
            layers.append(one)
        return StateLayers(layers, c.name, axis=axis % 3)
    return convert


def _squeeze(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Squeeze of a view (the TorchScript exporter drops Y's direction axis): the view without
    the axis; anything else as before."""
    def convert(c: OnnxCall) -> Any:
        x = c.inputs[0]
        if not isinstance(x, View):
            return previous(c)
        axes = c.axes("axes", 1, len(x.shape))
        drop = tuple(d for d, s in enumerate(x.shape) if s == 1) if axes is None else tuple(sorted(set(axes)))
        if any(x.shape[d] != 1 for d in drop):
            raise c.error(f"cannot squeeze the axes {list(drop)} of shape {x.shape} (of size other than 1)")
        return _view(c, x, lambda a: np.squeeze(a, axis=drop), "squeezing")
    return convert


def _identity(previous: Callable[[OnnxCall], Any]) -> Callable[[OnnxCall], Any]:
    """Identity of a lazy value (an LSTM's steps, a view of them, its states over the layers):
    the value itself, still lazy; anything else as before."""
    def convert(c: OnnxCall) -> Any:
        x = c.inputs[0]
        return x if isinstance(x, (Lazy, View, Layers)) else previous(c)
    return convert


def register() -> None:
    """Add LSTM to :data:`~shardwise.importers.onnx.ops.ONNX_OPS` (wrapping Gather, Concat,
    Squeeze and Identity, which keep their other uses)."""
    if "LSTM" in ONNX_OPS:
        return
    ONNX_OPS.update({
        "LSTM": _lstm,
        "Gather": _gather(ONNX_OPS["Gather"]),
        "Concat": _concat(ONNX_OPS["Concat"]),
        "Squeeze": _squeeze(ONNX_OPS["Squeeze"]),
        "Identity": _identity(ONNX_OPS["Identity"]),
    })
    MULTI_OUTPUT.add("LSTM")
    LAZY_READERS.update(("Gather", "LSTM", "Identity"))


register()
