"""Checks on a lowered iteration that several test rooms share: happens-before as bit sets, and
that every read sees a write ordered before it and no two unordered tasks race on a buffer."""
from __future__ import annotations

from shardwise.ops.box import intersect

# buffers that hold state kept across iterations (read before this iteration writes them)
PERSISTENT = {"param", "momentum", "running_stats"}


def ancestors(order: list[set[int]]) -> list[int]:
    """Per task, the tasks that happen before it (a bit set as a Python int)."""
    anc: list[int] = []
    for preds in order:
        bits = 0
        for p in preds:
            assert p < len(anc), "the order points forward"
            bits |= anc[p] | (1 << p)
        anc.append(bits)
    return anc


def check_data_flow(tg) -> None:
    """Every buffer read is written first by a task that happens before the reader, unless it
    holds state kept across iterations; every task writing a part of a buffer is ordered with
    every other task reading or writing an overlapping part, so no timing can change what a
    task sees.  Happens-before is the runtime's: dependencies, and each device running its
    own tasks in program order (its stream)."""
    ancestors: list[int] = []          # bit d of ancestors[t]: task d must finish before t starts
    previous: dict[int, int] = {}      # device -> its last task so far
    for t in tg.tasks:
        a = 0
        for d in t.deps + ((previous[t.device],) if t.device in previous else ()):
            a |= ancestors[d] | (1 << d)
        ancestors.append(a)
        previous[t.device] = t.id

    def ordered(x: int, y: int) -> bool:
        return x == y or bool(ancestors[x] >> y & 1) or bool(ancestors[y] >> x & 1)

    writers: dict[int, list[int]] = {}
    users: dict[int, list[int]] = {}
    for t in tg.tasks:
        assert all(0 <= b < len(tg.buffers) for b in t.reads + t.writes), t
        for b in t.writes:
            writers.setdefault(b, []).append(t.id)
        for b in set(t.reads + t.writes):
            users.setdefault(b, []).append(t.id)
    for t in tg.tasks:
        for b in t.reads:
            if tg.buffers[b].kind in PERSISTENT or b in t.writes:
                continue
            assert any(ancestors[t.id] >> w & 1 for w in writers.get(b, ())), \
                f"task {t} reads buffer {tg.buffers[b]} before any task writes it"
    def part(t: int, b: int):
        """The part of buffer b that task t touches: a copy or accumulate its box, others all of it."""
        task = tg.tasks[t]
        return task.box if task.kind in ("copy", "accumulate") else tg.buffers[b].box

    for b, ws in writers.items():
        for w in ws:
            for u in users[b]:
                if not ordered(w, u) and intersect(part(w, b), part(u, b)) is not None:
                    raise AssertionError(f"tasks {tg.tasks[w]} and {tg.tasks[u]} race on buffer {tg.buffers[b]}")
