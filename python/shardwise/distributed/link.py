"""The link between two ranks, measured through the comm layer: a ping-pong.

    comm = sw.distributed.init()
    bandwidth, latency = sw.distributed.measure_link(comm)   # on every rank of the job

Rank 0 sends a message of n bytes to rank 1 (``Comm.send_bytes``), which sends it back; half
the round trip is one message.  For each of a few sizes (a kilobyte to a few megabytes) the
fastest of ``repeats`` round trips is kept, and ``seconds = latency + bytes / bandwidth`` is
fitted to them by least squares of the relative error (so the small messages decide the
latency and the large ones the bandwidth).  What a message costs end to end is in it: the
sender's copy into MPI's staging buffer (shared memory between the processes of one machine,
the network between machines), the receiver's copy out of it, the comm thread's wake-ups, and
the Python call around each side.

:func:`shardwise.planning.profile.profile` measures it for a profile when given a comm (or run
under mpiexec); ``sw.simulate(plan, ranks=..., costs=profile)`` times the copies between ranks
with it (docs/simulator.md, docs/distributed.md).
"""
from __future__ import annotations

import time
from typing import Any

import numpy as np

from shardwise.errors import ConfigError

__all__ = ["measure_link", "DEFAULT_SIZES", "fit_link"]

# bytes of the ping-pong's messages: 1 KB to 4 MB
DEFAULT_SIZES = (1 << 10, 16 << 10, 128 << 10, 1 << 20, 4 << 20)
TAG = 31000   # the ping-pong's tags: TAG (ping) and TAG + 1 (pong); MPI allows tags up to 32767 at least


def fit_link(sizes: Any, seconds: Any) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s) of ``seconds = latency + bytes / bandwidth`` over one-way
    times of messages of ``sizes`` bytes: least squares of the relative error, neither figure
    negative (a negative latency fits the line through the origin instead; a slope <= 0, the
    largest message's rate)."""
    n = np.asarray(sizes, np.float64)
    t = np.asarray(seconds, np.float64)
    if n.shape != t.shape or n.ndim != 1 or len(n) == 0 or not (np.all(t > 0) and np.all(n > 0)):
        raise ConfigError("fit_link needs as many positive sizes as positive times")
    if len(n) >= 2 and np.ptp(n) > 0:
        latency, per_byte = np.linalg.lstsq(np.stack([1 / t, n / t], 1), np.ones_like(t), rcond=None)[0]
        if latency >= 0 and per_byte > 0:
            return float(1 / per_byte), float(latency)
        if per_byte > 0 or latency < 0:   # through the origin: seconds = bytes * per_byte
            per_byte = float(np.sum(n / t) / np.sum((n / t) ** 2))
            if per_byte > 0:
                return float(1 / per_byte), 0.0
    k = int(np.argmax(n))
    return float(n[k] / t[k]), 0.0


def measure_link(comm: Any, sizes: Any = DEFAULT_SIZES, repeats: int = 5, peers: tuple[int, int] = (0, 1),
                 timeout: float | None = 60.0) -> tuple[float, float]:
    """(bandwidth bytes/s, latency s per message) between ranks ``peers`` (0 and 1) of ``comm``,
    by a ping-pong of ``sizes`` bytes, ``repeats`` timed round trips each after one untimed
    one.  Every rank of the job calls it (the others only take part in the last step: the
    result, rank ``peers[0]``'s, gathered to all) and gets the same figures.  ConfigError on a
    job of one rank; CommTimeoutError where a peer does not answer within ``timeout`` seconds."""
    size = int(getattr(comm, "size", 1))
    sizes = [int(s) for s in sizes]
    if size < 2:
        raise ConfigError("measure_link needs a job of 2 or more ranks (mpiexec -n 2 ...): one rank has no link")
    a, b = (int(p) for p in peers)
    if not (0 <= a < size and 0 <= b < size and a != b):
        raise ConfigError(f"peers must be two different ranks of the job's {size}, got {peers!r}")
    if not sizes or min(sizes) < 1:
        raise ConfigError(f"sizes must be positive byte counts, got {sizes!r}")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ConfigError(f"repeats must be an int >= 1, got {repeats!r}")
    result = np.zeros(2, np.float64)
    if comm.rank in (a, b):
        peer = b if comm.rank == a else a
        buf = np.zeros(max(sizes), np.uint8)
        best = []
        for n in sizes:
            view = buf[:n]
            times = []
            for k in range(repeats + 1):
                if comm.rank == a:
                    t0 = time.perf_counter()
                    comm.send_bytes(view, peer, TAG, timeout)
                    comm.recv_bytes(view, peer, TAG + 1, timeout)
                    if k > 0:   # the first round trip warms up (pages touched, MPI's buffers set up)
                        times.append((time.perf_counter() - t0) / 2)
                else:
                    comm.recv_bytes(view, peer, TAG, timeout)
                    comm.send_bytes(view, peer, TAG + 1, timeout)
            if comm.rank == a:
                best.append(min(times))
        if comm.rank == a:
            result[:] = fit_link(sizes, best)
    got = comm.allgather_bytes(result.tobytes(), timeout)
    bandwidth, latency = np.frombuffer(got[a], np.float64)
    return float(bandwidth), float(latency)
