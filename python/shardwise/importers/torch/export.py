"""``sw.from_torch(model, example_inputs, method="export")``: a model imported through
``torch.export`` (the ATen graph PyTorch's exporter records) instead of ``torch.fx``.

torch.fx traces ``forward`` on proxies, which fails on models with Python control flow
(Hugging Face transformers: masks built by ``if`` on shapes and configs, output classes).
``torch.export`` runs ``forward`` on fake tensors instead and records the ATen ops it reaches,
so that control flow is resolved for the example's shapes.  This module maps those ATen ops
to the same graph builder calls the fx importer makes:

* values computed from constants only (``arange`` position ids, causal masks built from them,
  rotary tables) are computed here with torch, never become ops, and are accepted only where
  a pattern gives them a meaning (:mod:`shardwise.importers.torch.export_ops`);
* weights keep their ``state_dict`` names; a parameter is owned by one op (a linear, an
  embedding, a norm) or read as data through one ``parameter`` op, never both; one read by
  several ops (tied weights: an embedding table and an output layer) is a ``parameter`` op they
  all read, under its first name (the others: ``Graph.weight_aliases``), and it is refused where
  a reader owns its weights (a norm, a ``Conv1D``);
* the model's output is the first tensor it returns (a Hugging Face model's ``logits``); the
  loss ``softmax`` is appended as ``from_torch`` does.
"""
from __future__ import annotations

import inspect
import os
from typing import Any

import numpy as np

from shardwise.errors import ModelImportError
from shardwise.graph import Graph
from shardwise.importers.common import check_weight_shapes, without_dead_ops

__all__ = ["from_torch_export"]


def from_torch_export(torch: Any, model: Any, shapes: list[tuple[tuple[int, ...], str]], example_inputs: tuple,
                      name: str) -> tuple[Graph, dict[str, np.ndarray]]:
    """The graph and weights of ``model`` exported with ``torch.export`` at ``example_inputs``."""
    from shardwise.importers.torch.export_ops import ExportImporter

    names = _argument_names(model, len(example_inputs))
    if "attention_mask" in names:
        raise ModelImportError("input 'attention_mask': a mask given as an input is not supported (the masks "
                               "computed from it would depend on the input); call without it: a Hugging Face "
                               "model then attends to every position, as with a mask of all ones")
    wrapper = _first_output_module(torch, model)
    try:
        # not under no_grad: a failing export then prints its partial graph
        program = torch.export.export(wrapper, tuple(example_inputs), strict=False)
    except Exception as exc:   # whatever forward raises under export
        raise ModelImportError(f"torch.export could not export {type(model).__name__}.forward "
                               f"({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})") from exc
    importer = ExportImporter(torch, model, program, name, _aliases(model), os.path.dirname(torch.__file__))
    g = importer.run(shapes, names)
    weights = importer.weights()
    check_weight_shapes(g, weights)
    return without_dead_ops(g, weights)


def _argument_names(model: Any, count: int) -> list[str]:
    """The names of ``forward``'s first ``count`` arguments (the graph's input ops)."""
    try:
        params = [p for p in inspect.signature(model.forward).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    names = [p.name for p in params[:count]]
    return names + [f"input_{k}" for k in range(len(names), count)]


def _first_output_module(torch: Any, model: Any) -> Any:
    """``model`` wrapped so that it returns one tensor: a Hugging Face model's ``logits`` (called
    with ``use_cache=False`` where its forward takes it: a key-value cache is no output of
    training), else the first element of a returned tuple."""
    try:
        params = inspect.signature(model.forward).parameters
    except (TypeError, ValueError):
        params = {}
    extra = {"use_cache": False} if "use_cache" in params else {}

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner: Any) -> None:
            super().__init__()
            self.model = inner

        def forward(self, *xs: Any) -> Any:
            out = self.model(*xs, **extra)
            if hasattr(out, "logits"):
                return out.logits
            if isinstance(out, (tuple, list)):
                return out[0]
            return out

    return FirstOutput(model)


def _aliases(model: Any) -> dict[str, list[str]]:
    """Every state_dict name of each parameter held under several names (tied weights)."""
    names: dict[int, list[str]] = {}
    for n, p in model.named_parameters(remove_duplicate=False):
        names.setdefault(id(p), []).append(n)
    return {n: group for group in names.values() if len(group) > 1 for n in group}


