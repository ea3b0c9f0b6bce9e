"""The start-up handshake of a multi-process Trainer: every rank must run the same thing.

    check_same_job(comm, {"shardwise version": ..., "graph": ..., "plan": ..., "task graph": ...})

Each rank hashes every part it was given and all-gathers the digests; where some rank's differ
from rank 0's, every rank raises WorldMismatchError naming the parts that differ and the ranks
(so no rank goes on to wait for messages of a plan its peers do not run).  An uncaught error
ends the job on every rank (``sw.distributed.init``'s hook), within the seconds MPI_Abort takes.
"""
from __future__ import annotations

import hashlib
from typing import Any, Mapping

import numpy as np

__all__ = ["digest", "check_same_job", "task_graph_digest"]

DIGEST_BYTES = 16


def digest(data: Any) -> bytes:
    """16 bytes of SHA-256 of ``data`` (bytes, str, or anything repr() describes exactly)."""
    if isinstance(data, str):
        data = data.encode()
    elif not isinstance(data, (bytes, bytearray)):
        data = repr(data).encode()
    return hashlib.sha256(data).digest()[:DIGEST_BYTES]


def task_graph_digest(handle: Any) -> bytes:
    """The digest of a C task graph: every array of its lowering (tasks, dependencies, buffers,
    boxes), its streams and its ranks, so two ranks that lowered differently never pass."""
    h = hashlib.sha256()
    arrays = handle.arrays()
    for key in sorted(arrays):
        a = np.ascontiguousarray(arrays[key])
        h.update(key.encode() + str(a.dtype).encode() + str(a.shape).encode() + a.tobytes())
    streams = handle.streams
    for a in streams or ():
        h.update(np.ascontiguousarray(a).tobytes())
    ranks = handle.ranks
    h.update(b"ranks" + (np.ascontiguousarray(ranks).tobytes() if ranks is not None else b"none"))
    return h.digest()[:DIGEST_BYTES]


def check_same_job(comm: Any, parts: Mapping[str, Any], timeout: float | None = None) -> None:
    """WorldMismatchError on every rank unless every rank passed the same ``parts`` (same names,
    in the same order; values hashed by :func:`digest`, or given as 16-byte digests)."""
    from shardwise.distributed.comm import WorldMismatchError

    names = list(parts)
    mine = b"".join(v if isinstance(v, bytes) and len(v) == DIGEST_BYTES else digest(v) for v in parts.values())
    gathered = comm.allgather_bytes(mine, timeout)
    differ: dict[str, list[int]] = {}
    for r, blob in enumerate(gathered):
        for k, name in enumerate(names):
            if blob[k * DIGEST_BYTES:(k + 1) * DIGEST_BYTES] != gathered[0][k * DIGEST_BYTES:(k + 1) * DIGEST_BYTES]:
                differ.setdefault(name, []).append(r)
    if differ:
        what = "; ".join(f"the {name} of ranks {ranks} differs from rank 0's" for name, ranks in differ.items())
        raise WorldMismatchError(f"the ranks of this job do not run the same plan: {what} (every rank must build "
                                 "the same graph, devices, plan and trainer options; same parts: "
                                 f"{', '.join(n for n in names if n not in differ)})")
