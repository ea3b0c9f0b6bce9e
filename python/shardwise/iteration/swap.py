"""Memory budgets: feature maps offloaded to host memory while the backward pass does not need them.

    sp = sw.swap_plan(plan, budget="8GB")
    sp.peak_bytes, sp.stall_time, sp.offloaded      # per device
    sp.total_stall                                  # the simulator's: the swapped iteration minus the unswapped
    t = sw.Trainer(g, plan, swap=sp)                # trains within the budget, numerics unchanged
    sw.simulate(plan, swap=sp).iteration_time       # the swap tasks replayed (= sp.swapped_iteration_time)

The memory optimizer of "AccUDNN: A GPU Memory Efficient Accelerator for Training
Ultra-deep Deep Neural Networks" on shardwise's task graph (docs/memory.md).  The C core
does the work: csrc/graph/swap_plan.c chooses which feature maps to offload and where each
swap-out and prefetch goes from the task graph's access pattern, the simulated iteration
(the computation model: the plan's costs or the roofline), live bytes per task (the memory
model) and each device's host-link bandwidth (``Device.host_bandwidth``: the preset's or the
machine file's); csrc/graph/swap.c turns the choice into swap tasks of the one task graph, on a
swap-out and a swap-in stream per device, which the executor runs and the simulator replays;
csrc/mem/swap_fit.c plans again until the memory plan of the swapped graph (its arena, what the
runtime allocates) fits the budget.

The stall a swap plan reports is the simulator's: the plan's task graph with its swap tasks
replayed against the graph without them (:func:`simulated_stall`).  The planner's own timing
model only chooses what to offload; it charges every swap-out it cannot hide to the computation,
while the runtime waits only where a later buffer takes the offloaded bytes, and it was off by
up to 15 times (docs/memory.md, "How much a swap plan stalls").
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

from shardwise import _core
from shardwise.sizes import format_bytes
from shardwise.iteration.lower import TaskGraph, _view, handle_of, lowered, plan_arrays
from shardwise.iteration.sim_costs import _cost_arrays, _machine, host_bandwidths, resolve_costs
from shardwise.plan import Plan
from shardwise.sizes import read_bytes

def parse_budget(budget: Any, what: str = "budget") -> int:
    """Bytes from an int (bytes) or a string with a unit: "8GB" (10^9), "512MiB" (2^20), "1.5 GiB".
    Raises ValueError for anything malformed, zero or negative, TypeError for other types."""
    return int(read_bytes(budget, what))


def _per_device(value: Any, ndev: int, what: str, allow_none: bool = False) -> list[int]:
    """One budget for every device, or a {device: budget} dict naming each device."""
    if value is None and allow_none:
        return [-1] * ndev
    if isinstance(value, dict):
        if sorted(value) != list(range(ndev)):
            raise ValueError(f"{what} as a dict needs one entry per device 0..{ndev - 1}, got keys {sorted(value)}")
        return [parse_budget(value[d], f"{what} of device {d}") for d in range(ndev)]
    return [parse_budget(value, what)] * ndev


@dataclass(frozen=True)
class SwapEntry:
    """One offloaded feature map: its buffer, where its two swap tasks go, and the model's timing."""

    buffer: int        # buffer id of ``sw.lower(plan)``
    device: int
    op: str            # the op whose feature map (or staging region of it) it is
    nbytes: int
    out_before: int    # task of ``sw.lower(plan)`` the swap-out goes right before
    in_before: int     # task the prefetch goes right before
    # the planner's timing model (what it chose by; the stall reported is the simulator's):
    ready: float       # t_ready (Algorithm 1): when the prefetch ends, seconds into the iteration
    needed: float      # when its first backward reader starts without stalls (Eq. 6's right side)


@dataclass
class SwapPlan:
    """Which feature maps a plan offloads to host memory under a budget, and what that costs.

    Per device: ``peak_bytes`` the arena the runtime allocates (the memory plan of the swapped
    task graph: at most the budget), ``stall_time`` how much later (seconds) the device ends its
    last task when the simulator replays the swap tasks than without them (0: the copies hide
    behind the computation), ``offloaded`` the ops whose
    feature maps go to host memory, ``offloaded_bytes`` their bytes, ``host_bytes`` the host
    region they take (pinned memory), ``unswapped_peak`` the arena without swapping and
    ``min_peak`` the smallest the model reaches with every feature map offloaded.
    ``iteration_time`` and ``swapped_iteration_time``: the iteration as ``sw.simulate`` replays
    it without and with the swap tasks (the same costs); ``total_stall`` their difference."""

    plan: Plan
    budget: dict[int, int]
    peak_bytes: dict[int, int]
    stall_time: dict[int, float]
    offloaded: dict[int, list[str]]
    offloaded_bytes: dict[int, int]
    host_bytes: dict[int, int]
    unswapped_peak: dict[int, int]
    min_peak: dict[int, int]
    iteration_time: float             # the unswapped iteration as simulated (the computation model)
    swapped_iteration_time: float     # the same iteration with the swap tasks replayed
    entries: list[SwapEntry]
    optimizer_state: int = 1
    pinned_budget: dict[int, int] | None = None
    kept_for_pinned: int = 0          # feature maps kept on a device because the pinned budget ran out
    recompute: tuple[str, ...] = ()   # ops whose maps the graph it was planned on recomputes (sw.lower(plan,
                                      # recompute=...)): lowered with the same recomputation, before the swaps
    arrays: dict[str, np.ndarray] = field(default_factory=dict, repr=False)
    _key: tuple = field(default=(), repr=False)

    @property
    def total_stall(self) -> float:
        """Seconds the iteration loses to swapping in the simulator (0 when every copy hides)."""
        return _lost(self.swapped_iteration_time, self.iteration_time)

    def spec(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(buffer, out_at, in_at) int32 arrays: what the C core's ``swap=`` arguments take."""
        a = self.arrays
        return a["buffer"], a["out_at"], a["in_at"]

    def check(self, plan: Plan, optimizer_state: int | None = None) -> None:
        """ValueError unless this swap plan was made for ``plan`` (and that optimizer state)."""
        if not isinstance(plan, Plan):
            raise TypeError(f"a swap plan goes with a Plan, got {type(plan).__name__}")
        if _plan_key(plan) != self._key:
            raise ValueError(f"this swap plan was made for plan {self.plan.name!r} of graph "
                             f"{self.plan.graph.name!r}, not for plan {plan.name!r} of graph {plan.graph.name!r}: "
                             "its buffers and tasks are another task graph's (make one with sw.swap_plan(plan, ...))")
        if optimizer_state is not None and optimizer_state != self.optimizer_state:
            raise ValueError(f"this swap plan was made for {self.optimizer_state} optimizer state buffer(s) per "
                             f"parameter, the optimizer keeps {optimizer_state}: "
                             f"sw.swap_plan(plan, budget, optimizer_state={optimizer_state})")

    def summary(self) -> str:
        rows = [f"swap plan of {self.plan.name!r}: {len(self.entries)} feature maps offloaded",
                f"{'device':>6} {'budget GB':>10} {'peak GB':>9} {'unswapped GB':>13} {'offloaded GB':>13} "
                f"{'host GB':>8} {'stall ms':>9}"]
        for d in sorted(self.peak_bytes):
            rows.append(f"{d:>6} {self.budget[d] / 1e9:>10.3f} {self.peak_bytes[d] / 1e9:>9.3f} "
                        f"{self.unswapped_peak[d] / 1e9:>13.3f} {self.offloaded_bytes[d] / 1e9:>13.3f} "
                        f"{self.host_bytes[d] / 1e9:>8.3f} {self.stall_time[d] * 1e3:>9.3f}")
        return "\n".join(rows)


def _lost(after: float, before: float) -> float:
    """Seconds ``after`` is later than ``before``; 0 within rounding (1e-9 of ``before``: the
    replays sum the same durations along paths of other lengths), never below 0."""
    lost = after - before
    return lost if lost > 1e-9 * max(abs(before), 1e-12) else 0.0


def _finish_per_device(result: Any, ndev: int) -> list[float]:
    """When each device's last task (its compute, its copies, its swap tasks) ends in a replay."""
    finish = [0.0] * ndev
    for e in result.events:
        finish[e.device] = max(finish[e.device], e.end)
    return finish


def simulated_stall(sp: SwapPlan, costs: Any = None, unswapped: TaskGraph | None = None
                    ) -> tuple[dict[int, float], float, float]:
    """The stall of ``sp`` as the simulator replays it: (per device, how much later it ends its
    last task with the swap tasks than without; the unswapped iteration; the swapped iteration),
    seconds, both iterations as ``sw.simulate`` gives them with ``costs`` and the swap plan's
    optimizer state.  The one stall figure swap plans report (SwapPlan.stall_time, total_stall).
    ``unswapped``: the plan lowered already with that optimizer state (else lowered here); the
    swapped graph is lowered once for its replay."""
    from shardwise.iteration.lower import lower
    from shardwise.iteration.simulate import simulate

    plan = sp.plan
    plain = simulate(unswapped if unswapped is not None else
                     lower(plan, sp.optimizer_state, recompute=sp.recompute or None), check_memory=False, costs=costs)
    swapped = simulate(plan, check_memory=False, costs=costs, swap=sp)
    ndev = len(plan.devices)
    before, after = _finish_per_device(plain, ndev), _finish_per_device(swapped, ndev)
    per_device = {d: _lost(after[d], before[d]) for d in range(ndev)}
    return per_device, plain.iteration_time, swapped.iteration_time


def _plan_key(plan: Plan) -> tuple:
    kinds, degrees, dev_ptr, devs = plan_arrays(plan)
    return (plan.graph.fingerprint(), plan.devices.fingerprint(), degrees.tobytes(), dev_ptr.tobytes(),
            devs.tobytes(), plan.options.sync)


def _timeline(plan: Plan, handle: Any, costs: Any) -> tuple[np.ndarray, np.ndarray, float, np.ndarray]:
    """Start and end of every task of the unswapped iteration as simulated, its time and arenas
    (a replay of ``handle``, the plan lowered once)."""
    costs = resolve_costs(plan, costs)
    split, rates, fixed, copy_bw = _cost_arrays(plan, costs)
    m = _machine(plan.devices, handle)
    r = handle.simulate(m.route_ptr, m.route_res, m.nres, cores=m.cores, split=split, element_seconds=rates,
                        copy_bandwidth=copy_bw, element_fixed=fixed)
    start = np.asarray(r["start"], np.float64)
    return start, start + np.asarray(r["duration"], np.float64), float(r["iteration_time"]), r["arena"]


def swap_plan(plan: Plan, budget: Any, pinned_budget: Any = None, costs: Any = None,
              optimizer_state: int = 1, check: bool = False) -> SwapPlan:
    """Offload feature maps of ``plan`` to host memory so that every device's arena fits ``budget``.

    ``budget``: bytes (an int) or a size string ("8GB", "512MiB"), for every device, or a dict
    {device: budget}.  ``pinned_budget`` (same forms, None: unlimited): the pinned host memory
    each device's offloaded feature maps may take; where it runs out, the feature maps live in
    host memory at that moment that are largest are kept on the device instead, while the
    budget allows (``kept_for_pinned`` counts them), and a ValueError says so when it does not.
    ``costs``: the computation model, as :func:`shardwise.iteration.simulate` takes it (the plan's own by
    default).  ``optimizer_state``: the optimizer's state buffers per parameter (1 SGD, 2 Adam),
    as the trainer will lower the plan.  ``check``: prove the swapped graph's memory plan safe
    from the task graph alone (csrc/mem/memplan_check.c; slower).  ``plan`` may be a task graph
    lowered with a recomputation (``sw.lower(plan, recompute=...)``): the maps it still keeps
    are the candidates, and the swap plan carries that recomputation (``recompute``), which every
    lowering with the swap plan applies first (keep, recompute or swap per feature map).

    Raises ValueError naming the device, the task and its bytes when a budget is below the
    largest single task's working set (its buffers with the device's parameters and optimizer
    state), and naming the smallest footprint swapping reaches when it is below that."""
    handle = given = None
    if isinstance(plan, TaskGraph):   # lowered once already (without a swap plan): its optimizer state
        if plan.swap is not None:
            raise ValueError("this task graph has a swap plan already: plan swapping on sw.lower(plan)")
        if plan.ranks is not None:   # its sends and receives: the swap tasks go into the whole graph
            raise ValueError("this task graph is split over ranks: plan swapping on sw.lower(plan) without ranks")
        given = plan
        handle, optimizer_state, plan = handle_of(plan), plan.optimizer_state, plan.plan
    recomputed = given.recomputed if given is not None else ()
    if not isinstance(plan, Plan):
        raise TypeError(f"swap_plan needs a Plan, got {type(plan).__name__}")
    if isinstance(optimizer_state, bool) or optimizer_state not in (1, 2):
        raise ValueError(f"optimizer_state must be 1 (SGD) or 2 (Adam, AdamW), got {optimizer_state!r}")
    ndev = len(plan.devices)
    budgets = _per_device(budget, ndev, "budget")
    pinned = _per_device(pinned_budget, ndev, "pinned_budget", allow_none=True)
    if handle is None:
        handle = lowered(plan, optimizer_state)   # once: the timeline, the swap pass and the entries read it
    if handle.has_streams:   # a schedule's graph: the swap plan is made for one stream per device
        raise ValueError("a swap plan runs on one compute stream per device: plan swapping on sw.lower(plan)")
    start, end, _, unswapped = _timeline(plan, handle, costs)
    r = handle.swap_plan(start, end, np.asarray(budgets, np.int64), np.asarray(pinned, np.int64),
                         host_bandwidths(plan), check=bool(check))
    tg = handle.arrays()
    for d in range(ndev):
        if r["working_set"][d] > budgets[d]:
            task = int(r["working_task"][d])
            raise ValueError(f"the budget of device {d} ({format_bytes(budgets[d])}) is below what op "
                             f"{plan.graph.ops[int(tg['op'][task])].name!r} needs at once "
                             f"({_core.TASK_KINDS[int(tg['kind'][task])].replace('_', ' ')}): "
                             f"{format_bytes(r['working_set'][d])} with the device's parameters and optimizer "
                             "state; no swapping can go below it")
    if not r["fits"]:
        over = [d for d in range(ndev) if r["arena"][d] > budgets[d] or r["min_peak"][d] > budgets[d]] or \
            list(range(ndev))
        d = over[0]
        if pinned[d] >= 0 and r["min_peak"][d] <= budgets[d]:
            raise ValueError(f"device {d}: the pinned host budget ({pinned[d]:,} bytes) is too small to offload "
                             f"what a budget of {budgets[d]:,} bytes needs offloaded (host region "
                             f"{int(r['host_peak'][d]):,} bytes); raise pinned_budget or budget")
        raise ValueError(f"budget of device {d} ({budgets[d]:,} bytes) is below the smallest footprint swapping "
                         f"reaches: {max(int(r['min_peak'][d]), 1):,} bytes live with every feature map offloaded "
                         f"(arena {int(r['arena'][d]):,} bytes as placed; {int(unswapped[d]):,} bytes without "
                         "swapping); raise the budget or split the model over more devices")
    names = [op.name for op in plan.graph.ops]
    entries = []
    offloaded: dict[int, list[str]] = {d: [] for d in range(ndev)}
    for k, b in enumerate(r["buffer"].tolist()):
        dev = int(tg["buffer_device"][b])
        op = names[int(tg["buffer_op"][b])]
        entries.append(SwapEntry(b, dev, op, int(tg["buffer_plan_bytes"][b]), int(r["out_at"][k]), int(r["in_at"][k]),
                                 float(r["ready"][k]), float(r["needed"][k])))
        offloaded[dev].append(op)
    sp = SwapPlan(
        plan=plan, budget=dict(enumerate(budgets)), peak_bytes={d: int(r["arena"][d]) for d in range(ndev)},
        stall_time={}, offloaded=offloaded,
        offloaded_bytes={d: int(r["offloaded"][d]) for d in range(ndev)},
        host_bytes={d: int(r["host_arena"][d]) for d in range(ndev)},
        unswapped_peak={d: int(unswapped[d]) for d in range(ndev)},
        min_peak={d: int(r["min_peak"][d]) for d in range(ndev)}, iteration_time=0.0, swapped_iteration_time=0.0,
        entries=entries, optimizer_state=optimizer_state,
        pinned_budget=None if pinned_budget is None else dict(enumerate(pinned)),
        kept_for_pinned=int(r["pinned_overflow"]), arrays=r, _key=_plan_key(plan), recompute=recomputed)
    # the stall users see is the simulator's (r["stall"], the planner's own estimate, only steered the choice)
    unswapped_graph = given if given is not None else _view(plan, handle, optimizer_state, None, None)
    sp.stall_time, sp.iteration_time, sp.swapped_iteration_time = simulated_stall(sp, costs, unswapped_graph)
    return sp
