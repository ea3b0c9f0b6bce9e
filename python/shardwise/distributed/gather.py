"""What every rank of a job needs of the others' buffers between steps: weights, optimizer
state, softmax outputs, update counts (a Trainer's get_weights, checkpoints, predictions).

    full = gather_buffers(comm, tg, ranks, executor.persistent.__getitem__, ids)   # {buffer: array}
    counts = gather_counts(comm, {buffer: updates})                                # every rank's, merged

Both are collectives: every rank calls them together, with the same ``ids``.  They run between
steps, over MPI's all-gather (one call each): a rank's buffers travel as one padded block, so the
messages of the task graph (point to point, tagged) never meet them.
"""
from __future__ import annotations

import json
import struct
from typing import Any, Callable, Iterable, Mapping

import numpy as np

__all__ = ["gather_buffers", "gather_counts", "allgather_varlen"]


def _dtype(kind: str) -> type:
    return np.float64 if kind == "stats" else np.float32


def gather_buffers(comm: Any, tg: Any, ranks: list[int], read: "Callable[[int], np.ndarray] | Mapping[int, np.ndarray]",
                   ids: Iterable[int] | tuple[str, ...]) -> dict[int, np.ndarray]:
    """{buffer id: array} for every buffer in ``ids`` (or every buffer of those kinds, given a
    tuple of kind names), on every rank: this rank's own buffers as ``read`` gives them (views),
    the others' as copies received from their ranks."""
    if isinstance(ids, tuple) and all(isinstance(k, str) for k in ids):
        ids = [b.id for b in tg.buffers if b.kind in ids]
    ids = sorted(set(int(b) for b in ids))
    get = read.__getitem__ if isinstance(read, Mapping) else read
    owner = {b: ranks[tg.buffers[b].device] for b in ids}
    sizes = [0] * comm.size
    for b in ids:
        sizes[owner[b]] += tg.buffers[b].nbytes
    width = max(sizes) if sizes else 0
    out: dict[int, np.ndarray] = {}
    block = np.zeros(width, np.uint8)
    at = 0
    for b in ids:
        if owner[b] == comm.rank:
            a = np.ascontiguousarray(get(b))
            n = a.nbytes
            block[at:at + n] = a.reshape(-1).view(np.uint8)
            out[b] = get(b)
            at += n
    parts = comm.allgather_bytes(block.tobytes())
    offsets = [0] * comm.size
    for b in ids:
        r = owner[b]
        buf = tg.buffers[b]
        if r != comm.rank:
            shape = tuple(hi - lo for lo, hi in buf.box)
            out[b] = np.frombuffer(parts[r], _dtype(buf.kind), count=int(np.prod(shape)),
                                   offset=offsets[r]).reshape(shape).copy()
        offsets[r] += buf.nbytes
    return out


def allgather_varlen(comm: Any, data: bytes) -> list[bytes]:
    """Every rank's ``data`` (any lengths), in rank order: the lengths first, then the padded blocks."""
    lengths = [struct.unpack("<q", x)[0] for x in comm.allgather_bytes(struct.pack("<q", len(data)))]
    width = max(lengths)
    blocks = comm.allgather_bytes(data + b"\0" * (width - len(data)))
    return [blk[:n] for blk, n in zip(blocks, lengths)]


def gather_counts(comm: Any, own: Mapping[int, int]) -> dict[int, int]:
    """Every rank's {buffer: count} merged (the buffers of different ranks are distinct)."""
    merged: dict[int, int] = {}
    for part in allgather_varlen(comm, json.dumps(sorted((int(b), int(n)) for b, n in own.items())).encode()):
        merged.update({int(b): int(n) for b, n in json.loads(part.decode())})
    return merged
