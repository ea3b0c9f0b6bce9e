"""The native runtime from Python: a plan's task graph run in C, with planned memory.

    ex = NativeExecutor(graph, plan, tg)     # tg = sw.lower(plan)
    loss = ex.run(images, labels, optimizer=sw.SGD(lr=0.1))     # one call into C per step
    ex.persistent[b]                          # parameter, optimizer state and running-statistics buffers:
                                              # views into the arenas

The runtime (csrc/exec/executor.c) runs every task on its stream in program
order (one stream per device, or a schedule's prioritized streams), on the CPU
backend (csrc/cpu/backend_cpu.c): worker threads, one per device but no more
than the cores the device graph says its CPU workers share, each taking the
most urgent of its streams whose next task may start; or, with ``backend="cuda"``,
on GPUs (cuda/, docs/gpu.md), where ``persistent`` holds host copies kept in step
with the arenas (_DeviceBuffers).  The GIL is released once for the whole step; nothing is allocated
during a step (buffers live at planned offsets in one arena per device).
:class:`~shardwise.train.trainer.Trainer` is the user-facing API.
"""
from __future__ import annotations

from typing import Any, Iterator, Mapping

import numpy as np

from shardwise import _core
from shardwise.graph import BN_EPS, BN_MOMENTUM, Graph, Op
from shardwise.errors import ConfigError
from shardwise.iteration.lower import TaskGraph, handle_of, plan_arrays
from shardwise.iteration.memory import _streams
from shardwise.machine.devices import executor_threads
from shardwise.plan import Plan
from shardwise.planning.problem import make_problem

# buffers the runtime keeps across steps (the rest live within one step)
PERSISTENT_KINDS = ("param", "momentum", "running_stats")


def backends() -> list[str]:
    """The backends this installation of shardwise has: ``["cpu"]``, and ``"cuda"`` where the
    CUDA backend was built in (whether a GPU is present is :func:`shardwise.machine.cuda.status`'s
    question)."""
    from shardwise.machine import cuda

    return list(_core.BACKENDS) + (["cuda"] if cuda.built() else [])


class _DeviceBuffers(Mapping):
    """The persistent buffers of a device backend as host arrays, in step with the arenas.

    Reading an entry copies every persistent buffer from the device when a step has run since
    the last copy; handing out an array counts as a write (the caller may change it in place,
    as it does the CPU backend's views), so the next step first copies them all back."""

    def __init__(self, rt: Any, ids: list[int]) -> None:
        self._rt = rt
        self._ids = ids
        self._host: dict[int, np.ndarray] = {}
        self._stale = True     # the device holds newer values than _host
        self._dirty = False    # _host may hold newer values than the device

    def __getitem__(self, b: int) -> np.ndarray:
        if b not in self._ids:
            raise KeyError(b)
        if self._stale:
            self._host = {i: self._rt.buffer(i) for i in self._ids}
            self._stale = False
        self._dirty = True
        return self._host[b]

    def __iter__(self) -> Iterator[int]:
        return iter(self._ids)

    def __len__(self) -> int:
        return len(self._ids)

    def before_step(self) -> None:
        if self._dirty:
            for b, a in self._host.items():
                self._rt.write(b, a)
            self._dirty = False

    def after_step(self) -> None:
        self._stale = True


def dilation(op: Op) -> tuple[int, int]:
    """A conv2d op's dilation (rows, columns); (1, 1) when it has none."""
    d = op.attrs.get("dilation", 1)
    return (d, d) if isinstance(d, int) else (int(d[0]), int(d[1]))


def window(op: Op) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding) pairs of a conv2d or pool2d op (a pool's stride defaults to its kernel)."""
    def pair(v: Any) -> tuple[int, int]:
        return (v, v) if isinstance(v, int) else (int(v[0]), int(v[1]))

    a = op.attrs
    kernel = pair(a["kernel"])
    stride = pair(a["stride"] if a.get("stride") is not None else a["kernel"])
    return kernel, stride, pair(a.get("padding", 0))


def op_attrs(graph: Graph) -> list[dict[str, Any]]:
    """What the C kernels need of each op beyond its description: one dict per op, by name, with
    exactly the fields of the op kind's attribute record (csrc/exec/op_attrs.h; the record is named
    in csrc/ops.def), plus "kind" and "name".  The runtime reads them into typed records and checks
    them (csrc/py/attrs_py.c), naming the op and the attribute when one is missing or wrong."""
    out = []
    for op in graph.ops:
        a: dict[str, Any] = {"kind": op.kind, "name": op.name}
        relu = op.attrs.get("activation") == "relu"
        if op.kind in ("conv2d", "pool2d"):
            kernel, stride, padding = window(op)
            a.update(kernel=kernel, stride=stride, padding=padding)
        if op.kind == "conv2d":
            groups = op.attrs.get("groups", 1)
            a.update(dilation=dilation(op), relu=relu,
                     group_out_channels=op.attrs["out_channels"] // groups if groups > 1 else 0)
        elif op.kind == "pool2d":
            a["max"] = op.attrs.get("kind") == "max"
        elif op.kind == "linear":
            a["relu"] = relu
        elif op.kind == "concat":
            a["axis"] = op.attrs.get("axis", 0)
        elif op.kind == "softmax_dim":
            a.update(dim=op.attrs.get("dim", 0), scale=op.attrs.get("scale", 0.0),
                     causal=bool(op.attrs.get("causal", False)))
        elif op.kind == "rotary":
            a["base"] = op.attrs["base"]
        elif op.kind in ("layer_norm", "rms_norm"):
            a["eps"] = op.attrs.get("eps", 0.0)
        elif op.kind == "group_norm":
            a.update(groups=op.attrs["groups"], eps=op.attrs["eps"])
        elif op.kind == "gelu":
            a["tanh"] = op.attrs.get("approximate", "none") == "tanh"
        elif op.kind == "leaky_relu":
            a["negative_slope"] = op.attrs.get("negative_slope", 0.0)
        elif op.kind == "dropout":
            a.update(p=op.attrs["p"], seed=op.attrs["seed"])
        elif op.kind == "clip":
            a.update(lo=op.attrs["lo"], hi=op.attrs["hi"])
        elif op.kind == "batchnorm2d":
            a.update(momentum=op.attrs.get("momentum", BN_MOMENTUM), eps=op.attrs.get("eps", BN_EPS))
        elif op.kind == "stochastic_depth":
            a.update(p=op.attrs["p"], seed=op.attrs["seed"], row=op.attrs.get("mode", "row") == "row")
        elif op.kind == "input":
            a["id_bound"] = id_bound(graph, op) if op.attrs.get("dtype") == "int64" else 0
        out.append(a)
    return out


def id_bound(graph: Graph, op: Op) -> int:
    """The ids an integer input op may hold lie below this: the smallest vocabulary of the
    embeddings reading it (2**24, the float32-exact limit, when none does)."""
    vocabs = [c.attrs["vocab"] for c in graph.ops if c.kind == "embedding" and op.index in c.inputs]
    return min(vocabs, default=2**24)


MIN_WORKSPACE = 64 << 20     # bytes: a CUDA stream's workspace at least (cuBLAS's 4 MiB, cuDNN's algorithms)


def default_workspace_bytes(tg: TaskGraph, devices: Any) -> int:
    """Each CUDA stream's workspace where the user names none: twice the largest buffer of the
    iteration on one device (a padded window copy, pooling's recomputed output and cuDNN's faster
    convolution algorithms each want about one such tensor), at least MIN_WORKSPACE, at most an
    eighth of the smallest device's declared memory.  ResNet-50 at batch 64 on one GPU: its
    (64, 64, 112, 112) feature map is 196 MiB, so 392 MiB per stream."""
    largest = max((b.nbytes for b in tg.buffers if b.device >= 0), default=0)
    want = max(MIN_WORKSPACE, 2 * largest)
    memories = [d.memory for d in getattr(devices, "devices", []) if getattr(d, "memory", 0) > 0]
    if memories:
        want = min(want, max(MIN_WORKSPACE, int(min(memories)) // 8))
    return (want + (1 << 20) - 1) >> 20 << 20


class NativeExecutor:
    """Runs the task graph of ``plan`` on the native runtime; parameters and optimizer state persist."""

    def __init__(self, graph: Graph, plan: Plan, tg: TaskGraph, threads: int | None = None, jitter_us: int = 0,
                 reuse: bool = True, optimizer_state: int = 1, schedule: Any = None, backend: str = "cpu",
                 gpus: list[int] | None = None, workspace_mb: int | None = None, swap: Any = None,
                 comm: Any = None, timeout: float | None = None) -> None:
        """``threads``: worker threads (default :func:`executor_threads`); ``jitter_us`` (tests
        only): a random pause of up to that many microseconds before every task; ``reuse``:
        buffers share arena memory by lifetime (False: each keeps its own bytes);
        ``optimizer_state``: state buffers per parameter slice, as ``tg`` was lowered with
        (``sw.lower(plan, optimizer_state)``; 1 for SGD, 2 for Adam and AdamW); ``schedule``:
        a :class:`~shardwise.iteration.schedule.Schedule` of ``plan`` whose prioritized streams the tasks
        run on (None: one stream per device, program order).  ``backend``: "cpu" or "cuda"; for
        "cuda", ``gpus`` gives each logical device's GPU (default: the plan's device graph's
        ``gpu_of``, else blocks over every GPU) and ``workspace_mb`` each stream's workspace
        (default :func:`default_workspace_bytes`: twice the largest buffer on a device, 64 MiB at least).  ``swap``: (buffer, out_at, in_at) int32 arrays of a swap plan
        (:meth:`shardwise.iteration.swap.SwapPlan.spec`), or None.  When ``tg`` was lowered with
        this schedule (``sw.lower(plan, schedule=..., swap=...)``; ``swap`` None here), the runtime
        takes its C task graph, swap tasks included, and does not lower the plan again.

        ``comm``: the job's :class:`~shardwise.distributed.Comm` when ``tg`` is split over its ranks
        (``sw.lower(plan, ranks=comm.size)``): this process runs its own devices' tasks only and
        exchanges the rest as messages (docs/distributed.md); ``persistent`` then holds this rank's
        buffers, :meth:`gathered` every rank's.  ``timeout``: seconds a message may take before the
        step fails naming it (default: :data:`shardwise.distributed.DEFAULT_TIMEOUT` or
        SHARDWISE_COMM_TIMEOUT)."""
        self.graph = graph
        self.tg = tg
        self.optimizer_state = optimizer_state
        devices = plan.devices
        ranks = getattr(tg, "ranks", None)
        if (ranks is not None) != (comm is not None):
            raise ConfigError("a task graph split over ranks runs with the job's communicator (comm=), and only it"
                              if ranks is not None else "comm= needs a task graph split over its ranks "
                              "(sw.lower(plan, ranks=comm.size))")
        self.comm = comm
        self.ranks = ranks
        self.rank = comm.rank if comm is not None else 0
        self.local_devices = [d for d in range(len(devices)) if ranks is None or ranks[d] == self.rank]
        if threads is None:
            threads = executor_threads(len(self.local_devices), getattr(devices, "shared_cores", None))
        if gpus is None:
            gpus = getattr(devices, "gpu_of", None)
        workspace = int(workspace_mb) << 20 if workspace_mb else 0
        if backend == "cuda" and not workspace_mb:
            workspace = default_workspace_bytes(tg, devices)
        self.backend = backend
        gpus = gpus if backend == "cuda" else None
        if getattr(tg, "handle", None) is not None and schedule is tg.schedule and swap is None:
            # the task graph lowered once (sw.lower(plan, schedule=..., swap=...)): its streams and swap tasks
            handle_of(tg, plan)   # ConfigError for a task graph of another plan
            if getattr(tg, "rings", "chunked") == "fused":
                raise ConfigError("this task graph's rings are fused (sw.lower(plan, rings='fused')), the simulator's "
                                  "model of large machines: the runtime runs sw.lower(plan), its rings chunked")
            if tg.optimizer_state != optimizer_state:
                raise ConfigError(f"the task graph was lowered for {tg.optimizer_state} optimizer state buffer(s) "
                                  f"per parameter, the runtime is asked for {optimizer_state}: "
                                  f"sw.lower(plan, optimizer_state={optimizer_state})")
            extra = {}
            if comm is not None:
                from shardwise.distributed.comm import _timeout

                extra = {"comm": comm._capsule(), "timeout": _timeout(timeout)}
            self._rt = _core.Runtime(tg.handle, op_attrs(graph), threads, jitter_us=jitter_us, reuse=reuse,
                                     backend=backend, gpus=gpus, workspace=workspace, **extra)
        else:
            if comm is not None:
                raise ConfigError("a task graph split over ranks is lowered once with its schedule "
                                  "(sw.lower(plan, schedule=..., ranks=...)) and run as it is")   # a schedule or swap plan the task graph was not lowered with: the runtime lowers the plan
            problem = make_problem(graph, devices, plan.options)
            problem.set_optimizer_state(optimizer_state)
            self._rt = _core.Runtime(problem, *plan_arrays(plan), op_attrs(graph), threads, jitter_us=jitter_us,
                                     reuse=reuse, streams=_streams(plan, schedule), backend=backend, gpus=gpus,
                                     workspace=workspace, swap=swap)
        self.schedule = schedule
        self.threads = threads
        ids = [b.id for b in tg.buffers if b.kind in PERSISTENT_KINDS and self.runs_device(b.device)]
        self._device: _DeviceBuffers | None = None
        self.persistent: Mapping[int, np.ndarray]
        if backend == "cpu":
            self.persistent = {b: self._rt.buffer(b) for b in ids}
        else:
            self._device = self.persistent = _DeviceBuffers(self._rt, ids)
        self._inputs = [op for op in graph.ops if op.kind == "input"]

    def runs_device(self, device: int) -> bool:
        """Whether this process runs ``device`` (always, but for one rank of several)."""
        return self.ranks is None or self.ranks[device] == self.rank

    def gathered(self) -> Mapping[int, np.ndarray]:
        """Every persistent buffer (parameters, optimizer state, running statistics) of every
        rank: ``persistent`` itself for one process; for one rank of several, a collective every
        rank calls together, returning its own buffers and copies of the others'."""
        if self.comm is None:
            return self.persistent
        from shardwise.distributed.gather import gather_buffers

        return gather_buffers(self.comm, self.tg, self.ranks, self.persistent, PERSISTENT_KINDS)

    @property
    def steps(self) -> int:
        """Training steps this runtime has completed (settable: a checkpoint's count)."""
        return self._rt.steps

    @steps.setter
    def steps(self, value: int) -> None:
        self._rt.steps = value

    def _input_list(self, images: Any) -> list[Any]:
        """One entry per op: the input ops' minibatches (the runtime checks and converts them)."""
        out: list[Any] = [None] * len(self.graph.ops)
        for op in self._inputs:
            out[op.index] = images[op.name] if isinstance(images, Mapping) else images
        return out

    def run(self, images: Any, labels: np.ndarray, phases: tuple[str, ...] = ("forward", "backward", "sync", "update"),
            optimizer: Any = None, running: bool = False) -> float:
        """One step (all phases) or the forward pass alone; the mean cross-entropy.

        Inputs are floating-point arrays of their ops' exact shapes without NaN or infinity,
        labels N integers in range; the runtime checks them (ValueError) before any task runs.
        A step updates the batch norms' running statistics; the forward pass alone leaves them
        as they are and normalizes with them when ``running`` (eval mode), else with the
        minibatch's statistics."""
        inputs = self._input_list(images)
        if self._device is not None:
            self._device.before_step()
            try:
                return self._run(inputs, labels, phases, optimizer, running)
            finally:
                self._device.after_step()
        return self._run(inputs, labels, phases, optimizer, running)

    def _comm_error(self, exc: TimeoutError) -> Exception:
        """A step's timeout waiting for another rank, as CommTimeoutError with the op named."""
        import re

        from shardwise.distributed import CommTimeoutError

        names = [op.name for op in self.graph.ops]
        text = re.sub(r"\bop (\d+)'s", lambda m: f"op {names[int(m.group(1))]!r}'s"
                      if int(m.group(1)) < len(names) else m.group(0), str(exc))
        return CommTimeoutError(text)

    def _run(self, inputs: list[Any], labels: np.ndarray, phases: tuple[str, ...], optimizer: Any,
             running: bool) -> float:
        try:
            return self._run_list(inputs, labels, phases, optimizer, running)
        except TimeoutError as exc:
            raise self._comm_error(exc) from None

    def _run_list(self, inputs: list[Any], labels: np.ndarray, phases: tuple[str, ...], optimizer: Any,
                  running: bool) -> float:
        if tuple(phases) == ("forward",):
            return self._rt.forward(inputs, labels, running)
        if running:
            raise ValueError("a training step normalizes with the minibatch's statistics, not the running ones")
        if set(phases) != {"forward", "backward", "sync", "update"}:
            raise ValueError(f"a step runs the forward pass alone or every phase, not {phases}")
        if optimizer.state_buffers != self.optimizer_state:
            raise ConfigError(f"{type(optimizer).__name__} keeps {optimizer.state_buffers} state buffer(s) per "
                              f"parameter, but this trainer was built for an optimizer with {self.optimizer_state}: "
                              "make a new Trainer with this optimizer")
        # the schedule's value for this step (0: the first) travels with the step: no rebuild
        return self._rt.step(inputs, labels, *optimizer.runtime_args(self._rt.steps))

    def pipeline(self, steps: int) -> None:
        """Record ``steps`` (2 .. 8) training steps back to back, with no barrier between them
        (csrc/exec/pipeline.c; once per executor, CPU backend, no swap plan): :meth:`run_steps`."""
        if self.backend != "cpu":
            raise ConfigError(f"steps back to back run on the CPU backend so far, not {self.backend!r}")
        self._rt.pipeline(steps)

    def run_steps(self, batches: list[tuple[Any, np.ndarray]], optimizer: Any) -> list[float]:
        """As many training steps as :meth:`pipeline` recorded, in one call into C: step i on
        ``batches[i]`` (images, labels) with the optimizer's values for its own step; the mean
        cross-entropy of each.  Every minibatch is checked (ValueError) before any task runs.
        The numbers are those of :meth:`run` called once per batch, bit for bit."""
        if optimizer.state_buffers != self.optimizer_state:
            raise ConfigError(f"{type(optimizer).__name__} keeps {optimizer.state_buffers} state buffer(s) per "
                              f"parameter, but this trainer was built for an optimizer with {self.optimizer_state}: "
                              "make a new Trainer with this optimizer")
        first = self._rt.steps
        try:
            return self._rt.steps_back_to_back([(self._input_list(images), labels,
                                                 *optimizer.runtime_args(first + i))
                                                for i, (images, labels) in enumerate(batches)])
        except TimeoutError as exc:
            raise self._comm_error(exc) from None

    def probabilities(self, op_name: str, logits: bool = False) -> np.ndarray:
        """The softmax output of the last run, assembled from its workers' shards; with
        ``logits``, the softmax's input instead (the loss tasks' logits, which the memory plan
        keeps for the host as it keeps the probabilities)."""
        op = self.graph[op_name]
        out = np.zeros(op.shape, np.float32)
        ids = [(t.reads if logits else t.writes)[0] for t in self.tg.tasks if t.kind == "loss" and t.op == op_name]
        if self.comm is None:
            shards = {b: self._rt.buffer(b) for b in ids}
        else:   # every rank's shards (a collective)
            from shardwise.distributed.gather import gather_buffers

            shards = gather_buffers(self.comm, self.tg, self.ranks, self._rt.buffer, ids)
        for b, a in shards.items():
            out[tuple(slice(lo, hi) for lo, hi in self.tg.buffers[b].box)] = a
        return out

    # ---- optimizer state
    def updates(self) -> dict[int, int]:
        """{state buffer: updates applied} of every counted one (each parameter slice's first
        state buffer, once updated): SGD's started momentum, Adam's step count.  For one rank of
        several, every rank's (a collective every rank calls together)."""
        own = {b: n for b, n in self._rt.updates() if self.runs_device(self.tg.buffers[b].device)}
        if self.comm is None:
            return own
        from shardwise.distributed.gather import gather_counts

        return gather_counts(self.comm, own)

    def set_updates(self, counts: Mapping[int, int]) -> None:
        """Every parameter slice's update count at once (absent ones 0), e.g. from a checkpoint."""
        self._rt.set_updates(sorted(counts.items()))

    def started_buffers(self) -> set[int]:
        """Momentum buffers updated at least once (their next SGD update uses the momentum)."""
        return set(self.updates())

    # ---- memory
    def arena_bytes(self) -> dict[int, int]:
        return dict(enumerate(self._rt.arena_bytes()))

    def arena_high_water(self) -> dict[int, int]:
        return dict(enumerate(self._rt.arena_high_water()))

    def time_tasks(self, on: bool = True) -> None:
        """Time every task of the following steps (on the CUDA backend, on the GPU's own clock
        with two events per task; the CPU backend always times them), or no longer."""
        self._rt.time_tasks(bool(on))

    def task_times(self) -> tuple[np.ndarray, int, int]:
        """((ntasks, 2) start and end of every task of the last step, step start, step end),
        in nanoseconds of the monotonic clock."""
        return self._rt.task_times()

    def runtime_seconds(self, wall: float) -> float:
        """The runtime's own time in the last step (of ``wall`` seconds, measured by the caller
        around it): per worker thread, what is neither its tasks nor waiting for other threads'
        tasks, during the step or for the last of them to finish (so: the Python and C around
        the step, waking the threads, walking the command lists); the most of any thread."""
        ns, _, _ = self._rt.task_times()
        busy = [0] * self.threads
        for t, (start, end) in zip(self.tg.tasks, ns.tolist()):
            busy[t.device % self.threads] += end - start
        waits = self._rt.wait_times()
        return max(wall - (b + w) * 1e-9 for b, w in zip(busy, waits))

    def allocations(self) -> dict[str, int]:
        """Arenas allocated and workspace growth since the runtime was built, and how often the
        convolutions' per-thread scratch caches have grown (in the whole process)."""
        arenas, grown, grows, conv = self._rt.allocations()
        return {"arenas": arenas, "workspace_bytes": grown, "workspace_grows": grows, "conv_scratch_grows": conv}
