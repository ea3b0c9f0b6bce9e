"""Plans: a configuration for every op, as plain data, costed by Eq. 1.

A plan maps op names to :class:`OpConfig` (a degree per output dimension and
the devices its workers run on).  The search produces plans; users can write
their own with :meth:`Plan.from_dict`; both are costed by the same C code.
Plans save to a versioned JSON file stamped with fingerprints of the graph and
the device graph (docs/plan-format.md).
"""
from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass
from math import prod
from typing import Any, Mapping, Sequence

import numpy as np

from shardwise.atomic import write_atomically
from shardwise.planning.costs import ComputeCosts, apply_profile
from shardwise.machine.devices import DeviceGraph
from shardwise.errors import ConfigError, PlanFileError
from shardwise.graph import Graph, Op
from shardwise.planning.problem import CostOptions, config_arrays, dim_names, make_problem

PLAN_FORMAT = "shardwise-plan"
PLAN_VERSION = 1


@dataclass(frozen=True)
class OpConfig:
    """How one op is parallelized: degrees per dimension (n, c, h, w, ...) and devices.

    ``reduction`` is ``(name, degree)`` when a reduction variable is split too
    (partition-n-reduce, e.g. ``("ci", 2)`` for a convolution's input channels):
    each output block is then computed by ``degree`` workers over parts of the
    reduction, and their partial outputs are summed on the first of them.  Workers
    are ordered output block by output block, reduction part fastest."""

    dims: tuple[str, ...]
    degrees: tuple[int, ...]
    devices: tuple[int, ...]
    reduction: tuple[str, int] | None = None

    @property
    def reduction_degree(self) -> int:
        return self.reduction[1] if self.reduction else 1

    @property
    def workers(self) -> int:
        return prod(self.degrees) * self.reduction_degree

    def __getitem__(self, dim: str) -> int:
        if self.reduction and dim == self.reduction[0]:
            return self.reduction[1]
        try:
            return self.degrees[self.dims.index(dim)]
        except ValueError:
            raise KeyError(f"no dimension {dim!r}; this op has {self.dims}") from None

    def as_dict(self) -> dict[str, int]:
        out = dict(zip(self.dims, self.degrees))
        if self.reduction:
            out[self.reduction[0]] = self.reduction[1]
        return out

    def split_dims(self) -> str:
        """Compact form of the non-trivial degrees, e.g. ``n=4 c=2`` (``-`` for one worker);
        a split reduction reads ``ci=2(sum)``."""
        parts = [f"{d}={k}" for d, k in zip(self.dims, self.degrees) if k > 1]
        if self.reduction:
            parts.append(f"{self.reduction[0]}={self.reduction[1]}(sum)")
        return " ".join(parts) if parts else "-"

    def device_text(self) -> str:
        devs = self.devices
        if len(devs) > 1 and list(devs) == list(range(devs[0], devs[0] + len(devs))):
            return f"{devs[0]}-{devs[-1]}"
        return ",".join(str(d) for d in devs)

    def __str__(self) -> str:
        inner = ", ".join(f"{d}={k}" for d, k in zip(self.dims, self.degrees))
        if self.reduction:
            inner += f", {self.reduction[0]}={self.reduction[1]}(sum)"
        return f"{{{inner}}} on {self.device_text()}"


def reduction_pair(op: Op, config: OpConfig) -> tuple[int, int]:
    """(iteration variable, degree) of the config's split reduction for the C core; (-1, 1) if none."""
    if config.reduction is None:
        return (-1, 1)
    return (op.desc.out_rank + op.desc.reductions.index(config.reduction[0]), config.reduction[1])


def reduction_config(op: Op, pair: Sequence[int]) -> tuple[str, int] | None:
    """The inverse of :func:`reduction_pair`."""
    var, degree = int(pair[0]), int(pair[1])
    if var < 0:
        return None
    return (op.desc.reductions[var - op.desc.out_rank], degree)


def _reduction_from_spec(op: Op, spec: Mapping[str, Any]) -> tuple[str, int] | None:
    names = [k for k in spec if k != "devices" and k in op.desc.reductions]
    if not names:
        return None
    if len(names) > 1:
        raise ConfigError(f"{op.name!r}: at most one reduction dimension may be split, got {names}")
    name = names[0]
    var = op.desc.out_rank + op.desc.reductions.index(name)
    if var not in op.desc.additive:
        raise ConfigError(f"{op.name!r}: reduction {name!r} cannot be split (its partial results do not add up)")
    deg = spec[name]
    if isinstance(deg, bool) or not isinstance(deg, (int, np.integer)) or deg < 1:
        raise ConfigError(f"{op.name!r}: degree of {name!r} must be a positive int, got {deg!r}")
    if op.desc.extents[var] % deg != 0:
        raise ConfigError(f"{op.name!r}: degree {name}={deg} does not divide that reduction "
                          f"(size {op.desc.extents[var]})")
    return (name, int(deg)) if deg > 1 else None


def make_config(graph: Graph, devices: DeviceGraph, op_name: str, spec: Mapping[str, Any]) -> OpConfig:
    """Validate a user's ``{"n": 4, "c": 2, "devices": [...]}`` for one op."""
    op = graph[op_name] if op_name in graph else None
    if op is None:
        raise ConfigError(f"no op named {op_name!r} in graph {graph.name!r}")
    if not isinstance(spec, Mapping):
        raise ConfigError(f"configuration of {op_name!r} must be a mapping like {{'n': 4}}, got {spec!r}")
    dims = dim_names(len(op.shape))
    granules = op.desc.split_granules()
    degrees = []
    splittable = [r for v, r in enumerate(op.desc.reductions, op.desc.out_rank) if v in op.desc.additive]
    for k in spec:
        if k != "devices" and k not in dims and k not in op.desc.reductions:
            raise ConfigError(f"{op_name!r}: unknown dimension {k!r}; this op splits {dims}"
                              + (f" and the reduction(s) {splittable}" if splittable else ""))
    reduction = _reduction_from_spec(op, spec)
    for d, size, granule in zip(dims, op.shape, granules):
        deg = spec.get(d, 1)
        if isinstance(deg, bool) or not isinstance(deg, (int, np.integer)) or deg < 1:
            raise ConfigError(f"{op_name!r}: degree of {d!r} must be a positive int, got {deg!r}")
        if size % deg != 0:
            raise ConfigError(f"{op_name!r}: degree {d}={deg} does not divide that dimension (size {size})")
        if (size // deg) % granule != 0:
            raise ConfigError(f"{op_name!r}: {d}={deg} would cut a {granule}-element group "
                              f"(shards of {d} must be multiples of {granule})")
        degrees.append(int(deg))
    workers = prod(degrees) * (reduction[1] if reduction else 1)
    if workers > len(devices):
        raise ConfigError(f"{op_name!r}: {workers} workers but the device graph has {len(devices)} devices")
    devs = spec.get("devices")
    if devs is None:
        devs = list(range(workers))
    # an ordered collection of devices: a string would be read character by character as
    # device names, a mapping by its keys, a set in no defined order
    if isinstance(devs, (str, bytes, Mapping, set, frozenset)):
        raise ConfigError(f"{op_name!r}: bad device list {devs!r}: expected a list of devices")
    try:
        devs = [devices._index(x) for x in devs]
    except Exception as exc:
        raise ConfigError(f"{op_name!r}: bad device list {spec.get('devices')!r}: {exc}") from None
    if workers > len(devices):
        raise ConfigError(f"{op_name!r}: {workers} workers but the device graph has {len(devices)} devices")
    if len(devs) != workers or len(set(devs)) != workers:
        raise ConfigError(f"{op_name!r}: {workers} workers need {workers} distinct devices, got {devs}")
    return OpConfig(dims, tuple(degrees), tuple(devs), reduction)


@dataclass
class LayerCost:
    """One row of :meth:`Plan.layer_costs`: the terms of Eq. 1 charged to one op."""

    op: str
    kind: str
    config: OpConfig
    t_c: float
    t_x: float        # transfers on the op's in-edges
    t_s: float
    bytes_in: float   # bytes moved on the in-edges
    bytes_sync: float

    def as_dict(self) -> dict[str, Any]:
        return {"op": self.op, "kind": self.kind, "degrees": self.config.as_dict(),
                "devices": list(self.config.devices), "t_c": self.t_c, "t_x": self.t_x, "t_s": self.t_s,
                "bytes_in": self.bytes_in, "bytes_sync": self.bytes_sync}


@dataclass
class _Evaluation:
    rows: list[LayerCost]
    cost: float
    breakdown: dict[str, float]
    bytes_moved: float


def evaluate(graph: Graph, devices: DeviceGraph, configs: Mapping[str, OpConfig],
             options: CostOptions, costs: ComputeCosts | None = None) -> _Evaluation:
    """Eq. 1 for one strategy, from the same C tables the search uses (one config per op)."""
    problem = make_problem(graph, devices, options)
    for op in graph.ops:
        c = configs[op.name]
        problem.set_configs(op.index, *config_arrays([c.degrees], [c.devices]),
                            np.array([reduction_pair(op, c)], dtype=np.int32))
    problem.build_tables(with_bytes=True)
    if costs is not None:
        apply_profile(problem, graph, devices, costs)
    tx = np.zeros(len(graph.ops))
    bx = np.zeros(len(graph.ops))
    for e, (_, dst, _) in enumerate(problem.edges()):
        t, b = problem.edge_table(e)
        tx[dst] += t[0, 0]
        bx[dst] += b[0, 0]
    rows = []
    for op in graph.ops:
        tc, ts, sb = problem.node_costs(op.index)
        rows.append(LayerCost(op.name, op.kind, configs[op.name], float(tc[0]), float(tx[op.index]),
                              float(ts[0]), float(bx[op.index]), float(sb[0])))
    breakdown = {"compute": sum(r.t_c for r in rows), "transfer": sum(r.t_x for r in rows),
                 "sync": sum(r.t_s for r in rows)}
    moved = sum(r.bytes_in + r.bytes_sync for r in rows)
    return _Evaluation(rows, sum(breakdown.values()), breakdown, moved)


class Plan:
    """A parallelization strategy: one :class:`OpConfig` per op of ``graph`` on ``devices``."""

    def __init__(self, graph: Graph, devices: DeviceGraph, configs: Mapping[str, OpConfig],
                 options: CostOptions | None = None, name: str = "plan",
                 search_stats: dict[str, Any] | None = None, costs: ComputeCosts | None = None) -> None:
        missing = [op.name for op in graph.ops if op.name not in configs]
        if missing:
            raise ConfigError(f"plan has no configuration for ops {missing[:5]}")
        self.graph = graph
        self.devices = devices
        self.configs = {op.name: configs[op.name] for op in graph.ops}
        self.options = options or CostOptions()
        self.name = name
        self.search_stats = search_stats or {}
        self.costs = costs   # measured compute times, if the plan was costed with them
        self._evaluation: _Evaluation | None = None

    # ----- construction ------------------------------------------------------
    @classmethod
    def from_dict(cls, graph: Graph, devices: DeviceGraph, spec: Mapping[str, Mapping[str, Any]],
                  options: CostOptions | None = None, name: str = "user",
                  costs: ComputeCosts | None = None) -> "Plan":
        """A user's own strategy, e.g. ``{"conv1": {"n": 4}, "fc": {"c": 2, "devices": [0, 1]}}``.
        Ops not listed run on one worker (device 0)."""
        if not isinstance(spec, Mapping):
            raise ConfigError(f"a plan spec must map op names to configurations, got {type(spec).__name__}")
        for op_name in spec:
            if op_name not in graph:
                raise ConfigError(f"no op named {op_name!r} in graph {graph.name!r}")
        configs = {op.name: make_config(graph, devices, op.name, spec.get(op.name, {})) for op in graph.ops}
        return cls(graph, devices, configs, options, name, costs=costs)

    # ----- costs ---------------------------------------------------------------
    def _eval(self) -> _Evaluation:
        if self._evaluation is None:
            self._evaluation = evaluate(self.graph, self.devices, self.configs, self.options, self.costs)
        return self._evaluation

    @property
    def cost(self) -> float:
        """Eq. 1: estimated seconds per training iteration."""
        return self._eval().cost

    @property
    def breakdown(self) -> dict[str, float]:
        """``{"compute": s, "transfer": s, "sync": s}``, summing to :attr:`cost`."""
        return dict(self._eval().breakdown)

    @property
    def bytes_moved(self) -> float:
        """Bytes transferred per iteration: tensors between layers (both directions) + parameter sync."""
        return self._eval().bytes_moved

    def layer_costs(self) -> list[LayerCost]:
        """One row per op: its configuration, t_c, t_x of its in-edges, t_s."""
        return list(self._eval().rows)

    def __getitem__(self, op_name: str) -> OpConfig:
        try:
            return self.configs[op_name]
        except KeyError:
            raise KeyError(f"no op named {op_name!r} in this plan") from None

    def __iter__(self):
        return iter(self.configs.items())

    def __len__(self) -> int:
        return len(self.configs)

    def memory(self, optimizer_state: int = 1, swap: Any = None):
        """Per device: its arena and the bytes of weights, optimizer state, activations kept,
        recomputed and swapped (:func:`shardwise.iteration.memory.plan_memory`), with the
        recomputation ``sw.search(..., recompute=True)`` chose for this plan, or ``swap``'s (a
        SwapPlan).  ``optimizer_state``: 1 for SGD, 2 for Adam.  ``print`` the result for a table."""
        from shardwise.iteration.memory import plan_memory

        return plan_memory(self, optimizer_state, swap)

    def compare(self, baselines: Sequence["Plan"] | None = None, costs: Any = None):
        """This plan beside data, model and OWT parallelism (or ``baselines``): simulated
        iteration, Eq. 1 cost and its terms, and why the plan wins or loses; with the plan's
        costs unless ``costs`` is given.  Returns a :class:`shardwise.plan_compare.Comparison`
        (``print`` it; ``.speedup`` is the fastest baseline's simulated time over the plan's)."""
        from shardwise.plan_compare import compare

        return compare(self, baselines, costs)

    def explain(self, op_name: str, top: int = 5):
        """The op's configuration beside the ``top`` cheapest others the search could give it,
        each costed by Eq. 1 with the rest of the plan fixed (compute, transfers on the op's
        edges, sync).  Returns a :class:`shardwise.plan_explain.Explanation`; ``print`` it."""
        from shardwise.plan_explain import explain

        return explain(self, op_name, top)

    def summary(self, baselines: Sequence["Plan"] = ()) -> str:
        """The strategy table, the totals, and optionally a comparison with other plans."""
        rows = self.layer_costs()
        head = f"{'op':<28} {'kind':<11} {'split':<16} {'devices':<10} {'t_c ms':>9} {'t_x ms':>9} {'t_s ms':>9}"
        lines = [f"Plan {self.name!r} for {self.graph.name!r} on {self.devices.name!r} "
                 f"({len(self.devices)} devices, sync={self.options.sync}, precision={self.options.precision})",
                 head, "-" * len(head)]
        for r in rows:
            lines.append(f"{r.op[:28]:<28} {r.kind:<11} {r.config.split_dims():<16} "
                         f"{r.config.device_text():<10} {r.t_c * 1e3:9.3f} {r.t_x * 1e3:9.3f} {r.t_s * 1e3:9.3f}")
        b = self.breakdown
        lines.append("-" * len(head))
        lines.append(f"estimated iteration: {self.cost * 1e3:.3f} ms  (compute {b['compute'] * 1e3:.3f}, "
                     f"transfer {b['transfer'] * 1e3:.3f}, sync {b['sync'] * 1e3:.3f})  "
                     f"bytes moved: {self.bytes_moved / 1e6:.2f} MB")
        idle = self.idle_devices()
        if idle:
            lines.append(f"note: {len(idle)} of {len(self.devices)} devices get no work from this plan "
                         f"({_device_ranges(idle)}): no split over them pays for its transfers at this "
                         f"minibatch ({self.graph.ops[0].shape[0]}); a larger minibatch, or fewer devices, "
                         f"would use them")
        if self.options.precision != "fp32":
            lines.append(f"note: costed in {self.options.precision} (mixed precision: 2-byte activations, "
                         f"gradients and messages, float32 master weights and optimizer state, dense peaks for "
                         f"matrix products and convolutions); the CPU runtime trains it in float32")
        if baselines:
            lines.append("")
            lines.append(compare_text([self, *baselines]))
        return "\n".join(lines)

    def idle_devices(self) -> list[int]:
        """The devices no op of this plan runs on (a plan may leave devices idle when splitting
        over them costs more in transfers than it saves)."""
        used = {d for c in self.configs.values() for d in c.devices}
        return [d for d in range(len(self.devices)) if d not in used]

    def plot(self, path: str | None = None):
        """Draw the network with each op's configuration (matplotlib); see shardwise.viz."""
        from shardwise.viz import plot_plan

        return plot_plan(self, path)

    def to_dict(self) -> dict[str, Any]:
        return {
            "format": PLAN_FORMAT, "version": PLAN_VERSION, "name": self.name,
            "graph": {"name": self.graph.name, "fingerprint": self.graph.fingerprint(), "ops": len(self.graph.ops)},
            "devices": {"name": self.devices.name, "fingerprint": self.devices.fingerprint(),
                        "count": len(self.devices)},
            "cost_model": {"sync": self.options.sync, "bytes_per_element": self.options.bytes_per_element,
                           "backward_factor": self.options.backward_factor, "precision": self.options.precision},
            "ops": {n: {**c.as_dict(), "devices": list(c.devices)} for n, c in self.configs.items()},
            "estimate": {"cost": self.cost, "breakdown": self.breakdown, "bytes_moved": self.bytes_moved},
        }

    def save(self, path: str | os.PathLike) -> None:
        """Write the plan as JSON atomically (temporary file, fsync, rename)."""
        write_atomically(path, json.dumps(self.to_dict(), indent=1).encode())

    @classmethod
    def load(cls, path: str | os.PathLike, graph: Graph, devices: DeviceGraph) -> "Plan":
        """Read a plan file; refuses files made for another graph or device graph."""
        try:
            with open(path) as f:
                data = json.load(f)
        except UnicodeDecodeError:
            raise PlanFileError(f"{path}: not a plan file (not text)") from None
        except (ValueError, RecursionError) as exc:   # JSONDecodeError, digit and nesting limits
            raise PlanFileError(f"{path}: not a plan file (invalid JSON: {type(exc).__name__}: {exc})") from None
        return cls.from_json_dict(data, graph, devices, str(path))

    @classmethod
    def from_json_dict(cls, data: Any, graph: Graph, devices: DeviceGraph, where: str = "plan") -> "Plan":
        if not isinstance(data, dict) or data.get("format") != PLAN_FORMAT:
            raise PlanFileError(f"{where}: not a shardwise plan (missing format {PLAN_FORMAT!r})")
        version = data.get("version")
        if type(version) is not int or version != PLAN_VERSION:  # not True, not 1.0
            raise PlanFileError(f"{where}: plan format version {version!r}, expected {PLAN_VERSION}")
        try:
            g_fp, d_fp = data["graph"]["fingerprint"], data["devices"]["fingerprint"]
            ops, model = data["ops"], data["cost_model"]
            if not isinstance(model, dict):
                raise TypeError(f"cost_model must be an object, got {type(model).__name__}")
            # the numbers as they are: CostOptions refuses bools, strings and non-finite values
            # (float() would have read true as 1.0 and "4" as 4.0)
            if model["bytes_per_element"] is None:   # CostOptions would read None as "the precision's"
                raise TypeError("bytes_per_element must be a number, got None")
            options = CostOptions(model["sync"], model["bytes_per_element"], model["backward_factor"],
                                  precision=model.get("precision", "fp32"))   # files before precision: fp32
            for key, value in (("graph fingerprint", g_fp), ("devices fingerprint", d_fp),
                               ("name", data.get("name", "plan"))):
                if not isinstance(value, str):
                    raise TypeError(f"{key} must be a string, got {value!r}")
        except (KeyError, TypeError, ValueError, ConfigError) as exc:
            raise PlanFileError(f"{where}: malformed plan file ({type(exc).__name__}: {exc})") from None
        if g_fp != graph.fingerprint():
            raise PlanFileError(f"{where}: made for graph {data['graph'].get('name')!r} (fingerprint {g_fp}), "
                                f"not {graph.name!r} ({graph.fingerprint()})")
        if d_fp != devices.fingerprint():
            raise PlanFileError(f"{where}: made for device graph {data['devices'].get('name')!r} "
                                f"(fingerprint {d_fp}), not {devices.name!r} ({devices.fingerprint()})")
        if not isinstance(ops, dict) or set(ops) != set(graph.op_names()):
            raise PlanFileError(f"{where}: the plan's ops do not match the graph's")
        try:
            configs = {n: make_config(graph, devices, n, spec) for n, spec in ops.items()}
        except ConfigError as exc:
            raise PlanFileError(f"{where}: {exc}") from None
        return cls(graph, devices, configs, options, data.get("name", "plan"))

    def __repr__(self) -> str:
        return f"Plan({self.name!r}, graph={self.graph.name!r}, devices={len(self.devices)})"


def compare_text(plans: Sequence[Plan]) -> str:
    """A table of cost, breakdown and bytes moved, relative to the first plan."""
    first = plans[0]
    head = f"{'strategy':<16} {'ms/iter':>10} {'compute':>9} {'transfer':>9} {'sync':>9} {'MB moved':>10} {'vs ' + first.name:>12}"
    lines = [head, "-" * len(head)]
    for p in plans:
        b = p.breakdown
        ratio = p.cost / first.cost if first.cost > 0 else math.nan
        lines.append(f"{p.name:<16} {p.cost * 1e3:10.3f} {b['compute'] * 1e3:9.3f} {b['transfer'] * 1e3:9.3f} "
                     f"{b['sync'] * 1e3:9.3f} {p.bytes_moved / 1e6:10.2f} {ratio:11.2f}x")
    return "\n".join(lines)


def _device_ranges(devices: Sequence[int]) -> str:
    """"devices 1, 4-7" of sorted device indices."""
    runs: list[list[int]] = []
    for d in devices:
        if runs and d == runs[-1][1] + 1:
            runs[-1][1] = d
        else:
            runs.append([d, d])
    return "devices " + ", ".join(f"{a}" if a == b else f"{a}-{b}" for a, b in runs)
