"""Planned memory: one arena per device, every buffer of an iteration at a planned offset.

    mp = sw.memory_plan(plan)           # works for any plan, a 16-GPU one too
    mp.devices[0].arena_bytes, mp.devices[0].peak_bytes
    mp.devices[0].parameters, .optimizer_state, .activations_kept, .staging
    mp.offset(buffer_id), mp.lifetime(buffer_id)
    print(mp.summary())

The lowering (csrc/graph/lower.c) lists every buffer of one training iteration and
the tasks that read and write it; csrc/mem/memplan.c gives each device one arena
and places every buffer in it from its lifetime over the program order of the
tasks: a buffer is free after its last reader, so later buffers take its bytes.
Parameters and momentum live across iterations; the loss outputs stay until the
host has read them.  Reuse across devices' streams comes with ordering edges
(``reuse_edges``): a copy that reads a buffer from another device must finish
before that memory is taken over.  csrc/mem/memplan_check.c proves a plan safe from
the task graph alone (:meth:`MemoryPlan.validate`).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.errors import ConfigError
from shardwise.iteration.lower import TaskGraph, handle_of, lower, lowered, plan_arrays, ring_detail
from shardwise.iteration.schedule import Schedule
from shardwise.plan import Plan

DEFAULT_ALIGNMENT = _core.ARENA_ALIGN   # bytes, the runtime's (a cache line, the widest loads of the CPU kernels)


@dataclass(frozen=True)
class DeviceMemory:
    """The planned memory of one device for one training iteration, in bytes."""

    device: int
    arena_bytes: int          # the one allocation the device gets (offsets are aligned, so >= peak)
    peak_bytes: int           # the most bytes live at once
    sum_of_buffers: int       # every buffer of the iteration counted apart (no reuse): the old measure
    parameters: int           # parameter slices (live throughout)
    optimizer_state: int      # optimizer state buffers, kind momentum (live throughout)
    activations_kept: int     # bytes written in the forward pass and still live when the backward starts
    staging: int              # staging regions and received pieces live at the peak
    gradients: int            # gradients (of activations and of parameters) live at the peak
    at_peak: dict[str, int] = field(default_factory=dict)   # buffer kind -> bytes live at the peak


@dataclass
class MemoryPlan:
    """Per device, the arena and where every buffer of the iteration lies in it."""

    plan: Plan
    devices: dict[int, DeviceMemory]
    align: int
    arrays: dict[str, np.ndarray] = field(repr=False)
    optimizer_state: int = 1   # the optimizer's state buffers per parameter slice (1 SGD, 2 Adam)
    schedule: Any = field(default=None, repr=False)   # the Schedule whose streams the tasks run on (None: fifo)
    handle: Any = field(default=None, repr=False)     # the C task graph (_core.TaskGraph) it was planned on

    @property
    def peak_bytes(self) -> int:
        """The largest arena of any device."""
        return max(d.arena_bytes for d in self.devices.values())

    def offset(self, buffer: int) -> int:
        """Byte offset of ``buffer`` (an id of ``sw.lower(plan).buffers``) in its device's arena."""
        return int(self.arrays["offset"][buffer])

    def lifetime(self, buffer: int) -> tuple[int, int]:
        """(first, last) task touching ``buffer`` in program order; (0, number of tasks) for a
        buffer that lives throughout."""
        return int(self.arrays["first"][buffer]), int(self.arrays["last"][buffer])

    @property
    def reuse_edges(self) -> list[tuple[int, int]]:
        """(task a, task b): a must finish before b starts because b's buffers take over memory a reads."""
        return list(zip(self.arrays["reuse_from"].tolist(), self.arrays["reuse_to"].tolist()))

    def validate(self) -> None:
        """Prove the plan safe from the task graph alone (csrc/mem/memplan_check.c): buffers sharing
        bytes are touched by tasks all ordered one buffer's before the other's; raises ValueError."""
        a = self.arrays
        if self.handle is not None:   # the graph it was planned on: no lowering again
            self.handle.check_memory_plan(a["offset"], a["arena"], a["reuse_from"], a["reuse_to"], self.align)
            return
        _problem(self.plan, self.optimizer_state).check_memory_plan(
            *plan_arrays(self.plan), a["offset"], a["arena"], a["reuse_from"], a["reuse_to"], self.align,
            _streams(self.plan, self.schedule))

    def summary(self) -> str:
        rows = [f"memory plan of {self.plan.name!r} ({len(self.devices)} devices, {self.align}-byte alignment):",
                f"{'device':>6} {'arena MB':>10} {'peak MB':>10} {'no reuse MB':>12} {'params MB':>10} "
                f"{'momentum MB':>12} {'kept MB':>9} {'staging MB':>11}"]
        for d in self.devices.values():
            rows.append(f"{d.device:>6} {d.arena_bytes / 1e6:>10.2f} {d.peak_bytes / 1e6:>10.2f} "
                        f"{d.sum_of_buffers / 1e6:>12.2f} {d.parameters / 1e6:>10.2f} {d.optimizer_state / 1e6:>12.2f} "
                        f"{d.activations_kept / 1e6:>9.2f} {d.staging / 1e6:>11.2f}")
        return "\n".join(rows)


def _problem(plan: Plan, optimizer_state: int = 1):
    from shardwise.planning.problem import make_problem

    problem = make_problem(plan.graph, plan.devices, plan.options)
    problem.set_optimizer_state(optimizer_state)
    return problem


def _streams(plan: Plan, schedule: Any) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The streams argument of the core's bindings for a Schedule of ``plan`` (None: one per device)."""
    if schedule is None:
        return None
    if not isinstance(schedule, Schedule):
        raise TypeError(f"schedule must be a Schedule (sw.schedule(plan)) or None, got {type(schedule).__name__}")
    schedule.check(plan)
    return schedule.stream_arrays()


def memory_plan(plan: Plan, align: int = DEFAULT_ALIGNMENT, check: bool = False,
                optimizer_state: int = 1, schedule: Any = None, rings: str = "chunked") -> MemoryPlan:
    """The planned memory of one training iteration of ``plan`` on each of its devices.

    ``plan``: a Plan (lowered once here), or a task graph of one (``sw.lower(plan, ...)``), whose
    C handle is planned without lowering again, on its own streams and swap tasks (its optimizer
    state; ``optimizer_state`` and ``schedule`` are then left out).
    ``align``: every buffer's offset is a multiple of it (a power of two, in bytes).
    ``check``: also prove the offsets safe (:meth:`MemoryPlan.validate`; slower on large plans).
    ``optimizer_state``: the optimizer's state buffers per parameter slice (1: SGD's momentum,
    the default; 2: Adam's and AdamW's moments: ``optimizer.state_buffers``).
    ``schedule``: a :class:`~shardwise.iteration.schedule.Schedule` of ``plan`` whose streams the tasks
    run on; with several streams on a device the reuse edges order every task of the bytes'
    previous occupant, on whatever stream, before a buffer takes them over.
    ``rings``: "chunked" (the default: the graph the runtime runs and allocates for), "fused"
    (each ring all-reduce as one task per ring link, :func:`shardwise.lower`: the simulator's model of
    large machines, whose ring buffers hold the same bytes) or "auto" (fused above
    ``FUSED_RINGS_ABOVE`` devices, as the simulator and the search's memory checks lower)."""
    if isinstance(align, bool) or not isinstance(align, int) or align < 1 or align & (align - 1):
        raise ValueError(f"align must be a power of two (bytes), got {align!r}")
    if isinstance(plan, TaskGraph):
        if schedule is not None and schedule is not plan.schedule:
            raise ConfigError("a task graph carries its own schedule: lower the plan with it "
                              "(sw.lower(plan, schedule=...)) instead of passing one here")
        tg = plan
        handle, plan, optimizer_state, schedule = handle_of(tg), tg.plan, tg.optimizer_state, tg.schedule
    else:
        if schedule is not None and rings == "fused":
            raise ConfigError("a schedule's streams are made on the graph with its rings chunked: "
                              "plan its memory with rings='chunked' (or 'auto')")
        detail = "chunked" if schedule is not None else ring_detail(plan, rings)
        handle = lowered(plan, optimizer_state, streams=_streams(plan, schedule), rings=detail)
    r = handle.memory_plan(align=align, check=check)
    kinds = _core.BUFFER_KINDS
    ndev = len(plan.devices)
    devices = {}
    for d in range(ndev):
        at_peak = {k: int(v) for k, v in zip(kinds, r["peak_kinds"][d].tolist()) if v}
        devices[d] = DeviceMemory(
            device=d, arena_bytes=int(r["arena"][d]), peak_bytes=int(r["peak"][d]), sum_of_buffers=int(r["total"][d]),
            parameters=at_peak.get("param", 0), optimizer_state=at_peak.get("momentum", 0),
            activations_kept=int(r["kept"][d]), staging=at_peak.get("region", 0) + at_peak.get("recv", 0),
            gradients=sum(at_peak.get(k, 0) for k in ("grad", "partial_grad", "param_grad", "grad_pre")),
            at_peak=at_peak)
    return MemoryPlan(plan, devices, align, r, optimizer_state, schedule, handle)


@dataclass
class DeviceBreakdown:
    """What one device holds in a plan's memory (:meth:`shardwise.Plan.memory`), in bytes."""

    device: int
    arena: int              # the memory plan's arena, recomputation included: what the device needs
    weights: int            # parameter slices
    optimizer_state: int    # the optimizer's state buffers
    activations_kept: int   # feature maps live when the backward pass starts
    recomputed: int         # feature maps recomputed in the backward pass instead of kept (by the
    #                         recomputation sw.search(..., recompute=True) chose): kept bytes spared
    swapped: int            # feature maps swapped to host memory instead (the swap plan given)
    budget: int             # the device's memory


class PlanMemory(dict):
    """Device -> :class:`DeviceBreakdown` of a plan (:meth:`shardwise.Plan.memory`); ``print`` it
    for a table."""

    def summary(self) -> str:
        rows = [f"{'device':>6} {'arena GB':>9} {'weights':>8} {'optimizer':>9} {'kept':>8} {'recomputed':>10} "
                f"{'swapped':>8} {'budget':>8}"]
        for d, x in sorted(self.items()):
            rows.append(f"{d:>6} {x.arena / 1e9:>9.3f} {x.weights / 1e9:>8.3f} {x.optimizer_state / 1e9:>9.3f} "
                        f"{x.activations_kept / 1e9:>8.3f} {x.recomputed / 1e9:>10.3f} {x.swapped / 1e9:>8.3f} "
                        f"{x.budget / 1e9:>8.3f}")
        return "\n".join(rows)

    __str__ = summary


def plan_memory(plan: Plan, optimizer_state: int = 1, swap: Any = None) -> PlanMemory:
    """Per device of ``plan``: its arena and what it holds (:class:`DeviceBreakdown`), lowered as
    the simulator lowers it, with the recomputation ``sw.search(..., recompute=True)`` chose for
    the plan (``search_stats["memory"]["recompute"]``), or ``swap``'s (a SwapPlan of the plan,
    which carries its own recomputation) when given.  ``recomputed`` and ``swapped`` are the
    feature-map bytes live at the start of the backward pass in the plan lowered without them,
    less those with them."""
    from shardwise.iteration.lower import lowered_graph

    if swap is not None:
        tg = lower(plan, optimizer_state, swap=swap, rings=ring_detail(plan, "auto"))
        ops = tuple(getattr(swap, "recompute", ()) or ())
    else:
        ops = tuple(((plan.search_stats or {}).get("memory", {}).get("recompute") or {}).get("ops") or ())
        tg = lowered_graph(plan, optimizer_state, "auto", ops or None)
    held = memory_plan(tg)   # everything applied
    # the same plan keeping every map, and recomputing without swapping (the kept bytes each spares)
    plain = memory_plan(lowered_graph(plan, optimizer_state, "auto")) if (ops or swap is not None) else held
    if swap is None:
        recomputing = held
    else:
        recomputing = memory_plan(lowered_graph(plan, optimizer_state, "auto", ops)) if ops else plain
    out = PlanMemory()
    for d, x in held.devices.items():
        kept_plain, kept_recomputing = plain.devices[d].activations_kept, recomputing.devices[d].activations_kept
        out[d] = DeviceBreakdown(
            device=d, arena=x.arena_bytes, weights=x.parameters, optimizer_state=x.optimizer_state,
            activations_kept=x.activations_kept, recomputed=max(kept_plain - kept_recomputing, 0),
            swapped=max(kept_recomputing - x.activations_kept, 0), budget=int(plan.devices.devices[d].memory))
    return out
