"""Worker threads that live across training steps.

The CPU executor runs one thread per device (at most one per core).  Starting those threads afresh
every step cost more than the small steps themselves: a new Python thread has
to win the interpreter lock from the threads already computing, and on the
2-core test machine the fourth worker of a LeNet-5 step started 4 ms after the
first (the whole step takes 7 ms).  A :class:`WorkerPool` starts its threads
once; a step hands each a job through its own queue and waits for them all.

The threads hold no reference to the executor between jobs (a job is dropped as
soon as it has run), so an executor that goes away is collected, and its
finalizer closes the pool.
"""
from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence

Job = Callable[[], None]


class WorkerPool:
    """``count`` daemon threads; :meth:`run` gives thread k the k-th job and waits for all."""

    def __init__(self, count: int, name: str = "shardwise worker") -> None:
        if count < 1:
            raise ValueError(f"a worker pool needs at least one thread, got {count}")
        self._inboxes: list[queue.SimpleQueue] = [queue.SimpleQueue() for _ in range(count)]
        self._done: queue.SimpleQueue = queue.SimpleQueue()
        self._closed = False
        self._threads = [threading.Thread(target=_serve, args=(inbox, self._done), name=f"{name} {k}", daemon=True)
                         for k, inbox in enumerate(self._inboxes)]
        for th in self._threads:
            th.start()

    def __len__(self) -> int:
        return len(self._threads)

    def run(self, jobs: Sequence[Job]) -> None:
        """Run ``jobs[k]`` on thread k (at most one job per thread) and wait until every
        job has returned.  The first exception a job raised is re-raised here.  Ctrl-C
        while waiting is held until the jobs have finished (a step is never left half
        done), then raised."""
        if self._closed:
            raise RuntimeError("this worker pool is closed")
        if len(jobs) > len(self._threads):
            raise ValueError(f"{len(jobs)} jobs for a pool of {len(self._threads)} threads")
        for inbox, job in zip(self._inboxes, jobs):
            inbox.put(job)
        failures: list[BaseException] = []
        interrupted: KeyboardInterrupt | None = None
        pending = len(jobs)
        while pending:
            try:
                outcome = self._done.get()
            except KeyboardInterrupt as exc:
                interrupted = exc
                continue
            pending -= 1
            if outcome is not None:
                failures.append(outcome)
        if failures:
            raise failures[0]
        if interrupted is not None:
            raise interrupted

    def close(self) -> None:
        """Let the threads end (each after its current job); idempotent."""
        if self._closed:
            return
        self._closed = True
        for inbox in self._inboxes:
            inbox.put(None)


def _serve(inbox: queue.SimpleQueue, done: queue.SimpleQueue) -> None:
    """A pool thread: run jobs until told to stop (None); report each outcome on ``done``."""
    while True:
        job = inbox.get()
        if job is None:
            return
        try:
            job()
        except BaseException as exc:  # re-raised by WorkerPool.run on the calling thread
            done.put(exc)
        else:
            done.put(None)
        job = None  # hold nothing of the finished step while waiting for the next
