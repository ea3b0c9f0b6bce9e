"""Optimizers of a :class:`~shardwise.train.trainer.Trainer`: SGD, Adam and AdamW as in ``torch.optim``.

    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4))
    t = sw.Trainer(g, plan, optimizer=sw.Adam(lr=1e-3, betas=(0.9, 0.999), eps=1e-8))
    t = sw.Trainer(g, plan, optimizer=sw.AdamW(lr=3e-4, weight_decay=0.01))
    t = sw.Trainer(g, plan, optimizer=sw.AdamW(lr=sw.lr_schedules.cosine(3e-4, total_steps=1000)))

An optimizer here is a frozen description: its numbers travel to the C runtime with
every step (csrc/cpu/optim.c applies them to each parameter slice), and its state
(SGD's momentum, Adam's first and second moments and step count) lives in the
runtime's arenas, sharded like the weights, and in checkpoints.  ``lr`` is a float or
a callable ``step -> lr`` (:mod:`shardwise.train.lr_schedules`): step 0 is the first
training step, and the value enters the update as a runtime value, so a schedule
never rebuilds the task graph.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, fields
from typing import Any, Callable, ClassVar, Union

import numpy as np

from shardwise.errors import ConfigError

LearningRate = Union[float, Callable[[int], float]]
"""A learning rate: a number >= 0, or a callable from the step (0, 1, ...) to one."""

# the runtime's optimizer kinds (sw_optim_kind in csrc/exec/runtime.h)
_KIND_SGD, _KIND_ADAM, _KIND_ADAMW = 0, 1, 2


def _number(value: Any) -> bool:
    """A finite real number (NumPy's scalars included), not a bool."""
    return (not isinstance(value, (bool, np.bool_)) and isinstance(value, numbers.Real)
            and math.isfinite(value))


def _check_lr(owner: str, lr: Any) -> LearningRate:
    """``lr`` as a float, or the callable itself."""
    if callable(lr):
        return lr
    if not _number(lr) or lr < 0:
        raise ConfigError(f"{owner} lr must be a finite number >= 0 or a callable step -> lr "
                          f"(shardwise.train.lr_schedules), got {lr!r}")
    return float(lr)


def _lr_meta(lr: LearningRate) -> float | str:
    """What a checkpoint records of a learning rate: the number, or the schedule's repr."""
    return float(lr) if not callable(lr) else repr(lr)[:1000]


class Optimizer:
    """What every optimizer gives the trainer: its name, its state buffers per parameter
    slice, the learning rate of a step and the values the runtime's update takes."""

    name: ClassVar[str]           # "sgd", "adam", "adamw": checkpoints name it
    state_buffers: ClassVar[int]  # float32 buffers of state per parameter slice (the weight's shape)
    lr: LearningRate

    def lr_at(self, step: int) -> float:
        """The learning rate of training step ``step`` (0: the first): ``lr`` itself, or the
        schedule's value, checked (a finite number >= 0) so a bad schedule stops training
        before any weight changes."""
        if not callable(self.lr):
            return float(self.lr)
        value = self.lr(step)
        if not _number(value) or value < 0:
            raise ConfigError(f"the learning-rate schedule {self.lr!r} gave {value!r} at step {step}; "
                              "it must give finite numbers >= 0")
        return float(value)

    def runtime_args(self, step: int) -> tuple:
        """(kind, lr, weight_decay, momentum, dampening, nesterov, beta1, beta2, eps) for the
        runtime's step (csrc/py/runtime_py.c); unused values are 0."""
        raise NotImplementedError

    def to_meta(self) -> dict[str, Any]:
        """The optimizer as a checkpoint records it (JSON): its name and settings."""
        out: dict[str, Any] = {"name": self.name}
        for f in fields(self):   # type: ignore[arg-type]
            v = getattr(self, f.name)
            out[f.name] = _lr_meta(v) if f.name == "lr" else list(v) if isinstance(v, tuple) else v
        return out


@dataclass(frozen=True)
class SGD(Optimizer):
    """Stochastic gradient descent with momentum and weight decay, exactly as torch.optim.SGD:
    g = grad + weight_decay p; buf = g (first step) or momentum buf + (1 - dampening) g;
    g = g + momentum buf (Nesterov) or buf; p -= lr g."""

    name: ClassVar[str] = "sgd"
    state_buffers: ClassVar[int] = 1   # the momentum buffer

    lr: LearningRate = 0.01
    momentum: float = 0.0
    weight_decay: float = 0.0
    dampening: float = 0.0
    nesterov: bool = False

    def __post_init__(self) -> None:
        # frozen: settings are normalized (plain floats, JSON-ready) with object.__setattr__
        object.__setattr__(self, "lr", _check_lr("SGD", self.lr))
        for name in ("momentum", "weight_decay", "dampening"):
            v = getattr(self, name)
            if not _number(v) or v < 0:
                raise ConfigError(f"SGD {name} must be a finite number >= 0, got {v!r}")
            object.__setattr__(self, name, float(v))
        if not isinstance(self.nesterov, bool):
            raise ConfigError(f"SGD nesterov must be True or False, got {self.nesterov!r}")
        if self.nesterov and (self.momentum <= 0 or self.dampening != 0):
            raise ConfigError("Nesterov momentum needs momentum > 0 and dampening 0")

    def runtime_args(self, step: int) -> tuple:
        return (_KIND_SGD, self.lr_at(step), self.weight_decay, self.momentum, self.dampening, self.nesterov,
                0.0, 0.0, 0.0)


@dataclass(frozen=True)
class Adam(Optimizer):
    """Adam as torch.optim.Adam (Kingma and Ba), weight decay as an L2 term added to the gradient.

    At step t (1, 2, ... per parameter, kept in the optimizer state):
        g = grad + weight_decay p
        m = beta1 m + (1 - beta1) g;      v = beta2 v + (1 - beta2) g^2
        p -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
    ``amsgrad`` is not supported (ConfigError)."""

    name: ClassVar[str] = "adam"
    state_buffers: ClassVar[int] = 2   # exp_avg (m), exp_avg_sq (v)
    _kind: ClassVar[int] = _KIND_ADAM

    lr: LearningRate = 1e-3
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = 1e-8
    weight_decay: float = 0.0
    amsgrad: bool = False

    def __post_init__(self) -> None:
        who = type(self).__name__
        object.__setattr__(self, "lr", _check_lr(who, self.lr))
        betas = self.betas
        if not isinstance(betas, (tuple, list)) or len(betas) != 2:
            raise ConfigError(f"{who} betas must be a pair (beta1, beta2), got {betas!r}")
        for k, b in enumerate(betas):
            if not _number(b) or not 0.0 <= b < 1.0:
                raise ConfigError(f"{who} betas[{k}] must lie in [0, 1), got {b!r}")
        object.__setattr__(self, "betas", (float(betas[0]), float(betas[1])))   # hashable, JSON as a list
        if not _number(self.eps) or self.eps <= 0:
            raise ConfigError(f"{who} eps must be a finite number > 0, got {self.eps!r}")
        if not _number(self.weight_decay) or self.weight_decay < 0:
            raise ConfigError(f"{who} weight_decay must be a finite number >= 0, got {self.weight_decay!r}")
        object.__setattr__(self, "eps", float(self.eps))
        object.__setattr__(self, "weight_decay", float(self.weight_decay))
        if not isinstance(self.amsgrad, bool):
            raise ConfigError(f"{who} amsgrad must be True or False, got {self.amsgrad!r}")
        if self.amsgrad:
            raise ConfigError(f"{who}(amsgrad=True) is not supported: shardwise keeps no maximum of the second "
                              "moments; use amsgrad=False")

    def runtime_args(self, step: int) -> tuple:
        return (self._kind, self.lr_at(step), self.weight_decay, 0.0, 0.0, False, self.betas[0], self.betas[1],
                self.eps)


@dataclass(frozen=True)
class AdamW(Adam):
    """AdamW as torch.optim.AdamW (Loshchilov and Hutter): Adam with decoupled weight decay,
    p *= 1 - lr weight_decay before the moments' update (the gradient is left alone);
    weight_decay defaults to 0.01, as PyTorch's."""

    name: ClassVar[str] = "adamw"
    _kind: ClassVar[int] = _KIND_ADAMW

    weight_decay: float = 1e-2


OPTIMIZERS: dict[str, type[Optimizer]] = {cls.name: cls for cls in (SGD, Adam, AdamW)}
"""Optimizers by the name checkpoints record."""
