"""Learning-rate schedules: callables ``step -> lr`` that any optimizer's ``lr`` accepts.

    sched = sw.lr_schedules.cosine(3e-4, total_steps=10_000, min_lr=1e-5)
    sched = sw.lr_schedules.warmup(sched, steps=500)            # a linear ramp in front
    t = sw.Trainer(g, plan, optimizer=sw.AdamW(lr=sched, weight_decay=0.01))
    [sched(k) for k in range(3)]                                 # plain functions of the step

Step 0 is the first training step (``Trainer.steps`` before it), so a schedule gives the
value ``torch.optim.lr_scheduler`` gives after ``k`` calls of ``scheduler.step()``:

=====================================  ==================================================
here                                   PyTorch
=====================================  ==================================================
``step(lr, step_size, gamma)``         ``StepLR(opt, step_size, gamma)``
``cosine(lr, total_steps, min_lr)``    ``CosineAnnealingLR(opt, T_max=total_steps, eta_min=min_lr)``
                                       (held at ``min_lr`` after ``total_steps``, where
                                       PyTorch's cosine rises again)
``warmup(lr, steps, start_factor)``    ``LinearLR(opt, start_factor, total_iters=steps)``
``warmup(cosine(lr, T), steps, f)``    ``ChainedScheduler([LinearLR(opt, f, total_iters=steps),
                                       CosineAnnealingLR(opt, T)])``: the ramp multiplies
=====================================  ==================================================

Any callable of the step works as well (``lambda k: 0.1 * 0.5 ** (k // 30)``); the
trainer checks each value it gives (a finite number >= 0).  Schedules here are frozen
dataclasses: their repr names them exactly, and checkpoints record it.
"""
from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any, Callable, Union

from shardwise.errors import ConfigError

Schedule = Callable[[int], float]
"""A learning-rate schedule: the learning rate of training step k (0, 1, ...)."""

__all__ = ["Schedule", "StepDecay", "CosineDecay", "LinearWarmup", "step", "cosine", "warmup"]


def _rate(owner: str, name: str, value: Any) -> float:
    """A finite number >= 0 (a learning rate), as a float; ConfigError otherwise."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
        raise ConfigError(f"{owner}: {name} must be a finite number >= 0, got {value!r}")
    return float(value)


def _count(owner: str, name: str, value: Any) -> int:
    """A positive int (steps)."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ConfigError(f"{owner}: {name} must be a positive int, got {value!r}")
    return int(value)


def _step_index(step: Any) -> int:
    if isinstance(step, bool) or not isinstance(step, numbers.Integral) or step < 0:
        raise ConfigError(f"a schedule's step must be an int >= 0, got {step!r}")
    return int(step)


@dataclass(frozen=True)
class StepDecay:
    """lr * gamma ** (step // step_size): the rate drops by ``gamma`` every ``step_size`` steps."""

    lr: float
    step_size: int
    gamma: float = 0.1

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _rate("step schedule", "lr", self.lr))
        object.__setattr__(self, "step_size", _count("step schedule", "step_size", self.step_size))
        object.__setattr__(self, "gamma", _rate("step schedule", "gamma", self.gamma))

    def __call__(self, step: int) -> float:
        return self.lr * self.gamma ** (_step_index(step) // self.step_size)


@dataclass(frozen=True)
class CosineDecay:
    """Half a cosine from ``lr`` at step 0 to ``min_lr`` at ``total_steps``, then ``min_lr``:
    min_lr + (lr - min_lr) * (1 + cos(pi * step / total_steps)) / 2."""

    lr: float
    total_steps: int
    min_lr: float = 0.0

    def __post_init__(self) -> None:
        object.__setattr__(self, "lr", _rate("cosine schedule", "lr", self.lr))
        object.__setattr__(self, "total_steps", _count("cosine schedule", "total_steps", self.total_steps))
        object.__setattr__(self, "min_lr", _rate("cosine schedule", "min_lr", self.min_lr))
        if self.min_lr > self.lr:
            raise ConfigError(f"cosine schedule: min_lr {self.min_lr} is above lr {self.lr}")

    def __call__(self, step: int) -> float:
        k = min(_step_index(step), self.total_steps)
        return self.min_lr + (self.lr - self.min_lr) * (1.0 + math.cos(math.pi * k / self.total_steps)) / 2.0


@dataclass(frozen=True)
class LinearWarmup:
    """``schedule`` (a number or a schedule) times a factor rising linearly from
    ``start_factor`` at step 0 to 1 at ``steps``, then 1:
    schedule(step) * (start_factor + (1 - start_factor) * min(step, steps) / steps)."""

    schedule: Union[float, Schedule]
    steps: int
    start_factor: float = 1.0 / 3.0   # torch.optim.lr_scheduler.LinearLR's default

    def __post_init__(self) -> None:
        if not callable(self.schedule):
            object.__setattr__(self, "schedule", _rate("warm-up", "the learning rate", self.schedule))
        object.__setattr__(self, "steps", _count("warm-up", "steps", self.steps))
        f = self.start_factor
        if isinstance(f, bool) or not isinstance(f, numbers.Real) or not 0.0 <= f <= 1.0:
            raise ConfigError(f"warm-up: start_factor must be a number in [0, 1], got {f!r}")
        object.__setattr__(self, "start_factor", float(f))

    def __call__(self, step: int) -> float:
        k = _step_index(step)
        base = self.schedule(k) if callable(self.schedule) else self.schedule
        return base * (self.start_factor + (1.0 - self.start_factor) * min(k, self.steps) / self.steps)


def step(lr: float, step_size: int, gamma: float = 0.1) -> StepDecay:
    """``lr`` multiplied by ``gamma`` every ``step_size`` steps (torch's StepLR)."""
    return StepDecay(lr, step_size, gamma)


def cosine(lr: float, total_steps: int, min_lr: float = 0.0) -> CosineDecay:
    """Cosine annealing from ``lr`` to ``min_lr`` over ``total_steps`` (torch's CosineAnnealingLR
    with T_max=total_steps, eta_min=min_lr), then ``min_lr``."""
    return CosineDecay(lr, total_steps, min_lr)


def warmup(schedule: Union[float, Schedule], steps: int, start_factor: float = 1.0 / 3.0) -> LinearWarmup:
    """A linear warm-up over ``steps`` in front of ``schedule`` (a learning rate or a schedule):
    its value times a factor from ``start_factor`` to 1 (torch's LinearLR, chained)."""
    return LinearWarmup(schedule, steps, start_factor)
