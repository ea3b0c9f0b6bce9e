"""The model zoo: reference networks as shardwise graphs.

    import shardwise as sw
    g = sw.models.resnet50(batch=256)
    g = sw.models.get("vgg16", batch=512)
    sw.models.names()   # ['alexnet', 'inception_v3', 'lenet5', ...]

Every image builder takes ``batch`` (the minibatch N) and ``num_classes`` and returns
a :class:`~shardwise.graph.Graph` whose last op is the softmax over
(N, num_classes); the language models :func:`gpt` and :func:`llama` end with the
softmax over (N, T, vocab).  Layouts follow torchvision; parameter counts match
torchvision's exactly (dropout, which has no parameters, is omitted).
"""
from __future__ import annotations

from typing import Any, Callable

from shardwise.errors import GraphError
from shardwise.graph import Graph
from shardwise.models.alexnet import alexnet
from shardwise.models.inception import inception_v3
from shardwise.models.gpt import gpt, gpt_tiny, megatron_dp_spec, megatron_spec
from shardwise.models.lenet import lenet5
from shardwise.models.llama import llama, llama_ffn, llama_megatron_dp_spec, llama_tiny
from shardwise.models.rnn import rnn
from shardwise.models.resnet import resnet18, resnet34, resnet50, resnet101, resnet152, wide_resnet
from shardwise.models.small import alexnet_small, inception_small, resnet18_small, vgg_small
from shardwise.models.vgg import vgg16

ZOO: dict[str, Callable[..., Graph]] = {
    "lenet5": lenet5,
    "alexnet": alexnet,
    "vgg16": vgg16,
    "inception_v3": inception_v3,
    "resnet18": resnet18,
    "resnet34": resnet34,
    "resnet50": resnet50,
    "resnet101": resnet101,
    "resnet152": resnet152,
}
"""Model name -> builder function: the published networks."""

SMALL: dict[str, Callable[..., Graph]] = {
    "alexnet_small": alexnet_small,
    "vgg_small": vgg_small,
    "resnet18_small": resnet18_small,
    "inception_small": inception_small,
    "gpt_tiny": gpt_tiny,
    "llama_tiny": llama_tiny,
}
"""Scaled-down variants for training on CPU workers (not in :func:`names`)."""


LARGE: dict[str, Callable[..., Graph]] = {
    "wide_resnet": wide_resnet,
    "rnn": rnn,
    "gpt": gpt,
    "llama": llama,
}
"""The very large models of the Tofu paper (WResNet-<depth>-<width>, RNN-<layers>-<hidden>) and the
transformers (GPT, Llama; Llama-2-7B's sizes by default), built with their own size arguments; not in :func:`names` (the zoo tests search every zoo model)."""


def names() -> list[str]:
    """The names of the models in the zoo, sorted."""
    return sorted(ZOO)


def get(name: str, **kwargs: Any) -> Graph:
    """Build the zoo model ``name`` with the builder's keyword arguments (``batch``, ``num_classes``, ...).

    Raises :class:`~shardwise.errors.GraphError` naming the known models if
    ``name`` is not one of them.
    """
    try:
        builder = ZOO[name] if name in ZOO else SMALL[name] if name in SMALL else LARGE[name]
    except (KeyError, TypeError):
        known = ", ".join(names() + sorted(SMALL) + sorted(LARGE))
        raise GraphError(f"unknown model {name!r}; known models: {known}") from None
    return builder(**kwargs)


__all__ = ["ZOO", "names", "get", "lenet5", "alexnet", "vgg16", "inception_v3",
           "resnet18", "resnet34", "resnet50", "resnet101", "resnet152", "SMALL", "alexnet_small", "vgg_small",
           "resnet18_small", "inception_small", "wide_resnet", "LARGE", "rnn", "gpt", "gpt_tiny", "megatron_spec",
           "megatron_dp_spec", "llama", "llama_tiny", "llama_ffn", "llama_megatron_dp_spec"]
