"""Turning a graph and a device graph into the C core's problem, and config helpers.

The op descriptions are flattened into one int64 blob (layout in csrc/core/problem.c)
so that the C core receives every index expression without per-op code.
"""
from __future__ import annotations

import functools
import os
from dataclasses import dataclass
from typing import Any, Sequence

import numpy as np

from shardwise import _core
from shardwise.machine.devices import DeviceGraph
from shardwise.errors import ConfigError
from shardwise.graph import Graph
from shardwise.ops.desc import OpDesc
from shardwise.planning.precision import DENSE_OP_KINDS, PRECISIONS, VALUE_BYTES, check_precision

# Dimension names per output rank: sample, channel, then spatial (seed 003 Table 1).
DIM_NAMES: dict[int, tuple[str, ...]] = {
    1: ("n",), 2: ("n", "c"), 3: ("n", "c", "l"), 4: ("n", "c", "h", "w"), 5: ("n", "c", "d", "h", "w"),
}

SYNC_MODELS = {"parameter_server": _core.SYNC_PARAMETER_SERVER, "ring": _core.SYNC_RING, "zero": _core.SYNC_ZERO}


def dim_names(rank: int) -> tuple[str, ...]:
    return DIM_NAMES[rank]


def worker_counts(ndev: int) -> list[int]:
    """Worker counts a configuration may use on ``ndev`` devices: the divisors of
    ``ndev`` and the powers of two up to it (so 6 devices allow 1, 2, 3, 4, 6)."""
    return list(_worker_counts(ndev))


@functools.lru_cache(maxsize=64)
def _worker_counts(ndev: int) -> tuple[int, ...]:
    # made once per machine size: the baselines ask for it once per op (on 1,024 devices a
    # 32-layer Llama's three baselines asked 2,500 times, a third of a second)
    counts = {k for k in range(1, ndev + 1) if ndev % k == 0}
    k = 1
    while k <= ndev:
        counts.add(k)
        k *= 2
    return tuple(sorted(counts))


@dataclass(frozen=True)
class CostOptions:
    """Knobs of the cost model (documented in docs/cost-model.md)."""

    sync: str = "parameter_server"   # or "ring", or "zero" (ring, with the optimizer state sharded)
    # bytes of a value the roofline reads and a message carries; None: the precision's (4 or 2)
    bytes_per_element: float | None = None
    backward_factor: float = 3.0     # forward + backward ~ 3x the forward compute
    threads: int = 0                 # threads building cost tables; 0 = one per CPU (at most 8)
    # also search splits of additive reductions (partition-n-reduce: partial outputs + a sum);
    # off by default until the executor runs them
    reduction_splits: bool = False
    # the number format the plan is costed in: "fp32", or mixed precision "bf16" / "fp16"
    # (planning/precision.py: element sizes, dense peaks); execution stays float32
    precision: str = "fp32"

    def __post_init__(self) -> None:
        check_precision(self.precision)
        if self.bytes_per_element is None:
            object.__setattr__(self, "bytes_per_element", VALUE_BYTES[self.precision])
        if self.sync not in SYNC_MODELS:
            raise ConfigError(f"unknown sync model {self.sync!r}; expected one of {sorted(SYNC_MODELS)}")
        for name in ("bytes_per_element", "backward_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not (0 < value < 1e6):
                raise ConfigError(f"{name} must be a positive finite number, got {value!r}")
        if isinstance(self.threads, bool) or not isinstance(self.threads, int) or not 0 <= self.threads <= 64:
            raise ConfigError(f"threads must be an int in 0..64 (0: one per CPU), got {self.threads!r}")
        if not isinstance(self.reduction_splits, bool):
            raise ConfigError(f"reduction_splits must be True or False, got {self.reduction_splits!r}")


def encode_ops(descs: Sequence[OpDesc], producers: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """(blob, flops) of ``descs`` for the C core: the op count and each op's words, the k-th data
    input of op ``i`` reading op ``producers[i][k]``; flops rows are (per iteration point, per
    output).  Encoded in C (``_core.encode_ops``): the same loop in Python took most of a fresh
    process's first enumeration (Inception-v3: ~4.5 ms of ~9)."""
    return _core.encode_ops(descs, producers)


def encode_graph(graph: Graph) -> tuple[np.ndarray, np.ndarray]:
    """(blob, flops) for the C core (:func:`encode_ops` of every op of ``graph``)."""
    ops = graph.ops
    return encode_ops([op.desc for op in ops], [op.inputs for op in ops])


def dense_arrays(graph: Graph, devices: DeviceGraph, precision: str) -> tuple[np.ndarray, np.ndarray]:
    """(each device's peak FLOP/s for dense ops in ``precision``, which ops are dense) for
    Problem.set_precision."""
    peaks = np.array([d.peak_flops(precision) for d in devices.devices])
    dense = np.array([op.kind in DENSE_OP_KINDS for op in graph.ops], dtype=np.int8)
    return peaks, dense


def device_arrays(devices: DeviceGraph) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    bw = devices.route_bandwidths().copy()
    np.fill_diagonal(bw, 0.0)  # never read: a device does not send to itself
    return (np.array([d.flops for d in devices.devices]), np.array([d.mem_bandwidth for d in devices.devices]), bw)


@dataclass(frozen=True)
class ProblemInputs:
    """The arrays a problem is made from: the encoded graph and its FLOPs (encode_graph), each
    device's FLOP/s and memory bandwidth and the widest routes (device_arrays), the dense ops'
    peaks in the options' precision (dense_arrays)."""

    blob: np.ndarray
    flops: np.ndarray
    device_flops: np.ndarray
    mem_bandwidth: np.ndarray
    routes: np.ndarray
    dense_peaks: np.ndarray
    dense: np.ndarray

    @classmethod
    def of(cls, graph: Graph, devices: DeviceGraph, options: CostOptions) -> "ProblemInputs":
        if len(graph.ops) == 0:
            raise ConfigError(f"graph {graph.name!r} has no ops")
        return cls(*encode_graph(graph), *device_arrays(devices), *dense_arrays(graph, devices, options.precision))

    def arrays(self) -> tuple[np.ndarray, ...]:
        return (self.blob, self.flops, self.device_flops, self.mem_bandwidth, self.routes, self.dense_peaks,
                self.dense)


def search_threads(options: CostOptions) -> int:
    """Threads the C core may use for ``options``: its ``threads``, or one per CPU (at most 8)."""
    return options.threads or min(8, os.cpu_count() or 1)


def make_problem(graph: Graph, devices: DeviceGraph, options: CostOptions,
                 inputs: ProblemInputs | None = None) -> "_core.Problem":
    """The C core's problem of ``graph`` on ``devices`` with ``options`` (``inputs``: their
    arrays, when the caller has them already)."""
    inputs = inputs or ProblemInputs.of(graph, devices, options)
    problem = _core.Problem(inputs.blob, inputs.flops, inputs.device_flops, inputs.mem_bandwidth, inputs.routes)
    problem.set_options(SYNC_MODELS[options.sync], options.bytes_per_element, options.backward_factor,
                        search_threads(options),
                        options.reduction_splits)
    problem.set_precision(PRECISIONS[options.precision], inputs.dense_peaks, inputs.dense)
    return problem


def config_arrays(degrees: Sequence[Sequence[int]], devices: Sequence[Sequence[int]]) -> tuple[np.ndarray, np.ndarray]:
    """Pad degree rows to MAX_RANK and device rows with -1, as Problem.set_configs wants."""
    n = len(degrees)
    maxk = max(len(d) for d in devices)
    deg = np.ones((n, _core.MAX_RANK), dtype=np.int32)
    dev = np.full((n, maxk), -1, dtype=np.int32)
    for k, (dg, dv) in enumerate(zip(degrees, devices)):
        deg[k, : len(dg)] = dg
        dev[k, : len(dv)] = dv
    return deg, dev


def share_problem(plan: Any, like: Any) -> Any:
    """``plan``, made to take its C problems from ``like``'s cache (:func:`plan_problem`): for
    plans of the same graph, devices and options, such as the candidates of one search, whose
    problem is then built once.  The plans are used on one thread at a time (a search's)."""
    plan.__dict__["_core_problems"] = like.__dict__.setdefault("_core_problems", {})
    return plan


def plan_problem(plan: Any, optimizer_state: int = 1) -> "_core.Problem":
    """The C core's problem of ``plan`` (its graph on its devices with its options, lowering
    ``optimizer_state`` state buffers per parameter slice), built once and kept on the plan.

    A plan's graph, devices and options do not change once it is made; the key still holds the
    graph's fingerprint and the device count, so a graph edited in place gets a new problem.
    The simulated objective gives the plans it makes from one search one such cache
    (:func:`share_problem`), so that a search builds the problem once.
    Task graphs lowered from it (``sw.lower``) keep it alive; nothing else may change it (its
    options are set here, once)."""
    key = (plan.graph.fingerprint(), id(plan.devices), len(plan.devices), plan.options, optimizer_state)
    cache = plan.__dict__.setdefault("_core_problems", {})
    problem = cache.get(key)
    if problem is None:
        for old in [k for k in cache if k[:4] != key[:4]]:   # made for the graph before an edit
            del cache[old]
        problem = make_problem(plan.graph, plan.devices, plan.options)
        problem.set_optimizer_state(optimizer_state)
        cache[key] = problem
    return problem
