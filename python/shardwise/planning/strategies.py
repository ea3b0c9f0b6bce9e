"""The baselines of Jia et al., *Exploring Hidden Dimensions in Parallelizing Convolutional Neural
Networks* (ICML 2018), section 6: data, model and OWT parallelism.

Each picks, per op, the largest allowed worker count (:func:`worker_counts`)
whose degree divides the split dimension, on devices 0..k-1, so every baseline
lies inside the search space and the searched cost can never exceed it.
"""
from __future__ import annotations

from typing import Any

from shardwise.machine.devices import DeviceGraph
from shardwise.graph import Graph, Op
from shardwise.plan import OpConfig, Plan
from shardwise.planning.problem import CostOptions, dim_names, worker_counts


def _split(op: Op, dim: int, ndev: int) -> OpConfig:
    shape = op.shape
    dims = dim_names(len(shape))
    best = 1
    if dim < len(shape):
        size, granule = shape[dim], op.desc.split_granules()[dim]
        for k in worker_counts(ndev):
            if size % k == 0 and (size // k) % granule == 0:
                best = k
    degrees = tuple(best if d == dim else 1 for d in range(len(dims)))
    return OpConfig(dims, degrees, tuple(range(best)))


def data_parallel(graph: Graph, devices: DeviceGraph, options: CostOptions | None = None) -> Plan:
    """Every op split over the sample dimension on as many devices as divide the minibatch."""
    configs = {op.name: _split(op, 0, len(devices)) for op in graph.ops}
    return Plan(graph, devices, configs, options, name="data")


def model_parallel(graph: Graph, devices: DeviceGraph, options: CostOptions | None = None) -> Plan:
    """Every op split over the channel dimension: parameters divided equally among devices."""
    configs = {op.name: _split(op, 1, len(devices)) for op in graph.ops}
    return Plan(graph, devices, configs, options, name="model")


def _after_first_linear(graph: Graph) -> set[int]:
    """Ops that are fully-connected layers or come after one."""
    marked: set[int] = set()
    for op in graph.ops:  # ops are in topological order
        if op.kind == "linear" or any(i in marked for i in op.inputs):
            marked.add(op.index)
    return marked


def owt(graph: Graph, devices: DeviceGraph, options: CostOptions | None = None) -> Plan:
    """Krizhevsky's "one weird trick": data parallelism for convolutional and pooling
    layers, model (channel) parallelism from the first fully-connected layer on."""
    late = _after_first_linear(graph)
    configs = {op.name: _split(op, 1 if op.index in late else 0, len(devices)) for op in graph.ops}
    return Plan(graph, devices, configs, options, name="owt")


def layout_baselines(graph: Graph, devices: DeviceGraph, options: CostOptions | None = None) -> list[Plan]:
    """The parallel layouts the graph's builder registered (``graph.layouts``, as ``sw.models.llama``
    and ``sw.models.gpt`` register Megatron-LM's) on a machine of equal nodes: tensor parallelism
    over each node's devices, data parallelism across the nodes.  A layout that does not apply
    (its heads, batch or sequence do not divide) is left out; none on a machine of one device or
    of unequal nodes."""
    from shardwise.errors import ShardwiseError

    by_node: dict[Any, int] = {}
    for dev in devices.devices:
        by_node[dev.node] = by_node.get(dev.node, 0) + 1
    sizes = set(by_node.values())
    if not graph.layouts or len(devices) < 2 or len(sizes) != 1:
        return []
    tp, dp = sizes.pop(), len(by_node)
    if tp == 1:   # one device a node: tensor parallelism over the whole machine
        tp, dp = dp, 1
    plans = []
    for name, layout in graph.layouts.items():
        try:
            plans.append(Plan.from_dict(graph, devices, layout(tp, dp), options, name=f"{name} {tp} x data {dp}"))
        except (ShardwiseError, ValueError):
            continue   # (its shapes do not divide)
    return plans


def baselines(graph: Graph, devices: DeviceGraph, options: CostOptions | None = None) -> list[Plan]:
    return [data_parallel(graph, devices, options), model_parallel(graph, devices, options),
            owt(graph, devices, options)]
