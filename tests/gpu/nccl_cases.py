"""The rank side of tests/gpu/test_nccl.py: `python nccl_cases.py alone` (a one-rank NCCL
communicator without MPI) or `mpiexec -n N python nccl_cases.py mpi` (bootstrapped over MPI).

Each rank prints "[nccl ok: rank R]" when its checks passed, or "[nccl refused: rank R: why]"
where NCCL refused the communicator (two ranks on one GPU: NCCL's "duplicate GPU"); anything
else fails through an exception.  Buffers are kilobytes: these check the layer, not its speed.
"""
from __future__ import annotations

import ctypes
import sys
import time

import numpy as np

import shardwise as sw


def read_capsule(nc) -> None:
    """The sw_comm_ext capsule, read as C would: ABI version, table size, the name "nccl", and its
    rank and size slots called on its communicator."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    getter = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    class Table(ctypes.Structure):   # the head of sw_comm_i
        _fields_ = [("abi_version", ctypes.c_int), ("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                    ("rank", getter), ("size", getter), ("local_rank", getter)]

    class Ext(ctypes.Structure):     # sw_comm_ext
        _fields_ = [("abi_version", ctypes.c_int), ("table_size", ctypes.c_size_t),
                    ("i", ctypes.POINTER(Table)), ("comm", ctypes.c_void_p)]

    cap = nc._capsule()
    ext = Ext.from_address(api.PyCapsule_GetPointer(cap, b"shardwise.comm"))
    table = ext.i.contents
    from shardwise import _cuda
    assert ext.abi_version == table.abi_version == _cuda.COMM_ABI_VERSION, (ext.abi_version, table.abi_version)
    assert ext.table_size == table.struct_size
    assert table.name == b"nccl", table.name
    assert table.rank(ext.comm) == nc.rank and table.size(ext.comm) == nc.size


def exercise(nc) -> None:
    """allreduce and allgather of device buffers against NumPy; sends and receives around a ring
    (to itself on one rank), receive started before send; test(); byte counters."""
    rank, size = nc.rank, nc.size
    assert 0 <= rank < size and nc.device >= 0

    # allreduce: the float32 sum over the ranks (integers in float32: exact whatever the order)
    base = np.arange(1000, dtype=np.float32)
    buf = nc.to_device(base * (rank + 1))
    nc.allreduce_sum(buf, timeout=60)
    want = base * sum(r + 1 for r in range(size))
    np.testing.assert_array_equal(nc.from_device(buf, np.float32), want)

    # allgather: rank r's 37 int32 equal to r + 1, in rank order
    out = nc.allgather(nc.to_device(np.full(37, rank + 1, np.int32)), timeout=60)
    got = nc.from_device(out, np.int32, (size, 37))
    np.testing.assert_array_equal(got, np.repeat(np.arange(1, size + 1, dtype=np.int32)[:, None], 37, axis=1))

    # a ring: to rank + 1, from rank - 1 (both this rank when alone); the receive started first
    to, frm = (rank + 1) % size, (rank - 1) % size
    n = 4096 + 4
    nc.reset_counters()
    send = nc.to_device((np.arange(n, dtype=np.int64) * 7 + rank).astype(np.uint8))
    recv = nc.empty(n)
    recv.zero()
    r = nc.irecv(recv, frm, tag=11)
    s = nc.isend(send, to, tag=11)
    nc.wait(s, timeout=60)
    deadline = time.monotonic() + 60
    while not nc.test(r):   # handed to NCCL with the send, as one group, by the wait above
        assert time.monotonic() < deadline, "the receive did not complete in 60 s"
    want = (np.arange(n, dtype=np.int64) * 7 + frm).astype(np.uint8)
    np.testing.assert_array_equal(nc.from_device(recv, np.uint8), want)
    c = nc.counters()
    assert c["sent"][to] == n and c["received"][frm] == n, c
    assert sum(c["sent"]) == n and sum(c["received"]) == n, c

    # several messages to one peer, matched in the order started (NCCL has no tags)
    bufs = [nc.to_device(np.full(16 + k, k + 10 * rank, np.uint8)) for k in range(3)]
    outs = [nc.empty(16 + k) for k in range(3)]
    reqs = [nc.isend(b, to, tag=20 + k) for k, b in enumerate(bufs)] + [nc.irecv(o, frm, tag=20 + k)
                                                                         for k, o in enumerate(outs)]
    for q in reqs:
        nc.wait(q, timeout=60)
    for k, o in enumerate(outs):
        assert bytes(o.download()) == bytes([k + 10 * frm]) * (16 + k)
    read_capsule(nc)


def timeout_names_the_request(nc) -> None:
    """A receive no one sends: wait(0.5 s) raises CommTimeoutError naming it (NCCL hangs an
    unmatched receive on the stream), and close() then aborts the communicator and returns 1 (the
    request left).  Should NCCL refuse the lone receive instead, the failure must name it too, and
    no request is left."""
    lonely = nc.empty(8)
    r = nc.irecv(lonely, nc.rank, tag=99)
    named = f"receive from rank {nc.rank}, tag 99, 8 bytes"
    try:
        nc.wait(r, timeout=0.5)
    except sw.distributed.CommTimeoutError as exc:
        assert named in str(exc), str(exc)
        assert nc.close() == 1
        print("lone receive: timed out, close() aborted the communicator", flush=True)
    except RuntimeError as exc:
        assert named in str(exc), str(exc)
        assert nc.close() == 0
        print(f"lone receive: refused by NCCL: {exc}", flush=True)
    else:
        raise AssertionError("a receive without a send completed")


def main(case: str) -> None:
    if case == "alone":
        nc = sw.distributed.nccl_comm(None)
        assert (nc.rank, nc.size) == (0, 1)
        exercise(nc)
        timeout_names_the_request(nc)
        print("[nccl ok: rank 0]", flush=True)
        return
    comm = sw.distributed.init(abort_on_exception=False)
    try:
        nc = sw.distributed.nccl_comm(comm, timeout=45)
    except sw.distributed.NCCLUnavailableError as exc:
        if comm.size > 1:
            print(f"[nccl refused: rank {comm.rank}: {exc}]", flush=True)
            return
        raise
    assert (nc.rank, nc.size, nc.local_rank) == (comm.rank, comm.size, comm.local_rank)
    exercise(nc)
    assert nc.close() == 0
    print(f"[nccl ok: rank {comm.rank}]", flush=True)


if __name__ == "__main__":
    main(sys.argv[1])
