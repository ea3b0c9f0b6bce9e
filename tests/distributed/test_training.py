"""Training across processes on loopback: `mpiexec -n 2` and `-n 4` on tests/distributed/train_cases.py.

Each rank checks itself against the one-process Trainer of the same plan, built in the same
process (losses, weights, optimizer state bitwise; bytes on the wire equal to the plan's), so a
case passes when every rank prints its "[case ok: rank R]".  Every launch runs under a hard
timeout (mpi_launch.py); skipped with the reason where shardwise._mpi is not built.
The tests at the end need no MPI: the split of a task graph over ranks and its planned bytes.
"""
from __future__ import annotations

import os
import re

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import ConfigError

from mpi_launch import _need_mpi, launch_script

CASES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "train_cases.py")


def _ok(out: str, n: int) -> bool:
    return sorted(re.findall(r"\[case ok: rank (\d+)\]", out)) == [str(r) for r in range(n)]


@pytest.mark.parametrize("n, seed", [(2, 0), (4, 1)])
def test_random_plans_train_bitwise_as_one_process(n, seed):
    """Random plans of LeNet-5 and an every-op graph (batch norm), SGD and Adam, one step at a
    time and two in flight, fifo and critical-path: bitwise the one-process numbers; each
    step's bytes on the wire are the task graph's planned bytes of the rank."""
    _need_mpi()
    rc, out, _ = launch_script(n, CASES, "random_plans", SEED=str(seed), timeout=120)
    assert rc == 0 and _ok(out, n), out


@pytest.mark.parametrize("n", [2, 4])
def test_zero_trains_bitwise_as_one_process(n):
    """sync zero (sharded optimizer state) across processes: bitwise the one-process numbers."""
    _need_mpi()
    rc, out, _ = launch_script(n, CASES, "zero_plans", timeout=120)
    assert rc == 0 and _ok(out, n), out


def test_swap_plan_across_processes():
    _need_mpi()
    rc, out, _ = launch_script(2, CASES, "swapped")
    assert rc == 0 and _ok(out, 2), out


def test_local_samples_predict_and_checkpoints(tmp_path):
    """Rank-local data (local=True), predictions gathered from every rank, a checkpoint written
    once by the job loading into one process, and one process's into the job."""
    _need_mpi()
    rc, out, _ = launch_script(2, CASES, "local_data_and_checkpoints", CKPT=str(tmp_path / "job.ckpt"))
    assert rc == 0 and _ok(out, 2), out


def test_ranks_with_different_plans_stop_at_start_up():
    """The last rank builds another plan: the job ends non-zero within seconds, the message
    naming what differs (the plan, the task graph) and the rank."""
    _need_mpi()
    rc, out, took = launch_script(2, CASES, "plan_mismatch")
    assert rc != 0 and took < 30, (rc, took, out)
    assert "went on with a plan" not in out
    assert "do not run the same plan" in out and "the plan of ranks [1] differs from rank 0's" in out, out


def test_a_lost_rank_is_named_by_the_watchdog():
    """The last rank never takes its step: the others' steps fail after SHARDWISE_COMM_TIMEOUT
    (3 s) naming the message (op, bytes, devices) and the rank they wait for; the job ends."""
    _need_mpi()
    rc, out, took = launch_script(2, CASES, "lost_peer", SHARDWISE_COMM_TIMEOUT="3")
    assert rc != 0 and took < 30, (rc, took, out)
    assert "finished a step without its peer" not in out
    assert "CommTimeoutError" in out and "for a message from rank 1 that never came" in out, out
    assert re.search(r"op '\w+''s \d+ bytes from device \d to device \d", out), out


def test_a_rank_that_raises_ends_the_job():
    _need_mpi()
    rc, out, took = launch_script(2, CASES, "dies_in_step")
    assert rc != 0 and took < 30, (rc, took, out)
    assert "finished a step without its peer" not in out
    assert "rank 1 fails on purpose" in out and "rank 1 of 2 aborts the job" in out, out


# ------------------------------------------------------------------ no MPI needed
def _plans():
    g = sw.models.lenet5(batch=8)
    d = sw.DeviceGraph.cpu(4)
    from strategies_random import random_plan

    rng = np.random.default_rng(5)
    ring = sw.CostOptions(sync="ring")   # its chunks travel around the ring: copies like any other
    return g, [sw.strategies.data_parallel(g, d), sw.strategies.model_parallel(g, d), sw.search(g, d),
               sw.strategies.data_parallel(g, d, ring)] + \
        [random_plan(g, d, rng, reductions=True) for _ in range(3)]


def test_split_graph_sends_each_cross_rank_copy_once():
    """Every copy between two ranks' devices becomes a send on its source device followed by a
    recv on its destination, with the bytes of the box moved; copies within a rank stay; the
    per-rank planned bytes add up to what the sends carry, and with every device its own rank
    to the one-process graph's bytes_moved() (and the cost model's bytes for these plans)."""
    g, plans = _plans()
    for plan in plans:
        one = sw.lower(plan)
        for ranks in (2, [0, 1, 1, 0], 4):
            tg = sw.lower(plan, ranks=ranks)
            rank = tg.ranks
            cross = [t for t in one.tasks if t.kind == "copy" and t.src_device is not None
                     and rank[t.src_device] != rank[t.device]]
            sends = [t for t in tg.tasks if t.kind == "send"]
            recvs = [t for t in tg.tasks if t.kind == "recv"]
            assert len(sends) == len(recvs) == len(cross)
            for s, r in zip(sends, recvs):
                assert r.id == s.id + 1 and s.id in r.deps
                assert s.src_device == r.device and r.src_device == s.device
                assert rank[s.device] != rank[r.device] and s.nbytes == r.nbytes > 0
                assert s.writes == () and r.reads == ()
            kept = [t for t in tg.tasks if t.kind == "copy" and t.src_device is not None and t.src_device != t.device]
            assert all(rank[t.src_device] == rank[t.device] for t in kept)
            assert len(tg.tasks) == len(one.tasks) + len(sends)
            per_rank = tg.rank_bytes()
            assert sum(r["sent"] for r in per_rank) == sum(r["received"] for r in per_rank) == \
                sum(t.nbytes for t in cross)
        every = sw.distributed.planned_bytes(plan, list(range(4)))
        assert sum(r["sent"] for r in every) == one.bytes_moved() == pytest.approx(plan.bytes_moved)


def test_split_keeps_every_other_task_and_its_order():
    """Apart from the halves, the split graph is the one-process graph task for task (kinds,
    devices, buffers), in the same order."""
    g, plans = _plans()
    for plan in plans:
        one = sw.lower(plan)
        tg = sw.lower(plan, ranks=2)
        rest = [(t.kind, t.device, t.reads, t.writes) for t in tg.tasks if t.kind not in ("send", "recv")]
        orig = [(t.kind, t.device, t.reads, t.writes) for t in one.tasks
                if not (t.kind == "copy" and t.src_device is not None and tg.ranks[t.src_device] != tg.ranks[t.device])]
        assert rest == orig
        assert [b.__dict__ for b in tg.buffers] == [b.__dict__ for b in one.buffers]


def test_bad_ranks_are_refused():
    g, plans = _plans()
    plan = plans[0]
    for bad, match in ((5, "every rank needs at least one device"), ([0, 1], "one per device"),
                       ([0, 2, 2, 0], r"ranks \[1\] have none"), (0, "positive"), ("two", "one rank per device")):
        with pytest.raises(ConfigError, match=match):
            sw.lower(plan, ranks=bad)
    with pytest.raises(ConfigError, match="comm"):
        from shardwise.train.runtime import NativeExecutor

        NativeExecutor(g, plan, sw.lower(plan, ranks=2))


def test_cli_train_under_mpiexec_prints_once_the_one_process_numbers(tmp_path):
    """`mpiexec -n 2 python -m shardwise train ...`: rank 0 alone prints, and its epoch loss and
    test accuracy are those of the same command in one process."""
    _need_mpi()
    import subprocess
    import sys

    from mpi_launch import _env, mpiexec_n, run_hard

    args = ["-m", "shardwise", "train", "--model", "lenet5", "--devices", "4", "--plan", "search", "--epochs", "1",
            "--batch", "32", "--quiet"]
    one = subprocess.run([sys.executable] + args, capture_output=True, text=True, env=_env(), timeout=300)
    assert one.returncode == 0, one.stderr
    cmd, extra = mpiexec_n(2)
    rc, out, _ = run_hard(cmd + [sys.executable] + args, _env(**extra), timeout=120)
    assert rc == 0, out

    def numbers(text):
        return re.findall(r"loss (\d+\.\d+)", text), re.findall(r"test accuracy .*? after \d+ steps", text)

    assert out.count("test accuracy") == 1, out
    assert numbers(out) == numbers(one.stdout) and numbers(out)[1], (out, one.stdout)


def test_a_split_task_graph_is_simulated_through_the_plan():
    """A graph split over ranks has no link time on its sends and receives: simulate refuses it,
    pointing at sw.simulate(plan, ranks=...), which times those copies on the rank link."""
    g, plans = _plans()
    with pytest.raises(ConfigError, match="ranks="):
        sw.simulate(sw.lower(plans[0], ranks=2))
    assert sw.simulate(plans[0], ranks=2).ranks == [0, 0, 1, 1]
