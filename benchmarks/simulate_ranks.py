"""The simulator's multi-process step beside a measured one: `sw.simulate(plan, ranks=...)`.

    mpiexec -n 2 python benchmarks/simulate_ranks.py [--models lenet5,resnet18_small] [--steps 10] [--batch 64]

(`mpiexec`: the launcher of the MPI shardwise._mpi was built against, `python -m shardwise
info` names it.)  For each model on ``DeviceGraph.cpu(ranks)`` (one CPU worker per rank):
``sw.profile(..., comm=comm)`` (rank 0 measures the compute, ranks 0 and 1 the link between
them through the comm layer), then data parallelism and the plan searched with the profile,
each simulated with ``ranks=comm.size`` and the profile's rank link.  Where the trainer takes a
communicator (``Trainer(graph, plan, comm=comm)``: the multi-process runtime, being built), each
plan's step is measured too -- every rank steps its devices, a barrier (an all-gather) before
each step, the step's time the slowest rank's, the median of ``--steps`` -- and the error printed
beside it.  The target: within 15% for LeNet-5 and the scaled ResNet-18 at 2 ranks (a
benchmark, not a timed test).  Without such a trainer the simulated figures alone are printed.
Rank 0 prints.
"""
from __future__ import annotations

import argparse
import inspect
import statistics
import sys
import tempfile
import time

import numpy as np

import shardwise as sw
from shardwise.planning.profile import _random_batch
from shardwise.train.trainer import Trainer


def measured_step(comm, g: sw.Graph, plan: sw.Plan, steps: int) -> float | None:
    """Median over ``steps`` of the slowest rank's step of ``plan`` run by this job, or None where
    the trainer takes no communicator yet."""
    if "comm" not in inspect.signature(Trainer).parameters:
        return None
    trainer = Trainer(g, plan, comm=comm)
    batch = _random_batch(trainer, 0)
    trainer.step(*batch)   # warm-up
    times = []
    for _ in range(steps):
        comm.allgather_bytes(b"\0")   # start together
        t0 = time.perf_counter()
        trainer.step(*batch)
        times.append(time.perf_counter() - t0)
    every = comm.allgather_bytes(np.array(times, np.float64).tobytes())
    slowest = np.max([np.frombuffer(x, np.float64) for x in every], axis=0)
    return float(statistics.median(slowest.tolist()))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,resnet18_small")
    ap.add_argument("--steps", type=int, default=10, help="measured steps per plan (medians)")
    ap.add_argument("--profile-repeats", type=int, default=5, help="timed steps per profile round")
    ap.add_argument("--batch", type=int, default=64, help="samples per step (every model)")
    args = ap.parse_args()
    comm = sw.distributed.init()
    if comm.size < 2:
        print("run under mpiexec -n 2 (or more): a job of one rank has no link between ranks", file=sys.stderr)
        return 2
    say = print if comm.rank == 0 else (lambda *a, **k: None)
    bw, latency = sw.distributed.measure_link(comm)
    say(f"# {comm.size} ranks ({comm.library}); rank link {bw / 1e9:.2f} GB/s, {latency * 1e6:.1f} us per message")
    head = f"{'model':<16} {'plan':<9} {'cross-rank MB':>13} {'simulated ms':>13} {'measured ms':>12} {'error':>8}"
    say(head)
    say("-" * len(head))
    for name in args.models.split(","):
        g = sw.models.get(name, batch=args.batch)
        d = sw.DeviceGraph.cpu(comm.size)
        prof = sw.profile(g, d, repeats=args.profile_repeats, comm=comm,
                          cache_dir=tempfile.mkdtemp(prefix="shardwise-profile-"))
        for plan in (sw.strategies.data_parallel(g, d), sw.search(g, d, costs=prof)):
            sim = sw.simulate(plan, ranks=comm.size, costs=prof, check_memory=False)
            measured = measured_step(comm, g, plan, args.steps)
            err = f"{(sim.iteration_time - measured) / measured:+8.1%}" if measured else f"{'n/a':>8}"
            shown = f"{measured * 1e3:12.2f}" if measured else f"{'n/a':>12}"
            say(f"{name:<16} {plan.name[:9]:<9} {sum(sim.rank_bytes['sent']) / 1e6:13.3f} "
                f"{sim.iteration_time * 1e3:13.2f} {shown} {err}", flush=True)
    if "comm" not in inspect.signature(Trainer).parameters:
        say("# measured: n/a -- Trainer(comm=...) (the multi-process runtime) is not in this build yet")
    return 0


if __name__ == "__main__":
    sys.exit(main())
