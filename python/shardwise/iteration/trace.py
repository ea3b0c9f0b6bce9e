"""Timelines as Chrome trace files, for chrome://tracing and https://ui.perfetto.dev.

    sw.simulate(plan).save_trace("sim.json")     # the simulated iteration
    trainer.step(x, y); trainer.timeline().save_trace("step.json")   # the measured one

One lane (a trace "thread") per resource: "device 3" for the tasks a device runs, "link 0->1"
or "nic 1 out" for transfers holding them; a transfer over several links shows on each.  Each
task is a complete event ("ph": "X") named after its op and kind, with its phase (forward,
backward, sync, update) as the category and its task id, op and kind in ``args`` (a transfer's
also its ``bytes``, ``from_device`` and ``to_device``); times are in
microseconds from the start of the iteration.  The format is the Trace Event Format's JSON
object form ({"traceEvents": [...]}), which both viewers read.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from shardwise.atomic import write_atomically


@dataclass(frozen=True)
class TaskEvent:
    """One task of an iteration, simulated or measured: when it ran and what it held."""

    task: int
    kind: str
    phase: str
    op: str | None
    resources: tuple[str, ...]   # lanes: "device 3", "link 0->1", "nic 1 out", "core 0"
    start: float                 # seconds from the start of the iteration
    end: float
    # a transfer (copy, message, swap): the bytes it moves and between which devices; a
    # compute task runs on ``device`` and moves nothing
    nbytes: int = 0
    src_device: int | None = None
    device: int | None = None


def _lane_key(name: str) -> tuple:
    kind, _, rest = name.partition(" ")
    numbers = [int(x) for x in rest.replace("->", " ").split() if x.isdigit()]
    return (kind != "device", kind, numbers, name)


def chrome_trace(events: Iterable[Any], name: str = "shardwise") -> dict[str, Any]:
    """The Trace Event Format object of ``events`` (objects with the fields of
    :class:`TaskEvent`), one lane per resource, sorted devices first."""
    events = list(events)
    lanes = sorted({r for e in events for r in e.resources}, key=_lane_key)
    tid = {lane: k for k, lane in enumerate(lanes)}
    out: list[dict[str, Any]] = [{"name": "process_name", "ph": "M", "pid": 0, "tid": 0, "args": {"name": name}}]
    out += [{"name": "thread_name", "ph": "M", "pid": 0, "tid": k, "args": {"name": lane}}
            for lane, k in tid.items()]
    out += [{"name": "thread_sort_index", "ph": "M", "pid": 0, "tid": k, "args": {"sort_index": k}}
            for k in tid.values()]
    for e in events:
        label = f"{e.op} {e.kind}" if e.op else e.kind
        args: dict[str, Any] = {"task": e.task, "op": e.op, "kind": e.kind}
        moved = getattr(e, "nbytes", 0)
        if moved:   # a transfer: its size and ends
            args.update(bytes=int(moved), from_device=e.src_device, to_device=e.device)
        for lane in e.resources:
            out.append({"name": label, "cat": e.phase, "ph": "X", "pid": 0, "tid": tid[lane],
                        "ts": e.start * 1e6, "dur": max(e.end - e.start, 0.0) * 1e6, "args": args})
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def save_trace(events: Sequence[Any], path: str | os.PathLike, name: str = "shardwise") -> None:
    """Write :func:`chrome_trace` of ``events`` to ``path`` (atomically)."""
    write_atomically(os.fspath(path), json.dumps(chrome_trace(events, name)).encode())


class Timeline:
    """A measured iteration: the tasks of a Trainer's last step as the runtime ran them
    (:meth:`shardwise.Trainer.timeline`)."""

    def __init__(self, name: str, events: list[TaskEvent], step_time: float) -> None:
        self.name = name
        self.events = events
        self.step_time = step_time     # seconds from the step's start to its end

    def __repr__(self) -> str:
        return f"Timeline({self.name!r}, {len(self.events)} tasks, step_time={self.step_time!r})"

    def save_trace(self, path: str | os.PathLike) -> None:
        """The timeline as a Chrome trace / Perfetto JSON file (:mod:`shardwise.iteration.trace`)."""
        save_trace(self.events, path, self.name)
