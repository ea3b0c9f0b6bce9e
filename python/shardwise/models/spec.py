"""What ``--model`` names on the command line: a zoo model, an ONNX file, or ``module:function``.

    load_model("vgg16", batch=64)              # the zoo (sw.models)
    load_model("path/to/model.onnx")           # sw.from_onnx
    load_model("mynets:small_resnet")          # mynets.small_resnet() -> Graph or (graph, weights)

:func:`listing` is what ``python -m shardwise models`` prints: every zoo name :func:`load_model`
accepts and the two other forms, from the same :func:`zoo_names`, so the list and what is
accepted cannot differ.  Every failure is a :class:`~shardwise.errors.ShardwiseError` whose
message says what was tried and what went wrong, for the command line's one ``error:`` line.
"""
from __future__ import annotations

import importlib
import inspect
import os
import sys
import traceback
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from shardwise import models
from shardwise.errors import ModelImportError, ShardwiseError
from shardwise.graph import Graph

__all__ = ["LoadedModel", "FORMS", "zoo_names", "load_model", "listing"]

FORMS = (
    ("PATH.onnx", "an ONNX file, imported with sw.from_onnx (--batch sets a symbolic batch dimension)"),
    ("module:function", "function() of an importable Python module (the current directory first), returning a "
                        "shardwise Graph or (graph, weights); called with batch=N when --batch N is given"),
)
"""The forms of ``--model`` beside the zoo's names, with what they mean."""


@dataclass
class LoadedModel:
    """A model named by ``--model``: its graph, its weights when the source has them (an ONNX
    file, a function returning ``(graph, weights)``), and warnings raised while loading it."""

    graph: Graph
    weights: dict[str, np.ndarray] | None = None
    notes: list[str] = field(default_factory=list)


def zoo_names() -> dict[str, list[str]]:
    """The zoo names ``--model`` accepts, by group: the published networks, their scaled-down
    variants (for training on CPU workers) and the very large models of the Tofu experiments."""
    return {"zoo": models.names(), "scaled-down": sorted(models.SMALL), "large": sorted(models.LARGE)}


def _all_zoo_names() -> list[str]:
    return [n for names in zoo_names().values() for n in names]


def is_onnx_file(spec: str) -> bool:
    return spec.strip().lower().endswith(".onnx")


def load_model(spec: str, batch: int | None = None) -> LoadedModel:
    """The model ``spec`` names (one of the forms above), at minibatch ``batch`` (None: the model's own)."""
    spec = spec.strip()
    if is_onnx_file(spec):
        return _load_onnx(spec, batch)
    if ":" in spec:
        return _load_function(spec, batch)
    if spec not in _all_zoo_names():
        if os.path.isfile(spec):
            raise ShardwiseError(f"unknown model {spec!r}: the file is not named *.onnx (an ONNX file must be)")
        raise ShardwiseError(f"unknown model {spec!r}; known models: {', '.join(_all_zoo_names())}; or the path of an "
                             f".onnx file, or module:function (python -m shardwise models lists them)")
    return LoadedModel(models.get(spec, **({} if batch is None else {"batch": batch})))


def _load_onnx(path: str, batch: int | None) -> LoadedModel:
    from shardwise.importers.onnx.convert import from_onnx

    if not os.path.isfile(path):
        raise ShardwiseError(f"cannot read the ONNX file {path!r}: "
                             f"{'it is a folder' if os.path.isdir(path) else 'no such file'}")
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            graph, weights = from_onnx(path, batch=batch)
    except ImportError as exc:
        raise ShardwiseError(f"reading {path!r} needs the onnx package: {exc}") from None
    except ModelImportError as exc:
        raise ModelImportError(f"{path}: {exc}") from None
    return LoadedModel(graph, weights, [str(w.message) for w in caught])


def _innermost_user_frame(exc: BaseException) -> str:
    """``file.py:12`` of the last frame of ``exc``'s traceback outside shardwise, for messages."""
    here = os.path.dirname(os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not os.path.abspath(f.filename).startswith(here)]
    return f" (at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno})" if frames else ""


def _import_module(name: str) -> Any:
    # `python -m shardwise` puts the current directory on sys.path, the `shardwise` console
    # script does not: search it first in both, so `--model mynets:f` finds ./mynets.py
    cwd = os.getcwd()
    added = cwd not in sys.path
    if added:
        sys.path.insert(0, cwd)
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name is not None and (name == exc.name or name.startswith(exc.name + ".")):
            raise ShardwiseError(f"cannot import the module {name!r}: no module named {exc.name!r} in the current "
                                 f"directory or on sys.path") from None
        raise ShardwiseError(f"importing the module {name!r} failed: {type(exc).__name__}: {exc}"
                             f"{_innermost_user_frame(exc)}") from None
    except Exception as exc:   # whatever the module's own code raises while it is imported
        raise ShardwiseError(f"importing the module {name!r} failed: {type(exc).__name__}: {exc}"
                             f"{_innermost_user_frame(exc)}") from None
    finally:
        if added and cwd in sys.path:
            sys.path.remove(cwd)


def _load_function(spec: str, batch: int | None) -> LoadedModel:
    module_name, _, attr = spec.rpartition(":")
    if not all(p.isidentifier() for p in module_name.split(".")) or not all(p.isidentifier()
                                                                            for p in attr.split(".")):
        raise ShardwiseError(f"--model {spec!r} is not module:function (a dotted module name, a colon, a function "
                             f"name), a zoo model or an .onnx file")
    fn: Any = _import_module(module_name)
    for part in attr.split("."):
        if not hasattr(fn, part):
            where = getattr(sys.modules.get(module_name), "__file__", None) or module_name
            raise ShardwiseError(f"the module {module_name!r} ({where}) has no attribute {attr!r}")
        fn = getattr(fn, part)
    if not callable(fn):
        raise ShardwiseError(f"{spec} is a {type(fn).__name__}, not a function returning a Graph")
    kwargs = {} if batch is None else {"batch": batch}
    _check_signature(spec, fn, kwargs)
    try:
        result = fn(**kwargs)
    except Exception as exc:   # the user's code: report it as one line, with where it was raised
        raise ShardwiseError(f"{spec}({', '.join(f'{k}={v}' for k, v in kwargs.items())}) raised "
                             f"{type(exc).__name__}: {exc}{_innermost_user_frame(exc)}") from None
    graph, weights = _graph_and_weights(spec, result)
    if batch is not None:
        batches = {op.name: op.shape[0] for op in graph.ops if op.kind == "input"}
        if any(n != batch for n in batches.values()):
            raise ShardwiseError(f"{spec}(batch={batch}) returned a graph whose inputs have the batch sizes "
                                 f"{batches}, not {batch}")
    return LoadedModel(graph, weights)


def _check_signature(spec: str, fn: Callable[..., Any], kwargs: dict[str, Any]) -> None:
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):   # a builtin without a signature: let the call decide
        return
    try:
        sig.bind(**kwargs)
    except TypeError as exc:
        need = "a batch parameter, or leave out --batch" if kwargs else "no required arguments"
        raise ShardwiseError(f"{spec} cannot be called as {spec.rpartition(':')[2]}"
                             f"({', '.join(f'{k}={v}' for k, v in kwargs.items())}): {exc}; it needs {need}") from None


def _graph_and_weights(spec: str, result: Any) -> tuple[Graph, dict[str, np.ndarray] | None]:
    if isinstance(result, Graph):
        return result, None
    if isinstance(result, (tuple, list)) and len(result) == 2 and isinstance(result[0], Graph):
        weights = result[1]
        if weights is None:
            return result[0], None
        if not isinstance(weights, dict) or not all(isinstance(k, str) for k in weights):
            raise ShardwiseError(f"{spec} returned (graph, {type(weights).__name__}); the weights must be a dict "
                                 f"of name -> array (as sw.from_torch returns)")
        return result[0], weights
    what = (f"a {len(result)}-tuple" if isinstance(result, tuple) else type(result).__name__)
    raise ShardwiseError(f"{spec} returned {what}; it must return a shardwise Graph or (graph, weights)")


def listing() -> str:
    """The text of ``python -m shardwise models``: every zoo name with its size, then the other forms."""
    head = f"{'model':<16} {'parameters':>13} {'ops':>5} {'batch':>6}  {'input':<20} {'GFLOP fwd':>10}"
    lines = [head, "-" * len(head)]
    for group, names in zoo_names().items():
        if group != "zoo":
            lines.append(f"{group}:")
        for name in names:
            g = models.get(name)
            inp = g.ops[0].shape
            lines.append(f"{name:<16} {g.num_parameters():>13,} {len(g):>5} {inp[0]:>6}  "
                         f"{str(tuple(inp[1:])):<20} {g.flops() / 1e9:>10.1f}")
    lines.append("")
    lines.append("--model also takes:")
    lines += [f"  {form:<16} {meaning}" for form, meaning in FORMS]
    return "\n".join(lines) + "\n"
