"""The rank side of tests/distributed/test_comm.py: `mpiexec -n N python mpi_cases.py CASE`.

Each case prints "[case ok: rank R]" when its checks passed on rank R (the test counts them; the
launcher may glue two ranks' lines together, so they are found anywhere in the output) and
fails through an exception otherwise (sw.distributed.init's hook then aborts every rank).
Buffers are kilobytes: these check the comm layer, not its speed.
"""
from __future__ import annotations

import ctypes
import os
import sys
import threading
import time

import numpy as np

import shardwise as sw


def basic(comm):
    """rank, size, local_rank; isend/irecv round trips around a ring and between every pair,
    byte counters equal to the bytes sent; allgather of fingerprints; allreduce; a receive that
    never gets its message times out naming its peer and tag."""
    rank, size = comm.rank, comm.size
    assert 0 <= rank < size and size == int(os.environ["EXPECT_SIZE"]), (rank, size)
    # one machine: the local rank is the rank
    assert comm.local_rank == rank, (comm.local_rank, rank)
    sw.distributed.check_world(size, comm)
    comm.check_same(b"plan-fingerprint", "plan fingerprint", timeout=30)
    comm.reset_counters()    # the handshake's collectives are not counted anyway; start clean

    # every ordered pair (src, dst), src != dst: src sends (src * 100 + dst) * 4 + 64 bytes with tag
    # src * size + dst; every rank posts its receives first, then its sends, then waits on all.
    def nbytes(src, dst):
        return (src * 100 + dst) * 4 + 64

    recv_bufs, reqs = {}, []
    for src in range(size):
        if src != rank:
            recv_bufs[src] = np.zeros(nbytes(src, rank), np.uint8)
            reqs.append(comm.irecv(recv_bufs[src], src, src * size + rank))
    sends = {dst: (np.arange(nbytes(rank, dst)) % 251).astype(np.uint8) + rank for dst in range(size) if dst != rank}
    reqs += [comm.isend(buf, dst, rank * size + dst) for dst, buf in sends.items()]
    for r in reqs:
        comm.wait(r, timeout=30)
    for src, buf in recv_bufs.items():
        want = (np.arange(nbytes(src, rank)) % 251).astype(np.uint8) + src
        assert np.array_equal(buf, want), f"rank {rank}: the message from {src} differs"
    c = comm.counters()
    assert c["sent"] == [0 if d == rank else nbytes(rank, d) for d in range(size)], c
    assert c["received"] == [0 if s == rank else nbytes(s, rank) for s in range(size)], c

    # a ring of float32 round trips: send to the right, receive from the left, 5 times (4 KB)
    comm.reset_counters()
    right, left = (rank + 1) % size, (rank - 1) % size
    x = np.full(1024, rank, np.float32)
    for k in range(5):
        r = comm.irecv(y := np.empty(1024, np.float32), left, 1000 + k)
        comm.send_bytes(x, right, 1000 + k, timeout=30)
        comm.wait(r, timeout=30)
        assert np.all(y == (rank - 1 - k) % size), (k, y[:3])
        x = y.copy()   # pass it on: after k + 1 hops it is the value of the rank k + 1 to the left
    c = comm.counters()
    assert c["sent"][right] == 5 * 4096 and c["received"][left] == 5 * 4096, c
    assert sum(c["sent"]) == 5 * 4096 and sum(c["received"]) == 5 * 4096, c

    # test() polls without blocking; a request is consumed once
    r = comm.irecv(z := np.empty(16, np.uint8), left, 2000)
    comm.send_bytes(np.full(16, rank, np.uint8), right, 2000, timeout=30)
    deadline = time.monotonic() + 30
    while not comm.test(r):
        assert time.monotonic() < deadline
        time.sleep(0.001)
    assert np.all(z == left)
    try:
        comm.wait(r, timeout=1)
        raise AssertionError("a consumed request was waited for again")
    except ValueError as exc:
        assert "not outstanding" in str(exc)

    # fingerprints: every rank's 8 bytes, in rank order
    got = comm.allgather_bytes(rank.to_bytes(8, "little"), timeout=30)
    assert got == [r.to_bytes(8, "little") for r in range(size)], got
    s = comm.allreduce_sum(np.full(300, rank + 1, np.float32), timeout=30)
    assert np.all(s == size * (size + 1) / 2), s[:3]

    # a receive whose message never comes: CommTimeoutError naming peer and tag, within its timeout
    t = time.monotonic()
    try:
        comm.recv_bytes(32, left, 4242, timeout=0.5)
        raise AssertionError("the receive did not time out")
    except sw.distributed.CommTimeoutError as exc:
        assert f"receive from rank {left}, tag 4242, 32 bytes" in str(exc), str(exc)
        assert isinstance(exc, TimeoutError)
    assert time.monotonic() - t < 10
    # everyone is past its timeout before anyone closes (close cancels the receive left over)
    comm.allgather_bytes(b"x", timeout=30)


def threads(comm, nthreads=4, rounds=25):
    """Several threads of one rank send and receive at once (each its own tags, 1 KB messages
    around the ring): the comm thread serves all their queued requests, and the counters add up."""
    rank, size = comm.rank, comm.size
    right, left = (rank + 1) % size, (rank - 1) % size
    comm.reset_counters()
    errors = []

    def worker(t):
        try:
            for k in range(rounds):
                tag = 10000 + t * rounds + k
                r = comm.irecv(got := np.empty(256, np.float32), left, tag)
                comm.send_bytes(np.full(256, rank * 1000 + tag, np.float32), right, tag,
                                timeout=30)
                comm.wait(r, timeout=30)
                assert np.all(got == left * 1000 + tag), (t, k, got[:2])
        except Exception as exc:  # noqa: BLE001  (reported by the main thread)
            errors.append(exc)

    pool = [threading.Thread(target=worker, args=(t,)) for t in range(nthreads)]
    for th in pool:
        th.start()
    for th in pool:
        th.join()
    assert not errors, errors
    c = comm.counters()
    assert c["sent"][right] == c["received"][left] == nthreads * rounds * 1024, c


def capsule(comm):
    """The sw_comm_ext capsule the runtime will take (csrc/exec/comm.h), read as C would: its ABI
    version and table size, the table's name, and its rank/size slots called on its communicator."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    cap = comm._capsule()
    ext_ptr = api.PyCapsule_GetPointer(cap, b"shardwise.comm")

    getter = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)

    class Table(ctypes.Structure):   # the head of sw_comm_i
        _fields_ = [("abi_version", ctypes.c_int), ("struct_size", ctypes.c_size_t), ("name", ctypes.c_char_p),
                    ("rank", getter), ("size", getter), ("local_rank", getter)]

    class Ext(ctypes.Structure):     # sw_comm_ext
        _fields_ = [("abi_version", ctypes.c_int), ("table_size", ctypes.c_size_t),
                    ("i", ctypes.POINTER(Table)), ("comm", ctypes.c_void_p)]

    ext = Ext.from_address(ext_ptr)
    table = ext.i.contents
    assert ext.abi_version == table.abi_version == 1 and ext.table_size == table.struct_size > 100
    assert table.name == b"mpi"
    assert (table.rank(ext.comm), table.size(ext.comm), table.local_rank(ext.comm)) == (
        comm.rank, comm.size, comm.local_rank)


def peer_lost(comm, how):
    """Rank 1 dies (`how`: raise, exit) while rank 0 waits for a message from it with a long
    timeout: the launcher, or the abort of the exception hook, must end rank 0.  sys_exit: rank 1
    exits cleanly with status 3: MPI_Finalize holds it until rank 0's receive times out (3 s here)
    and its exception aborts the job, or the launcher ends the job on seeing status 3."""
    if comm.rank == 1:
        time.sleep(0.2)
        if how == "raise":
            raise RuntimeError("rank 1 fails on purpose")
        if how == "exit":
            os._exit(3)
        sys.exit(3)
    comm.recv_bytes(8, 1, 7, timeout=3 if how == "sys_exit" else 120)
    print("rank 0 got a message that was never sent", flush=True)


def main():
    case = sys.argv[1]
    if case == "singleton":
        # started without mpiexec, with a launcher's variable saying 2: init() must refuse
        comm = sw.distributed.init()
        print(f"not refused: {comm}", flush=True)
        return
    if case.startswith("adopt_"):
        # mpi4py initialises MPI first, at the thread level the case names: init() adopts it (no
        # second MPI_Init, no MPI_Finalize of its own) at SERIALIZED or above, refuses FUNNELED
        import mpi4py
        mpi4py.rc.thread_level = level = case[len("adopt_"):]
        from mpi4py import MPI
        if level == "funneled":
            try:
                sw.distributed.init()
                raise AssertionError("an MPI at MPI_THREAD_FUNNELED was adopted")
            except sw.distributed.MPIUnavailableError as exc:
                assert "MPI_THREAD_FUNNELED" in str(exc) and "MPI_THREAD_SERIALIZED" in str(exc), str(exc)
            print(f"[case ok: rank {MPI.COMM_WORLD.Get_rank()}]", flush=True)
            return
        comm = sw.distributed.init()
        assert not comm.initialized_here and comm.thread_level == f"MPI_THREAD_{level.upper()}"
        assert comm.rank == MPI.COMM_WORLD.Get_rank() and comm.size == MPI.COMM_WORLD.Get_size()
        assert comm.allgather_bytes(bytes([comm.rank]), timeout=30) == [bytes([r]) for r in range(comm.size)]
        assert MPI.COMM_WORLD.allgather(comm.rank) == list(range(comm.size))
        print(f"[case ok: rank {comm.rank}]", flush=True)
        return   # at exit: shardwise closes its communicator, mpi4py finalises MPI
    comm = sw.distributed.init()
    if case == "basic":
        basic(comm)
        threads(comm)
        capsule(comm)
    elif case.startswith("lost_"):
        peer_lost(comm, case[len("lost_"):])
    else:
        raise SystemExit(f"unknown case {case}")
    print(f"[case ok: rank {comm.rank}]", flush=True)


if __name__ == "__main__":
    main()
