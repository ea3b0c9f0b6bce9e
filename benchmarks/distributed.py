"""Training across processes: shardwise ranks beside threads of one process and PyTorch DDP.

For LeNet-5 and the scaled ResNet-18, data parallelism (parameter server, and ring all-reduce) and
the searched plan on
``DeviceGraph.cpu(k)`` (one device per rank), at 1, 2 and 4 ranks, prints images/s of

* **ranks**: ``mpiexec -n k``, every rank ``Trainer(g, plan, comm=sw.distributed.init())``
  running its device's tasks (at 1 rank: the one-process trainer, the same run as "threads");
* **threads**: the same plan in one process, ``Trainer(g, plan)`` (one worker thread per device);
* **DDP**: the same network in PyTorch (built from the shardwise graph, as
  benchmarks/train_throughput.py does), ``DistributedDataParallel`` over gloo under
  ``torchrun --nproc_per_node=k``, ``torch.set_num_threads(1)`` per rank (one device = one thread,
  as shardwise), each rank a batch/k shard of the same minibatch, SGD lr 0.05 momentum 0.9;

and the bytes a shardwise step put on the wire (``Trainer.comm_bytes()`` summed over the
ranks) beside the plan's (``sw.distributed.planned_bytes``).

Every configuration is a subprocess of this driver (``--worker``), under a hard timeout that
kills its whole process group; rank 0 prints one JSON line.  A worker takes ``--warmup``
steps, then ``--steps`` timed steps, each after a barrier (an all-gather; for DDP
``torch.distributed.barrier``), the step's time the slowest rank's; its figure is the median.
The configurations of one model are launched in turn, ``--rounds`` times (the order rotated
each round), and a configuration's images/s is the median of its rounds' (see
``interleaved`` in benchmarks/train_throughput.py: a slower stretch of this shared machine
slows every configuration alike).

Anchors ("Training across processes" issue): at 2 ranks, shardwise >= 1.0x PyTorch DDP and
>= 0.9x the threaded run.

    python benchmarks/distributed.py [--models lenet5,resnet18_small] [--ranks 1,2,4] [--steps 10] [--rounds 3]
    python benchmarks/distributed.py --profile [--models lenet5] [--ranks 2]   # where a rank's step goes

``--profile`` runs the shardwise ranks once more with the runtime's task clock (CLOCK_MONOTONIC,
one clock for every process of the machine) gathered from every rank, and prints per rank the
step, its compute tasks, its send and recv tasks and its waits, and per message the time from
the end of the send task to the start of the recv task that unpacks it (the message's latency
as the runtime sees it: MPI, the comm thread's polling and the receiving worker's polling).
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import shardwise as sw  # noqa: E402
from shardwise.train.trainer import SGD, Trainer  # noqa: E402
from train_throughput import BATCH, batch_for, openblas_core  # noqa: E402

MARK = "SWBENCH "
LR, MOMENTUM = 0.05, 0.9


# ---------------------------------------------------------------- workers (one per subprocess)

def _plan(args, g: sw.Graph) -> sw.Plan:
    d = sw.DeviceGraph.cpu(args.ranks)
    if args.plan_file:
        return sw.Plan.load(args.plan_file, g, d)
    return make_plan(args.plan, g, d)


def make_plan(label: str, g: sw.Graph, d: sw.DeviceGraph) -> sw.Plan:
    """data: data parallelism (parameter server on the first replica); ring: the same with ring
    all-reduce synchronization (every replica updates itself, as DDP does); searched: sw.search."""
    if label == "ring":
        return sw.strategies.data_parallel(g, d, sw.CostOptions(sync="ring"))
    return sw.strategies.data_parallel(g, d) if label == "data" else sw.search(g, d)


def _emit(result: dict) -> None:
    print(MARK + json.dumps(result), flush=True)


def worker_shardwise(args) -> None:
    """``--worker ranks`` (under mpiexec) or ``--worker threads`` (one process)."""
    g = sw.models.get(args.model, batch=args.batch)
    comm = sw.distributed.init() if args.worker == "ranks" else None
    plan = _plan(args, g)
    t = Trainer(g, plan, optimizer=SGD(lr=LR, momentum=MOMENTUM), seed=0, comm=comm, schedule=args.schedule)
    x, y = batch_for(g)
    for _ in range(args.warmup):
        t.step(x, y)
    times, tasks = [], []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        if comm is not None:
            comm.allgather_bytes(b"\0")   # start together
        t0 = time.perf_counter()
        t.step(x, y)
        times.append(time.perf_counter() - t0)
        if args.profile:
            ns, start, end = t.executor.task_times()
            tasks.append((ns.copy(), start, end, list(t.executor._rt.wait_times())))
    cpu = (time.process_time() - cpu0) / args.steps   # this process's CPU seconds per step, every thread
    result = {"threads": t.executor.threads, "cpu": cpu}
    if comm is not None:
        result["cpu"] = float(np.sum(np.frombuffer(b"".join(comm.allgather_bytes(np.float64(cpu).tobytes())),
                                                   np.float64)))
        every = comm.allgather_bytes(np.array(times, np.float64).tobytes())
        times = np.max([np.frombuffer(b, np.float64) for b in every], axis=0).tolist()
        sent = comm.allgather_bytes(np.array([t.comm_bytes()["sent"], t.comm_bytes()["received"]], np.int64).tobytes())
        sent = np.sum([np.frombuffer(b, np.int64) for b in sent], axis=0).tolist()
        planned = sw.distributed.planned_bytes(plan, comm.size)
        result.update(sent=sent[0], received=sent[1], planned_sent=sum(p["sent"] for p in planned),
                      planned_received=sum(p["received"] for p in planned), ranks=comm.size)
        if args.profile:
            result["profile"] = _profile(comm, t, tasks, times)
        if comm.rank != 0:
            return
    result["seconds"] = times
    _emit(result)


def _profile(comm, t: Trainer, tasks: list, slowest: list[float]) -> dict:
    """Per rank and per message, medians over the timed steps (see the module's docstring)."""
    # one int64 row per step, the same length on every rank (allgather_bytes gathers equal lengths):
    # every task's start and end (this rank's tasks filled in), the step's start and end, the waits
    mine = np.array([np.concatenate([ns[:, 0], ns[:, 1], [s, e, sum(w)]]) for ns, s, e, w in tasks], np.int64)
    n = len(t.task_graph.tasks)
    every = []
    for b in comm.allgather_bytes(mine.tobytes()):
        rows = np.frombuffer(b, np.int64).reshape(len(tasks), 2 * n + 3)
        every.append([(row[:n], row[n:2 * n], row[2 * n], row[2 * n + 1], row[2 * n + 2]) for row in rows])
    if comm.rank != 0:
        return {}
    tg = t.task_graph
    ranks = sw.distributed.rank_of_device(len(t.plan.devices), comm.size)
    owner = [ranks[task.device] for task in tg.tasks]
    per_rank = []
    for r in range(comm.size):
        rows = {"step": [], "compute": [], "send": [], "recv": [], "wait": [], "outside": []}
        for (starts, ends, s, e, w) in every[r]:
            kinds = {"compute": 0, "send": 0, "recv": 0}
            for task in tg.tasks:
                if owner[task.id] != r or ends[task.id] <= starts[task.id]:
                    continue
                k = task.kind if task.kind in ("send", "recv") else "compute"
                kinds[k] += ends[task.id] - starts[task.id]
            rows["step"].append((e - s) * 1e-6)
            for k, v in kinds.items():
                rows[k].append(v * 1e-6)
            rows["wait"].append(w * 1e-6)
        per_rank.append({k: statistics.median(v) for k, v in rows.items() if v})
    latency, in_flight = [], []
    for step in range(len(tasks)):
        for task in tg.tasks:
            if task.kind != "recv":
                continue
            send = next(tg.tasks[d] for d in task.deps if tg.tasks[d].kind == "send")
            s_end = every[owner[send.id]][step][1][send.id]
            r_start = every[owner[task.id]][step][0][task.id]
            latency.append((r_start - s_end) * 1e-6)
            in_flight.append(task.nbytes)
    lat = np.array(latency)
    return {"ranks": per_rank, "messages_per_step": len(lat) // max(1, len(tasks)),
            "latency_ms": {"median": float(np.median(lat)), "p90": float(np.percentile(lat, 90)),
                           "max": float(lat.max()), "sum_per_step": float(lat.sum() / len(tasks))},
            "step_ms": statistics.median(slowest) * 1e3}


def worker_ddp(args) -> None:
    """``--worker ddp`` under torchrun: the same network, DistributedDataParallel over gloo."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    from train_throughput import to_torch

    torch.set_num_threads(1)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    dist.init_process_group("gloo")
    rank, size = dist.get_rank(), dist.get_world_size()
    torch.manual_seed(0)
    g = sw.models.get(args.model, batch=args.batch)
    model = DDP(to_torch(g, nn))
    opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    x, y = batch_for(g)
    n = x.shape[0]
    lo, hi = rank * n // size, (rank + 1) * n // size
    xs, ys = torch.tensor(x[lo:hi]), torch.tensor(y[lo:hi])

    def step() -> None:
        opt.zero_grad()
        nn.functional.cross_entropy(model(xs), ys).backward()
        opt.step()

    for _ in range(args.warmup):
        step()
    times = []
    cpu0 = time.process_time()
    for _ in range(args.steps):
        dist.barrier()
        t0 = time.perf_counter()
        step()
        times.append(time.perf_counter() - t0)
    cpu = torch.tensor([(time.process_time() - cpu0) / args.steps], dtype=torch.float64)
    t = torch.tensor(times, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    dist.all_reduce(cpu)
    params = sum(p.numel() for p in model.parameters())
    if rank == 0:
        _emit({"seconds": t.tolist(), "cpu": float(cpu[0]), "param_bytes": 4 * params, "threads": torch.get_num_threads(),
               "torch": torch.__version__})
    dist.destroy_process_group()


# ---------------------------------------------------------------- the driver

def launch(cmd: list[str], timeout: float) -> dict:
    """Run ``cmd`` in a process group of its own; its JSON line, or {"error": ...}.  On timeout
    the whole group (launcher and ranks) is killed."""
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        p.communicate()
        return {"error": f"timed out after {timeout:.0f} s: {' '.join(cmd)}"}
    for line in out.splitlines():
        if line.startswith(MARK):
            res = json.loads(line[len(MARK):])
            res["launch_s"] = time.perf_counter() - t0
            return res
    tail = (err or out).strip().splitlines()[-6:]
    return {"error": f"exit {p.returncode}, no result: {' '.join(cmd)}\n    " + "\n    ".join(tail)}


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def mpi_library() -> str:
    try:
        import shardwise._mpi as m  # noqa: F401
        from shardwise.distributed import mpiexec
        return mpiexec()
    except Exception as exc:   # noqa: BLE001 -- reported, not raised
        return f"(no shardwise._mpi: {exc})"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="lenet5,resnet18_small")
    ap.add_argument("--ranks", default="1,2,4")
    ap.add_argument("--plans", default="data,ring,searched")
    ap.add_argument("--steps", type=int, default=10, help="timed steps per launch")
    ap.add_argument("--warmup", type=int, default=3, help="untimed steps per launch")
    ap.add_argument("--rounds", type=int, default=3, help="launches of every configuration (medians)")
    ap.add_argument("--timeout", type=float, default=240.0, help="hard limit per launch, seconds")
    ap.add_argument("--no-ddp", action="store_true", help="skip PyTorch DDP")
    ap.add_argument("--profile", action="store_true", help="where a rank's step goes (see the docstring)")
    # worker side
    ap.add_argument("--worker", choices=("ranks", "threads", "ddp"))
    ap.add_argument("--model")
    ap.add_argument("--plan", default="data")
    ap.add_argument("--plan-file")
    ap.add_argument("--schedule", default="auto",
                    help="the shardwise trainers' schedule (auto: the Trainer's default; fifo, critical_path)")
    ap.add_argument("--batch", type=int)
    args = ap.parse_args()
    if args.worker:
        args.ranks = int(args.ranks)
        (worker_ddp if args.worker == "ddp" else worker_shardwise)(args)
        return 0
    return drive(args)


def drive(args) -> int:
    from shardwise.distributed import mpiexec

    mpirun = mpiexec()
    ranks = [int(k) for k in args.ranks.split(",")]
    plans = args.plans.split(",")
    me = os.path.abspath(__file__)
    try:
        import torch
        torch_version = torch.__version__
    except ImportError:
        torch_version = None
        args.no_ddp = True
    cores = os.cpu_count()
    print(f"# shardwise {sw.__version__} across processes; {cpu_model()} ({platform.machine()}), {cores} cores "
          f"shared with other work (load average {os.getloadavg()[0]:.2f} at start), Python {platform.python_version()}; "
          f"OpenBLAS {openblas_core()} kernels (OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}); "
          f"PyTorch {torch_version or '(not installed)'}; mpiexec {mpirun}")
    print(f"# {max(ranks)} ranks of one thread each on {cores} cores oversubscribe them" if max(ranks) > cores else
          f"# at most {max(ranks)} ranks on {cores} cores")
    print(f"# per launch: {args.warmup} warm-up steps, {args.steps} timed steps (a barrier before each, the slowest "
          f"rank's time, median); {args.rounds} rounds of launches in rotated order, the median round shown; "
          f"shardwise schedule {args.schedule!r}")
    ok = True
    for name in args.models.split(","):
        batch = BATCH.get(name, 64)
        g = sw.models.get(name, batch=batch)
        tmp = tempfile.mkdtemp(prefix="swbench-")
        configs: dict[tuple, list[str]] = {}
        base = [sys.executable, me, "--model", name, "--batch", str(batch), "--steps", str(args.steps),
                "--warmup", str(args.warmup), "--schedule", args.schedule]
        for k in ranks:
            d = sw.DeviceGraph.cpu(k)
            for label in plans:
                plan = make_plan(label, g, d)
                path = os.path.join(tmp, f"{label}-{k}.json")
                plan.save(path)
                w = base + ["--worker", "threads", "--ranks", str(k), "--plan", label, "--plan-file", path]
                if k == 1:
                    if label == plans[0]:   # one device: every plan is the one-process run
                        configs[("threads", "*", 1)] = w
                    continue
                configs[("threads", label, k)] = w
                configs[("ranks", label, k)] = [mpirun, "-n", str(k)] + base + [
                    "--worker", "ranks", "--ranks", str(k), "--plan", label, "--plan-file", path]
            if not args.no_ddp:
                configs[("ddp", "*", k)] = [sys.executable, "-m", "torch.distributed.run", "--standalone",
                                            f"--nproc_per_node={k}", me, "--worker", "ddp", "--model", name,
                                            "--batch", str(batch), "--steps", str(args.steps), "--warmup",
                                            str(args.warmup), "--ranks", str(k)]
        if args.profile:
            profile(name, batch, configs, args)
            continue
        results: dict[tuple, list[dict]] = {key: [] for key in configs}
        keys = list(configs)
        for r in range(args.rounds):
            order = keys[r % len(keys):] + keys[:r % len(keys)]
            for key in order:
                results[key].append(launch(configs[key], args.timeout))
        ok &= report(name, batch, plans, ranks, results)
    return 0 if ok else 1


def _rate(runs: list[dict], batch: int) -> float | None:
    meds = [statistics.median(r["seconds"]) for r in runs if "seconds" in r]
    return batch / statistics.median(meds) if meds else None


def report(name: str, batch: int, plans: list[str], ranks: list[int], results: dict) -> bool:
    for key, runs in results.items():
        for r in runs:
            if "error" in r:
                print(f"# {name} {key}: {r['error']}")
    head = (f"{'model':<15} {'plan':<9} {'ranks':>5} {'ranks img/s':>11} {'threads img/s':>13} {'DDP img/s':>10} "
            f"{'vs DDP':>7} {'vs threads':>10} {'MB/step sent':>12} {'planned':>8} {'launch s':>8}")
    print(head)
    print("-" * len(head))
    ok = True
    ddp_payload = None
    for label in plans:
        for k in ranks:
            thr = _rate(results.get(("threads", "*" if k == 1 else label, k), []), batch)
            ours = thr if k == 1 else _rate(results.get(("ranks", label, k), []), batch)
            ddp_runs = results.get(("ddp", "*", k), [])
            ddp = _rate(ddp_runs, batch)
            ddp_payload = next((r["param_bytes"] for r in ddp_runs if "param_bytes" in r), ddp_payload)
            runs = [r for r in results.get(("ranks", label, k), []) if "sent" in r]
            sent = f"{runs[-1]['sent'] / 1e6:12.3f}" if runs else f"{'-':>12}"
            planned = f"{runs[-1]['planned_sent'] / 1e6:8.3f}" if runs else f"{'-':>8}"
            launch_s = [r["launch_s"] for r in results.get(("ranks", label, k), []) if "launch_s" in r]
            fmt = lambda v, w: f"{v:{w}.1f}" if v else f"{'n/a':>{w}}"   # noqa: E731
            vs_ddp = f"{ours / ddp:6.2f}x" if ours and ddp else f"{'-':>7}"
            vs_thr = f"{ours / thr:9.2f}x" if ours and thr and k > 1 else f"{'-':>10}"
            print(f"{name:<15} {label:<9} {k:>5} {fmt(ours, 11)} {fmt(thr, 13)} {fmt(ddp, 10)} {vs_ddp} {vs_thr} "
                  f"{sent} {planned} {statistics.median(launch_s) if launch_s else 0:8.1f}", flush=True)
            if k == 2 and ours and ((ddp and ours / ddp < 1.0) or (thr and ours / thr < 0.9)):
                ok = False
    if ddp_payload:
        print(f"# {name}: batch {batch}; DDP all-reduces {ddp_payload / 1e6:.3f} MB of gradients per step "
              f"(a ring sends 2(k-1)/k of it per rank); 'MB/step sent': shardwise's bytes on the wire per step, "
              f"comm_bytes()['sent'] summed over the ranks, beside planned_bytes()")
    print(f"# anchors at 2 ranks: ranks / DDP >= 1.0x, ranks / threads >= 0.9x: {'met' if ok else 'NOT met'}; "
          f"load average now {os.getloadavg()[0]:.2f}")
    return ok


def profile(name: str, batch: int, configs: dict, args) -> None:
    for key, cmd in configs.items():
        if key[0] != "ranks":
            continue
        res = launch(cmd + ["--profile"], args.timeout)
        if "error" in res:
            print(f"# {name} {key}: {res['error']}")
            continue
        p = res["profile"]
        lat = p["latency_ms"]
        print(f"{name} {key[1]} at {key[2]} ranks: step {p['step_ms']:.2f} ms (slowest rank, median); "
              f"{p['messages_per_step']} messages per step, send end -> recv start: median {lat['median']:.3f} ms, "
              f"p90 {lat['p90']:.3f}, max {lat['max']:.3f}, summed {lat['sum_per_step']:.2f} ms per step")
        for r, row in enumerate(p["ranks"]):
            print(f"  rank {r}: runtime step {row['step']:.2f} ms = compute tasks {row['compute']:.2f} + "
                  f"send tasks {row['send']:.2f} + recv tasks {row['recv']:.2f} + waits {row['wait']:.2f} "
                  f"+ the rest {row['step'] - row['compute'] - row['send'] - row['recv'] - row['wait']:.2f}")


if __name__ == "__main__":
    sys.exit(main())
