"""The executor's worker threads: started once, reused every step, one per shared core."""
from __future__ import annotations

import gc
import threading

import numpy as np
import pytest

import shardwise as sw
from shardwise.train import SGD, Trainer
from shardwise.worker_pool import WorkerPool


def test_jobs_run_on_the_same_distinct_threads_every_time():
    pool = WorkerPool(3)
    seen = []
    for _ in range(4):
        ids = [None] * 3

        def job(k):
            ids[k] = threading.get_ident()
        pool.run([lambda k=k: job(k) for k in range(3)])
        seen.append(tuple(ids))
    assert len(set(seen[0])) == 3 and threading.get_ident() not in seen[0]
    assert all(s == seen[0] for s in seen)
    pool.close()


def test_a_failing_job_is_raised_after_the_others_finish():
    pool = WorkerPool(2)
    finished = threading.Event()

    def slow():
        finished.wait(0.05)
        finished.set()

    def bad():
        raise ValueError("job failed")
    with pytest.raises(ValueError, match="job failed"):
        pool.run([bad, slow])
    assert finished.is_set()
    pool.run([lambda: None, lambda: None])   # still usable
    pool.close()


def test_bad_use_is_refused():
    with pytest.raises(ValueError, match="at least one"):
        WorkerPool(0)
    pool = WorkerPool(1)
    with pytest.raises(ValueError, match="2 jobs for a pool of 1"):
        pool.run([lambda: None, lambda: None])
    pool.close()
    pool.close()
    with pytest.raises(RuntimeError, match="closed"):
        pool.run([lambda: None])


def cpu_workers(n: int, cores: int) -> sw.DeviceGraph:
    d = sw.DeviceGraph.cpu(n)
    d.shared_cores = cores
    return d


def batch(g: sw.Graph):
    rng = np.random.default_rng(3)
    return rng.standard_normal(g.ops[0].shape).astype(np.float32), rng.integers(0, 10, g.ops[0].shape[0])


def test_four_workers_on_two_cores_run_on_two_threads_like_one_thread():
    """Thread c runs devices c and c + 2 in program order; the result is the serial run's, bit for bit."""
    g = sw.models.lenet5(batch=8)
    plan = sw.strategies.data_parallel(g, cpu_workers(4, 2))
    a, b = Trainer(g, plan, optimizer=SGD(lr=0.1)), Trainer(g, plan, optimizer=SGD(lr=0.1))
    b.set_weights(a.get_weights())
    x, y = batch(g)
    assert a.executor.threads() == 2
    images, labels = a._check_batch(x, y)
    for _ in range(2):
        assert a.executor.run(images, labels, optimizer=a.optimizer, threads=True) == \
            b.executor.run(images, labels, optimizer=b.optimizer, threads=False)
    assert len(a.executor._worker_pool()) == 2
    for k, v in a.get_weights().items():
        assert np.array_equal(v, b.get_weights()[k]), k


def test_one_thread_per_device_when_the_cores_suffice():
    g = sw.models.lenet5(batch=8)
    assert Trainer(g, sw.strategies.data_parallel(g, cpu_workers(3, 8))).executor.threads() == 3
    assert Trainer(g, sw.strategies.data_parallel(g, cpu_workers(3, 1))).executor.threads() == 1


def test_the_threads_end_when_the_trainer_goes_away():
    g = sw.models.lenet5(batch=8)
    t = Trainer(g, sw.strategies.data_parallel(g, cpu_workers(2, 2)))
    t.step(*batch(g))
    threads = list(t.executor._worker_pool()._threads)
    assert all(th.is_alive() for th in threads)
    del t
    gc.collect()
    for th in threads:
        th.join(timeout=10)
    assert not any(th.is_alive() for th in threads)
