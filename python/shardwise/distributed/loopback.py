"""A loopback communicator between the threads of one process: a TEST DOUBLE, not for jobs.

    comms = loopback_comms(4)          # ranks 0..3 of one in-process mailbox: one per thread
    # thread r:  sw.Trainer(g, plan, comm=comms[r]) ... every thread steps the same batches

Jobs of several processes use MPI (:func:`shardwise.distributed.init`).  This exists so that the
runtime's multi-rank code (its messages, the arrival polling) runs in one process, under
ThreadSanitizer and AddressSanitizer (which cannot run the MPI library) and without MPI at all:
each rank is a thread holding one endpoint.  Its semantics are the MPI communicator's
(csrc/exec/comm_loopback.h): messages matched by (sender, tag) in the order sent, the exact
size, waits that time out naming the request, collectives where every rank's n-th meets the
others' n-th (the all-reduce sums in rank order), byte counters per peer.

Every collective (a Trainer's start-up handshake, ``get_weights``, ``predict``, checkpoints)
must be called by every rank's thread, as under MPI; ``abort`` ends the whole process.
"""
from __future__ import annotations

from shardwise.distributed.comm import Comm

__all__ = ["loopback_comms", "LIBRARY"]

LIBRARY = "loopback"


def loopback_comms(n: int) -> list[Comm]:
    """``n`` communicators, ranks 0 .. n-1 of one in-process mailbox (:class:`Comm` objects whose
    ``library`` is "loopback"); hand each to its own thread.  A test double: jobs use MPI."""
    from shardwise import _core

    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"loopback_comms(n) takes a positive int, got {n!r}")
    return [Comm(impl, LIBRARY) for impl in _core.loopback_comms(n)]
