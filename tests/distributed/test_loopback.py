"""The loopback communicator (a test double: csrc/exec/comm_loopback.c) and the multi-rank runtime on it.

Each rank is a thread of this process holding one endpoint, so none of this needs MPI, and the
runtime's multi-rank code (exec/messages.c, the CPU backend's arrival polling) runs where the
sanitizers can see it (`make tsan` runs this file).  First the communicator's semantics, as
tests/distributed/mpi_cases.py checks MPI's; then Trainers of random plans, one per thread,
bitwise the one-process Trainer of the same plan (as train_cases.py does under mpiexec), and a
rank that stops stepping.

Every collective (a Trainer's start-up handshake, get_weights, updates) is called by every thread.
"""
from __future__ import annotations

import ctypes
import functools
import threading
import time

import numpy as np
import pytest

import shardwise as sw
from shardwise.distributed import CommTimeoutError
from shardwise.distributed.loopback import loopback_comms

from shared_graphs import mixed_graph
from strategies_random import random_plan
from train_cases import _batches, _optimizer, _same_weights

# seconds a thread may take for its part of a test (sanitizer builds are many times slower)
JOIN = 600


def in_threads(n, fn, *args):
    """fn(rank, *args) on n threads at once: the list of their results; the first exception re-raised."""
    out, errors = [None] * n, []

    def run(r):
        try:
            out[r] = fn(r, *args)
        except BaseException as exc:  # noqa: BLE001  (re-raised by the caller's thread)
            errors.append((r, exc))

    pool = [threading.Thread(target=run, args=(r,), name=f"rank {r}") for r in range(n)]
    for th in pool:
        th.start()
    for th in pool:
        th.join(JOIN)
        assert not th.is_alive(), f"{th.name} did not finish in {JOIN} s"
    if errors:
        r, exc = sorted(errors, key=lambda e: e[0])[0]
        raise AssertionError(f"rank {r}: {type(exc).__name__}: {exc}") from exc
    return out


# ---------------------------------------------------------------- the communicator

def test_endpoints_are_the_ranks_of_one_job():
    comms = loopback_comms(3)
    assert [(c.rank, c.size, c.local_rank, c.library) for c in comms] == [(r, 3, r, "loopback") for r in range(3)]
    assert comms[0].thread_level == "MPI_THREAD_MULTIPLE" and not comms[0].initialized_here
    assert comms[0]._impl.max_tag == 2**31 - 1
    assert "library='loopback'" in repr(comms[1])
    sw.distributed.check_world(3, comms[0], environ={})
    with pytest.raises(ValueError):
        loopback_comms(0)


def test_the_capsule_is_the_table_as_c_reads_it():
    """The sw_comm_ext the runtime takes: ABI version, table size, the table named "loopback", and
    its rank and size slots called on the endpoint."""
    api = ctypes.pythonapi
    api.PyCapsule_GetPointer.restype = ctypes.c_void_p
    api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
    comms = loopback_comms(2)
    cap = comms[1]._capsule()
    ext = ctypes.cast(api.PyCapsule_GetPointer(cap, b"shardwise.comm"), ctypes.POINTER(ctypes.c_void_p * 4)).contents
    assert ext[0] & 0xffffffff == 1   # SW_COMM_ABI_VERSION (an int, padded)
    table = ctypes.cast(ext[2], ctypes.POINTER(ctypes.c_void_p * 6)).contents
    assert ctypes.string_at(table[2]) == b"loopback"
    getter = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p)
    assert getter(table[3])(ext[3]) == 1 and getter(table[4])(ext[3]) == 2


@pytest.mark.parametrize("n", [2, 4])
def test_round_trips_between_every_pair_from_threads(n):
    """Every ordered pair: each thread posts its receives, sends to every other thread, waits; the
    bytes arrive whole and the counters per peer are the bytes sent; then a ring of float32
    round trips, and test() polling a receive until it completes (then it is consumed)."""
    comms = loopback_comms(n)

    def nbytes(src, dst):
        return (src * 100 + dst) * 4 + 64

    def rank(r):
        comm = comms[r]
        bufs, reqs = {}, []
        for src in range(n):
            if src != r:
                bufs[src] = np.zeros(nbytes(src, r), np.uint8)
                reqs.append(comm.irecv(bufs[src], src, src * n + r))
        reqs += [comm.isend((np.arange(nbytes(r, d)) % 251).astype(np.uint8) + r, d, r * n + d)
                 for d in range(n) if d != r]
        for q in reqs:
            comm.wait(q, timeout=30)
        for src, buf in bufs.items():
            assert np.array_equal(buf, (np.arange(nbytes(src, r)) % 251).astype(np.uint8) + src), (r, src)
        c = comm.counters()
        assert c["sent"] == [0 if d == r else nbytes(r, d) for d in range(n)], c
        assert c["received"] == [0 if s == r else nbytes(s, r) for s in range(n)], c
        comm.reset_counters()
        right, left = (r + 1) % n, (r - 1) % n
        x = np.full(1024, r, np.float32)
        for k in range(5):
            q = comm.irecv(y := np.empty(1024, np.float32), left, 1000 + k)
            comm.send_bytes(x, right, 1000 + k, timeout=30)
            comm.wait(q, timeout=30)
            assert np.all(y == (r - 1 - k) % n), (k, y[:3])
            x = y.copy()
        c = comm.counters()
        assert c["sent"][right] == c["received"][left] == 5 * 4096 and sum(c["sent"]) == 5 * 4096, c
        q = comm.irecv(z := np.empty(16, np.uint8), left, 2000)
        comm.send_bytes(np.full(16, r, np.uint8), right, 2000, timeout=30)
        deadline = time.monotonic() + 30
        while not comm.test(q):
            assert time.monotonic() < deadline
            time.sleep(0.001)
        assert np.all(z == left)
        with pytest.raises(ValueError, match="not outstanding"):
            comm.wait(q, timeout=1)

    in_threads(n, rank)


def test_messages_match_in_the_order_sent_and_received():
    """Between one pair with one tag, messages arrive in the order sent, whether the receives are
    posted before or after; other tags and other senders never take their place."""
    a, b, c = loopback_comms(3)
    for k in range(3):   # sent before any receive: queued in order
        a.isend(np.full(4, k, np.int32), 1, 5)
    a.isend(np.full(4, 9, np.int32), 1, 6)
    c.isend(np.full(4, 7, np.int32), 1, 5)
    got = [b.recv_bytes(np.empty(4, np.int32), 0, 5, timeout=5)[0] for _ in range(3)]
    assert got == [0, 1, 2]
    assert b.recv_bytes(np.empty(4, np.int32), 2, 5, timeout=5)[0] == 7
    assert b.recv_bytes(np.empty(4, np.int32), 0, 6, timeout=5)[0] == 9
    # receives posted first: matched in the order posted
    bufs = [np.full(2, -1, np.int64) for _ in range(3)]
    reqs = [b.irecv(buf, 0, 8) for buf in bufs]
    other = b.irecv(o := np.full(2, -1, np.int64), 0, 9)
    assert not any(b.test(q) for q in reqs) and not b.test(other)
    a.isend(np.array([90, 90], np.int64), 1, 9)
    for k in range(3):
        a.isend(np.array([k, k], np.int64), 1, 8)
    for q in reqs:
        b.wait(q, timeout=5)
    b.wait(other, timeout=5)
    assert [int(x[0]) for x in bufs] == [0, 1, 2] and o[0] == 90


def test_a_receive_takes_the_exact_size():
    """A message longer or shorter than its receive fails the wait (ValueError naming peer, tag and
    both sizes); the next message of the pair is not disturbed."""
    a, b = loopback_comms(2)
    a.isend(bytes(16), 1, 3)
    with pytest.raises(ValueError, match=r"receive from rank 0, tag 3, 8 bytes failed: the message was 16 bytes, "
                                         r"not the 8 bytes expected"):
        b.recv_bytes(8, 0, 3, timeout=5)
    q = b.irecv(bytearray(32), 0, 3)   # posted first, then a shorter message
    a.isend(bytes(4), 1, 3)
    with pytest.raises(ValueError, match="the message was 4 bytes, not the 32 bytes expected"):
        b.wait(q, timeout=5)
    a.isend(b"abcd", 1, 3)
    assert b.recv_bytes(4, 0, 3, timeout=5) == bytearray(b"abcd")
    with pytest.raises(ValueError, match=r"ranks 0\.\.1"):
        a.isend(b"x", 2, 0)
    with pytest.raises(ValueError, match="outside"):
        a.isend(b"x", 1, -1)


def test_a_wait_times_out_naming_the_request_which_stays_outstanding():
    a, b = loopback_comms(2)
    q = b.irecv(buf := bytearray(32), 0, 4242)
    t = time.monotonic()
    with pytest.raises(CommTimeoutError, match=r"rank 1 waited 0\.3 s for the receive from rank 0, tag 4242, "
                                               r"32 bytes, and it has not completed") as info:
        b.wait(q, timeout=0.3)
    assert isinstance(info.value, TimeoutError) and 0.29 < time.monotonic() - t < 10
    assert not b.test(q)          # still outstanding: test never blocks
    a.send_bytes(b"z" * 32, 1, 4242)
    b.wait(q, timeout=5)          # and it completes later
    assert bytes(buf) == b"z" * 32
    # a collective that another rank never joins
    with pytest.raises(CommTimeoutError, match=r"rank 0 waited 0\.2 s for the allgather of 3 bytes over 2 ranks"):
        a.allgather_bytes(b"abc", timeout=0.2)


@pytest.mark.parametrize("n", [2, 4])
def test_collectives_meet_in_order_and_sum_in_rank_order(n):
    """Every thread's k-th collective meets the others' k-th, whatever their timing; allgather in
    rank order; allreduce_f32 bitwise the float32 sum ((r0 + r1) + r2) + ... ; byte counters leave
    collectives out."""
    comms = loopback_comms(n)
    rng = np.random.default_rng(0)
    values = (rng.standard_normal((n, 1000)) * 10.0 ** rng.integers(-6, 7, (n, 1000))).astype(np.float32)
    want = values[0].copy()
    for r in range(1, n):
        want = want + values[r]

    def rank(r):
        comm = comms[r]
        out = []
        for k in range(6):
            time.sleep(0.001 * ((r * 7 + k) % 4))   # arrive in different orders
            out.append(comm.allgather_bytes(bytes([r, k]) * (k + 1), timeout=30))
            out.append(comm.allreduce_sum(values[r].copy(), timeout=30))
        assert comm.counters() == {"sent": [0] * n, "received": [0] * n}
        return out

    results = in_threads(n, rank)
    for r in range(n):
        for k in range(6):
            assert results[r][2 * k] == [bytes([q, k]) * (k + 1) for q in range(n)]
            assert results[r][2 * k + 1].tobytes() == want.tobytes(), (r, k)
    # kinds or sizes that differ: every rank's collective fails, naming them
    a, b = loopback_comms(2)
    with pytest.raises(AssertionError, match="allgather of 3 bytes"):
        in_threads(2, lambda r: (a, b)[r].allgather_bytes(b"abc" if r == 0 else b"abcd", timeout=30))


def test_closing_cancels_receives_and_counts_unfinished_collectives():
    a, b, c = loopback_comms(3)
    b.irecv(np.zeros(8, np.uint8), 0, 1)
    q = a.irecv(np.zeros(4, np.uint8), 2, 1)   # a's own receive: cancelled when a closes
    assert b.close() == 0 and b.closed
    a.isend(np.ones(8, np.uint8), 1, 1)        # to a closed endpoint: kept, never written anywhere
    assert a.close() == 0
    with pytest.raises(ValueError, match="closed"):
        a.wait(q)
    assert c.close() == 0


# ---------------------------------------------------------------- the runtime, one rank per thread

def _train(r, comms, g, plan, kw, x, y, flight):
    t = sw.Trainer(g, plan, comm=comms[r], **kw)
    losses, counts = [], []
    if flight == 1:
        for i in range(len(x)):
            losses.append(t.step(x[i], y[i]))
            counts.append(t.comm_bytes())
    else:
        losses = t.fit(x.reshape((-1,) + x.shape[2:]), y.reshape(-1), epochs=1)
        counts.append(t.comm_bytes())   # the last launch: `flight` steps back to back
    return losses, counts, t.get_weights(), t.executor.updates(), t.steps   # collectives: every thread


def _cases(n, seed):
    """(model, ndev, optimizer, sync, steps_in_flight): both models, both optimizers, one and two
    steps in flight, the ring too; 3 devices where the job has at most 3 ranks."""
    rng = np.random.default_rng(seed)
    for model in ("lenet5", "mixed"):
        for ndev, opt, sync, flight in ((4, "sgd", "parameter_server", 1), (4, "adam", "parameter_server", 2),
                                        (3, "adam", "parameter_server", 1), (4, "sgd", "ring", 2)):
            if ndev >= n:
                yield model, ndev, opt, sync, flight, rng


@pytest.mark.parametrize("n, seed", [(2, 0), (2, 2), (3, 3), (4, 1)])
def test_random_plans_train_bitwise_as_one_process(n, seed, monkeypatch):
    """n threads, each a rank's Trainer of a random plan (LeNet-5 and the every-op graph; SGD and
    Adam; parameter server and ring; one step at a time and two in flight): losses, weights and
    update counts bitwise the one-process Trainer's; each step's bytes are the plan's (planned_bytes)."""
    monkeypatch.setenv("SHARDWISE_COMM_TIMEOUT", "300")   # a failing rank fails its peers in time
    cases = 0
    for model, ndev, opt, sync, flight, rng in _cases(n, seed):
        g = sw.models.lenet5(batch=8) if model == "lenet5" else mixed_graph(8)
        d = sw.DeviceGraph.cpu(ndev)
        plan = random_plan(g, d, rng, reductions=bool(rng.integers(2)) and sync != "ring")
        if sync == "ring":
            plan = sw.Plan(g, d, plan.configs, sw.CostOptions(sync="ring"))
        schedule = "critical_path" if rng.integers(2) else "fifo"
        what = f"{model} on {ndev} devices, {n} ranks, {opt}, {sync}, steps_in_flight {flight}, {schedule}"
        kw = dict(optimizer=_optimizer(opt), seed=3, steps_in_flight=flight, schedule=schedule)
        x, y = _batches(g, 4, 7)
        comms = loopback_comms(n)
        # each rank its own optimizer object, as each process of a job has
        ranks = in_threads(n, lambda r: _train(r, comms, g, plan, dict(kw, optimizer=_optimizer(opt)), x, y, flight))
        ref = sw.Trainer(g, plan, **kw)
        if flight == 1:
            want = [ref.step(x[i], y[i]) for i in range(4)]
        else:
            want = ref.fit(x.reshape((-1,) + x.shape[2:]), y.reshape(-1), epochs=1)
        planned = sw.distributed.planned_bytes(plan, n, optimizer_state=ref.optimizer.state_buffers)
        for r, (losses, counts, weights, updates, steps) in enumerate(ranks):
            assert losses == want, f"{what}: rank {r} losses {losses} != {want}"
            assert steps == ref.steps == 4, what
            _same_weights(weights, ref.get_weights(), f"{what}, rank {r}")
            assert updates == ref.executor.updates(), what
            per_launch = [{k: v * flight for k, v in planned[r].items()}] * (4 // flight if flight == 1 else 1)
            assert counts == per_launch, (what, r, counts, planned[r])
        cases += 1
    assert cases >= 4


@pytest.mark.parametrize("n", [2, 4])
def test_zero_trains_bitwise_as_one_process(n, monkeypatch):
    """sync zero across ranks: the allgather's weight chunks cross ranks like the ring's gradient
    chunks, the updates of chunks run on their owners' ranks.  Data parallel and a random plan on
    4 devices, Adam and SGD with momentum: losses, weights and update counts bitwise the
    one-process Trainer's (itself the ring's: tests/iteration/test_zero_sync.py), the bytes of
    each step the plan's."""
    monkeypatch.setenv("SHARDWISE_COMM_TIMEOUT", "300")
    g = mixed_graph(8)
    d = sw.DeviceGraph.cpu(4)
    zero = sw.CostOptions(sync="zero")
    rng = np.random.default_rng(n)
    for plan, opt in ((sw.strategies.data_parallel(g, d, zero), "adam"),
                      (sw.Plan(g, d, random_plan(g, d, rng).configs, zero), "sgd")):
        kw = dict(optimizer=_optimizer(opt), seed=3)
        x, y = _batches(g, 3, 5)
        comms = loopback_comms(n)
        ranks = in_threads(n, lambda r: _train(r, comms, g, plan, dict(kw, optimizer=_optimizer(opt)), x, y, 1))
        ref = sw.Trainer(g, plan, **kw)
        want = [ref.step(x[i], y[i]) for i in range(3)]
        planned = sw.distributed.planned_bytes(plan, n, optimizer_state=ref.optimizer.state_buffers)
        for r, (losses, counts, weights, updates, steps) in enumerate(ranks):
            assert losses == want, (opt, r)
            _same_weights(weights, ref.get_weights(), f"zero, {opt}, rank {r} of {n}")
            assert updates == ref.executor.updates(), (opt, r)
            assert counts == [planned[r]] * 3, (opt, r)


@pytest.mark.parametrize("n", [2, 4])
def test_a_rank_that_stops_stepping_is_named(n, monkeypatch):
    """The last thread builds its Trainer and never steps: every other thread's step fails with
    CommTimeoutError after SHARDWISE_COMM_TIMEOUT (1 s), naming the message it waited for and the
    rank; the one waiting on the lost rank directly names it."""
    import shardwise.distributed.startup as startup

    monkeypatch.setenv("SHARDWISE_COMM_TIMEOUT", "1")
    # the start-up handshake gets time (the threads lower their plans one after another); the steps 1 s
    monkeypatch.setattr(startup, "check_same_job", functools.partial(startup.check_same_job, timeout=300))
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4))
    x, y = _batches(g, 1, 0)
    comms = loopback_comms(n)
    lost = n - 1
    built = threading.Barrier(n)

    def rank(r):
        t = sw.Trainer(g, plan, comm=comms[r])
        built.wait(JOIN)
        if r == lost:
            return None
        start = time.monotonic()
        with pytest.raises(CommTimeoutError) as info:
            t.step(x[0], y[0])
        return str(info.value), time.monotonic() - start

    out = in_threads(n, rank)
    texts = [o[0] for o in out if o is not None]
    assert len(texts) == n - 1
    assert all(1.0 <= took < 120 for _, took in out[:-1]), out
    assert all("for a message from rank" in s for s in texts), texts
    assert any(f"for a message from rank {lost} that never came" in s for s in texts), texts
    assert all("is rank" in s and "alive and running the same plan?" in s for s in texts), texts


def test_the_default_schedule_is_critical_path_across_processes_fifo_in_one():
    """schedule="auto" (the default): a rank of several runs the critical-path schedule (a rank
    sends its gradients as they are ready instead of after the other rank's updates), one process
    fifo; a swap plan keeps fifo (its streams are the swap's)."""
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(4))
    assert sw.Trainer(g, plan).schedule is None
    comms = loopback_comms(2)
    got = in_threads(2, lambda r: sw.Trainer(g, plan, comm=comms[r]).schedule)
    assert all(s is not None and s.policy == "critical_path" for s in got), got


@pytest.mark.parametrize("n", [2, 4])
def test_recomputation_across_ranks_trains_bitwise_as_one_process_keeping_everything(n, monkeypatch):
    """Recompute tasks in a graph split over ranks (each rank runs its devices' recomputes): the
    weights and losses are bitwise those of one process keeping every feature map."""
    monkeypatch.setenv("SHARDWISE_COMM_TIMEOUT", "300")
    g = sw.models.lenet5(batch=8)
    plan = random_plan(g, sw.DeviceGraph.cpu(4), np.random.default_rng(n))
    kw = dict(optimizer=_optimizer("sgd"), seed=3, recompute="all")
    assert sw.lower(plan, recompute="all", ranks=n).counts()["recompute"] > 0
    x, y = _batches(g, 3, 5)
    comms = loopback_comms(n)
    ranks = in_threads(n, lambda r: _train(r, comms, g, plan, dict(kw, optimizer=_optimizer("sgd")), x, y, 1))
    ref = sw.Trainer(g, plan, optimizer=_optimizer("sgd"), seed=3)
    want = [ref.step(x[i], y[i]) for i in range(3)]
    for r, (losses, _, weights, _, steps) in enumerate(ranks):
        assert losses == want and steps == 3, r
        _same_weights(weights, ref.get_weights(), f"rank {r}")
