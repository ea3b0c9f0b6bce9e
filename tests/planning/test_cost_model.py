"""The cost model checked against independent brute-force computations.

Regions: the C core derives the input box a worker reads by interval
arithmetic on the op description.  Here the same sets are found by
enumerating every iteration point of the worker's box in NumPy, so halos,
padding, concat windows and flatten's quasi-affine map are all checked
against a computation that shares no code with the core.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

import shardwise as sw
from shardwise.ops.desc import DATA
from shardwise.planning.problem import dim_names

BYTES = 4.0


def worker_boxes(shape, degrees):
    """Row-major worker grid, as csrc/core/region.c sw_worker_box."""
    boxes = []
    for coords in itertools.product(*[range(d) for d in degrees]):
        boxes.append(tuple((c * (s // d), (c + 1) * (s // d)) for c, s, d in zip(coords, shape, degrees)))
    return boxes


def read_set(desc, slot, out_box):
    """Every input index read by the points of out_box (all reductions), by enumeration."""
    inp = desc.inputs[slot]
    ranges = [np.arange(lo, hi) for lo, hi in out_box]
    ranges += [np.arange(e) for e in desc.extents[desc.out_rank:]]
    grids = np.meshgrid(*ranges, indexing="ij")
    pts = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)
    if inp.window is not None:
        keep = np.ones(len(pts), bool)
        for d, (lo, hi) in enumerate(inp.window):
            keep &= (pts[:, d] >= lo) & (pts[:, d] < hi)
        pts = pts[keep]
    idx = []
    for e in inp.exprs:
        v = pts @ np.asarray(e.coefs, dtype=np.int64) + e.offset
        v = np.floor_divide(v, e.div)
        if e.mod:
            v = np.mod(v, e.mod)
        idx.append(v)
    idx = np.stack(idx, axis=1) if idx else np.zeros((len(pts), 0), np.int64)
    inside = np.all((idx >= 0) & (idx < np.asarray(inp.shape)), axis=1)
    return {tuple(r) for r in idx[inside]}


def owned(box):
    return set(itertools.product(*[range(lo, hi) for lo, hi in box]))


def brute_bytes_in(g, plan, op_name):
    """Bytes moved into op_name: forward activations + backward gradients, except that
    no gradient flows back into a graph input."""
    op = g[op_name]
    total = 0.0
    slot_of_data = [k for k, i in enumerate(op.desc.inputs) if i.role == DATA]
    for slot, src in zip(slot_of_data, op.inputs):
        src_op = g.ops[src]
        cs, cd = plan[src_op.name], plan[op.name]
        src_sets = [owned(b) for b in worker_boxes(src_op.shape, cs.degrees)]
        directions = 1 if src_op.kind == "input" else 2
        for w, box in enumerate(worker_boxes(op.shape, cd.degrees)):
            need = read_set(op.desc, slot, box)
            for s, have in enumerate(src_sets):
                if cs.devices[s] != cd.devices[w]:
                    total += len(need & have) * BYTES * directions
    return total


def two_devices(n=2, bw=10e9):
    d = sw.DeviceGraph("test")
    for k in range(n):
        d.add_device(f"d{k}", flops=1e12, memory=1e9, mem_bandwidth=1e11)
    for a in range(n):
        for b in range(a + 1, n):
            d.add_link(a, b, bandwidth=bw)
    return d


def all_degree_choices(shape, granules, ndev):
    out = []
    for degs in itertools.product(*[[k for k in range(1, ndev + 1) if s % k == 0 and (s // k) % g == 0]
                                    for s, g in zip(shape, granules)]):
        if math.prod(degs) <= ndev:
            out.append(degs)
    return out


def small_graphs():
    """(graph, consumer op name) pairs covering every op kind's index maps."""
    cases = []
    for kernel, stride, pad in [(3, 1, 1), (3, 2, 1), (2, 2, 0), (5, 1, 2), (3, 1, 0), (1, 1, 0)]:
        g = sw.Graph(f"conv{kernel}{stride}{pad}")
        x = g.input("x", (2, 3, 6, 6))
        g.conv2d(x, 2, kernel=kernel, stride=stride, padding=pad, name="op")
        cases.append((g, "op"))
    g = sw.Graph("pool")
    x = g.input("x", (2, 2, 6, 6))
    g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name="op")
    cases.append((g, "op"))
    g = sw.Graph("concat")
    x = g.input("x", (2, 2, 4, 4))
    a = g.relu(x, name="a")
    b = g.conv2d(x, 4, kernel=1, name="b")
    g.concat([a, b], axis=1, name="op")
    cases.append((g, "op"))
    g = sw.Graph("flatten")
    x = g.input("x", (2, 4, 2, 2))
    g.flatten(x, name="op")
    cases.append((g, "op"))
    g = sw.Graph("linear")
    x = g.input("x", (4, 6))
    g.linear(x, 4, name="op")
    cases.append((g, "op"))
    g = sw.Graph("softmax")
    x = g.input("x", (4, 6))
    g.softmax(x, name="op")
    cases.append((g, "op"))
    g = sw.Graph("add")
    x = g.input("x", (2, 2, 4, 4))
    a = g.relu(x, name="a")
    g.add(a, x, name="op")
    cases.append((g, "op"))
    return cases


@pytest.mark.parametrize("g,name", small_graphs(), ids=lambda v: v.name if isinstance(v, sw.Graph) else v)
def test_transfer_bytes_match_brute_force(g, name):
    """For every pair of (producer, consumer) partitions on up to 4 devices, with
    the consumer on shifted devices too, bytes moved equal the enumerated sets."""
    d = two_devices(4)
    op = g[name]
    rng = np.random.default_rng(0)
    checked = 0
    for dc in all_degree_choices(op.shape, op.desc.split_granules(), 4):
        for src in op.inputs:
            sop = g.ops[src]
            for ds in all_degree_choices(sop.shape, sop.desc.split_granules(), 4):
                if rng.random() > 0.35:
                    continue
                spec = {}
                for other in g.ops:
                    spec[other.name] = dict(zip(dim_names(len(other.shape)), ds if other.index == src else
                                                (1,) * len(other.shape)))
                kc = math.prod(dc)
                spec[name] = {**dict(zip(dim_names(len(op.shape)), dc)),
                              "devices": list(rng.permutation(4)[:kc])}
                plan = sw.Plan.from_dict(g, d, spec)
                row = {r.op: r for r in plan.layer_costs()}[name]
                expected = brute_bytes_in(g, plan, name)
                assert row.bytes_in == pytest.approx(expected, abs=1e-6), (ds, dc, spec[name])
                assert row.t_x == pytest.approx(expected / 10e9, rel=1e-12, abs=1e-15)
                checked += 1
    assert checked > 3


def test_halo_of_height_split_conv():
    """3x3 conv, pad 1, split h=2 over a producer split h=2 on the same devices:
    each worker reads exactly one row of the other's shard (per sample, channel),
    and its gradient goes back in the backward pass."""
    g = sw.Graph("halo")
    x = g.input("x", (4, 3, 8, 8))
    x = g.relu(x, name="relu")
    g.conv2d(x, 5, kernel=3, padding=1, name="conv")
    d = two_devices(2, bw=1e9)
    plan = sw.Plan.from_dict(g, d, {"x": {"h": 2}, "relu": {"h": 2}, "conv": {"h": 2}})
    rows = {r.op: r for r in plan.layer_costs()}
    halo_elements = 2 * (4 * 3 * 1 * 8)   # two workers, one row of 4x3x8 each
    assert rows["conv"].bytes_in == halo_elements * BYTES * 2
    assert rows["conv"].t_x == pytest.approx(halo_elements * BYTES * 2 / 1e9)
    assert rows["relu"].t_x == 0.0


def test_sync_parameter_server_and_ring():
    """Data parallelism on k devices: k-1 replicas push and pull every weight
    (parameter server) or 2(k-1)/k of it goes around a ring."""
    g = sw.Graph("fc")
    x = g.input("x", (8, 16))
    g.linear(x, 10, name="fc")
    params_bytes = (16 * 10 + 10) * BYTES
    for k in (2, 4):
        d = two_devices(k, bw=2e9)
        for sync, expected in (("parameter_server", (k - 1) * 2 * params_bytes / 2e9),
                               ("ring", 2 * (k - 1) / k * params_bytes / 2e9)):
            plan = sw.Plan.from_dict(g, d, {"x": {"n": k}, "fc": {"n": k}}, options=sw.CostOptions(sync=sync))
            row = {r.op: r for r in plan.layer_costs()}["fc"]
            assert row.t_s == pytest.approx(expected)
            assert row.t_x == 0.0
    # channel split: disjoint weight slices, nothing to synchronize
    plan = sw.Plan.from_dict(g, two_devices(2), {"fc": {"c": 2}})
    assert {r.op: r for r in plan.layer_costs()}["fc"].t_s == 0.0


def test_compute_time_is_roofline_of_slowest_worker():
    g = sw.Graph("c")
    x = g.input("x", (4, 3, 8, 8))
    g.conv2d(x, 6, kernel=3, padding=1, bias=False, name="conv")
    d = sw.DeviceGraph("het")
    d.add_device("fast", flops=2e9, memory=1e9, mem_bandwidth=1e12)
    d.add_device("slow", flops=1e9, memory=1e9, mem_bandwidth=1e12)
    d.add_link(0, 1, bandwidth=1e9)
    plan = sw.Plan.from_dict(g, d, {"conv": {"n": 2}})
    row = {r.op: r for r in plan.layer_costs()}["conv"]
    flops_per_worker = 2 * (2 * 6 * 8 * 8) * (3 * 3 * 3)   # 2 FLOPs per MAC, half the batch
    assert row.t_c == pytest.approx(3 * flops_per_worker / 1e9)   # the slow device sets the pace
    assert g.flops() == 2 * flops_per_worker


def test_memory_bound_op_uses_bandwidth():
    g = sw.Graph("r")
    x = g.input("x", (4, 8, 16, 16))
    g.relu(x, name="relu")
    d = two_devices(1)
    plan = sw.Plan.from_dict(g, d, {})
    row = {r.op: r for r in plan.layer_costs()}["relu"]
    elements = 2 * 4 * 8 * 16 * 16   # read the input, write the output
    assert row.t_c == pytest.approx(3 * elements * BYTES / 1e11)


def test_cost_is_sum_of_layer_rows_and_breakdown():
    g = sw.models.lenet5(batch=16)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4)
    plan = sw.search(g, d, objective="eq1")
    rows = plan.layer_costs()
    assert plan.cost == pytest.approx(sum(r.t_c + r.t_x + r.t_s for r in rows))
    assert sum(plan.breakdown.values()) == pytest.approx(plan.cost)
    assert plan.bytes_moved == pytest.approx(sum(r.bytes_in + r.bytes_sync for r in rows))


def test_widest_route_through_a_hub():
    d = sw.DeviceGraph("star")
    for k in range(3):
        d.add_device(f"d{k}", flops=1e12, memory=1e9)
    d.add_link(0, 1, bandwidth=10e9)
    d.add_link(1, 2, bandwidth=4e9)
    r = d.route_bandwidths()
    assert r[0, 2] == 4e9 and r[2, 0] == 4e9 and r[0, 1] == 10e9


def test_profile_table_replaces_roofline():
    g = sw.Graph("p")
    x = g.input("x", (4, 3, 8, 8))
    g.conv2d(x, 4, kernel=3, padding=1, name="conv")
    d = two_devices(2)
    # make the one-worker conv look free and every split expensive: the search must follow the profile
    prof = sw.ProfileTable({("conv2d", (4, 4, 8, 8)): 0.0})
    for shard in [(2, 4, 8, 8), (4, 2, 8, 8), (4, 4, 4, 8), (4, 4, 8, 4)]:
        prof.add("conv2d", shard, 1.0)
    plan = sw.search(g, d, costs=prof, objective="eq1")
    assert plan["conv"].workers == 1
    assert plan.search_stats["profiled_shards"] > 0
    # the plan is costed with the same measured times the search used
    assert plan.cost == pytest.approx(plan.search_stats["searched_cost"])
    assert {r.op: r for r in plan.layer_costs()}["conv"].t_c == 0.0


def test_batchnorm_statistics_are_exchanged_twice():
    """n=2 batchnorm: gamma and beta once, the (2, C) statistics forward and backward."""
    g = sw.Graph("bn")
    x = g.input("x", (64, 16, 32, 32))
    g.batchnorm2d(x, name="bn")
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=2, device="P100")
    for split, expected in (({"n": 2}, 2 * (64 + 64 + 2 * 128) / 20e9), ({"h": 2}, 2 * (64 + 64 + 2 * 128) / 20e9),
                            ({"c": 2}, 0.0)):
        plan = sw.Plan.from_dict(g, d, {"x": split, "bn": split})
        row = {r.op: r for r in plan.layer_costs()}["bn"]
        assert row.t_s == pytest.approx(expected, abs=1e-18)
        assert row.t_x == 0.0


def test_input_edges_do_not_share_tables_with_inner_edges():
    """input -> a and a -> b have the same shapes, maps and configurations, but only the
    second carries a gradient back: their transfer tables must not be shared."""
    g = sw.Graph("twins")
    x = g.input("x", (4, 2, 8, 8))
    a = g.relu(x, name="a")
    g.relu(a, name="b")
    d = two_devices(2, bw=1e9)
    plan = sw.Plan.from_dict(g, d, {"x": {"h": 2}, "a": {"h": 2, "devices": [1, 0]}, "b": {"h": 2}})
    rows = {r.op: r for r in plan.layer_costs()}
    assert rows["b"].t_x == pytest.approx(2 * rows["a"].t_x)
    searched = sw.search(g, d, objective="eq1")
    assert searched.cost == pytest.approx(searched.search_stats["searched_cost"], rel=1e-12)
    for spec in ({"x": {"n": 2}, "a": {"n": 2, "devices": [1, 0]}, "b": {"n": 2}},):
        p = sw.Plan.from_dict(g, d, spec)
        r = {row.op: row for row in p.layer_costs()}
        assert r["b"].bytes_in == 2 * r["a"].bytes_in > 0


def test_released_tables_are_refused_until_built_again():
    """Problem.release_tables frees the cost tables and keeps the configurations: what reads
    the tables is refused with a clear error until build_tables makes them again, the same."""
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts

    g, d = sw.models.lenet5(batch=8), sw.DeviceGraph.cpu(4)
    p = make_problem(g, d, CostOptions(threads=1))
    p.enumerate(np.asarray(worker_counts(len(d)), dtype=np.int32))
    p.build_tables()
    before = [p.edge_table(e)[0].copy() for e in range(len(p.edges()))], [p.node_costs(i) for i in range(len(g.ops))]
    p.release_tables()
    with pytest.raises(RuntimeError, match="build_tables"):
        p.node_costs(0)
    with pytest.raises(RuntimeError, match="build_tables"):
        p.search("elimination", 1e9)
    assert len(p.workers(0)) > 1   # the configurations stay
    p.build_tables()
    for e, t in enumerate(before[0]):
        np.testing.assert_array_equal(p.edge_table(e)[0], t)
    for i, n in enumerate(before[1]):
        for a, b in zip(p.node_costs(i), n):
            np.testing.assert_array_equal(a, b)


# ----------------------------------------------------------------------------- partition-n-reduce
def read_set_iter(desc, slot, out_box, red_box):
    """read_set over an iteration box whose reduction ranges are ``red_box`` (not all of them)."""
    inp = desc.inputs[slot]
    ranges = [np.arange(lo, hi) for lo, hi in list(out_box) + list(red_box)]
    grids = np.meshgrid(*ranges, indexing="ij")
    pts = np.stack([g.ravel() for g in grids], axis=1).astype(np.int64)
    idx = []
    for e in inp.exprs:
        v = np.floor_divide(pts @ np.asarray(e.coefs, dtype=np.int64) + e.offset, e.div)
        idx.append(np.mod(v, e.mod) if e.mod else v)
    idx = np.stack(idx, axis=1)
    inside = np.all((idx >= 0) & (idx < np.asarray(inp.shape)), axis=1)
    return {tuple(r) for r in idx[inside]}


def reducing_workers(op, cfg):
    """(output box, reduction ranges, owner?) per worker: output blocks row-major, the split
    reduction's parts fastest (sw_config in csrc/internal.h)."""
    desc = op.desc
    r = cfg.reduction_degree
    var = desc.out_rank + desc.reductions.index(cfg.reduction[0]) if cfg.reduction else -1
    out = []
    for box in worker_boxes(op.shape, cfg.degrees):
        for part in range(r):
            red = [(0, e) for e in desc.extents[desc.out_rank:]]
            if var >= 0:
                size = desc.extents[var] // r
                red[var - desc.out_rank] = (part * size, (part + 1) * size)
            out.append((box, red, part == 0))
    return out


def brute_reduce_costs(g, plan, name):
    """(bytes into `name`, its sync bytes, bytes into its consumer) by enumeration."""
    op = g[name]
    cfg = plan[name]
    var = op.desc.out_rank + op.desc.reductions.index(cfg.reduction[0]) if cfg.reduction else -1
    workers = reducing_workers(op, cfg)
    src = g.ops[op.inputs[0]]
    src_sets = [owned(b) for b in worker_boxes(src.shape, plan[src.name].degrees)]
    bytes_in = 0.0
    for w, (box, red, _) in enumerate(workers):
        need = read_set_iter(op.desc, 0, box, red)
        for s, have in enumerate(src_sets):
            if plan[src.name].devices[s] != cfg.devices[w]:
                bytes_in += len(need & have) * BYTES * 2
    sync = 0.0
    for slot, inp in enumerate(op.desc.inputs):
        if inp.role == DATA:
            continue
        uses_var = any(e.coefs[var] for e in inp.exprs) if var >= 0 else True
        groups: dict[frozenset, list[int]] = {}
        for w, (box, red, owner) in enumerate(workers):
            if owner or uses_var:
                groups.setdefault(frozenset(read_set_iter(op.desc, slot, box, red)), []).append(w)
        for region, members in groups.items():
            sync += (len(members) - 1) * len(region) * BYTES * 2
    for box, red, owner in workers:
        if not owner:
            sync += math.prod(hi - lo for lo, hi in box) * BYTES * 2   # partial output + its gradient
    consumer = next(o for o in g.ops if op.index in o.inputs)
    owners = [(owned(box), cfg.devices[w]) for w, (box, _, owner) in enumerate(workers) if owner]
    bytes_out = 0.0
    for w, box in enumerate(worker_boxes(consumer.shape, plan[consumer.name].degrees)):
        need = read_set(consumer.desc, 0, box)
        for have, dev in owners:
            if dev != plan[consumer.name].devices[w]:
                bytes_out += len(need & have) * BYTES * 2
    return bytes_in, sync, bytes_out


def reduce_graphs():
    g = sw.Graph("conv-reduce")
    x = g.input("x", (2, 4, 5, 5))
    a = g.relu(x, name="a")
    c = g.conv2d(a, 2, kernel=3, padding=1, name="op")
    g.relu(c, name="after")
    h = sw.Graph("linear-reduce")
    x = h.input("x", (4, 8))
    a = h.relu(x, name="a")
    f = h.linear(a, 4, name="op")
    h.relu(f, name="after")
    return [(g, "ci"), (h, "i")]


@pytest.mark.parametrize("g,rname", reduce_graphs(), ids=lambda v: v.name if isinstance(v, sw.Graph) else v)
def test_partition_n_reduce_costs_match_brute_force(g, rname):
    """A split reduction: each worker reads its part of the reduction (fewer input bytes),
    non-owners skip the bias, the partial outputs travel to the owner and their gradient
    back, and consumers read the summed output from the owners only."""
    d = two_devices(4)
    op = g["op"]
    rng = np.random.default_rng(3)
    checked = 0
    for r in (2, 4):
        for dc in all_degree_choices(op.shape, op.desc.split_granules(), 4 // r):
            for ds in all_degree_choices(g["a"].shape, (1,) * len(g["a"].shape), 4):
                if rng.random() > 0.5:
                    continue
                da = all_degree_choices(g["after"].shape, (1,) * len(g["after"].shape), 4)
                after = da[int(rng.integers(len(da)))]
                spec = {"a": dict(zip(dim_names(len(ds)), ds)),
                        "after": {**dict(zip(dim_names(len(after)), after)),
                                  "devices": list(rng.permutation(4)[:math.prod(after)])},
                        "op": {**dict(zip(dim_names(len(dc)), dc)), rname: r,
                               "devices": list(rng.permutation(4)[:math.prod(dc) * r])}}
                plan = sw.Plan.from_dict(g, d, spec)
                assert plan["op"].reduction == (rname, r) and plan["op"].workers == math.prod(dc) * r
                rows = {row.op: row for row in plan.layer_costs()}
                bytes_in, sync, bytes_out = brute_reduce_costs(g, plan, "op")
                assert rows["op"].bytes_in == pytest.approx(bytes_in, abs=1e-6)
                assert rows["op"].bytes_sync == pytest.approx(sync, abs=1e-6)
                assert rows["after"].bytes_in == pytest.approx(bytes_out, abs=1e-6)
                checked += 1
    assert checked > 3


def test_partition_n_reduce_compute_is_split():
    g = sw.Graph("fc")
    x = g.input("x", (8, 64))
    g.linear(x, 16, bias=False, name="fc")
    d = two_devices(4)
    whole = sw.Plan.from_dict(g, d, {})
    split = sw.Plan.from_dict(g, d, {"fc": {"i": 4}})
    assert {r.op: r.t_c for r in split.layer_costs()}["fc"] == pytest.approx(
        {r.op: r.t_c for r in whole.layer_costs()}["fc"] / 4, rel=0.3)


def test_reduction_splits_are_searched_only_when_asked():
    """Opt-in: the default search space has no reduction splits (the executor cannot run them
    yet); with them the optimum can only get cheaper, and the search stays exact."""
    g = sw.models.alexnet(batch=128)
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4, device="P100")
    plain = sw.search(g, d, objective="eq1")
    assert all(c.reduction is None for c in plain.configs.values())
    wider = sw.search(g, d, options=sw.CostOptions(reduction_splits=True), objective="eq1")
    assert wider.cost <= plain.cost * (1 + 1e-12)
    assert any(c.reduction is not None for c in wider.configs.values())
    assert wider.cost == pytest.approx(wider.search_stats["searched_cost"], rel=1e-9)


def test_bad_reduction_specs():
    g = sw.Graph("p")
    x = g.input("x", (4, 2, 6, 6))
    g.pool2d(x, kernel=2, stride=2, name="pool")
    g.linear(g.flatten(x, name="fl"), 5, name="fc")
    d = two_devices(4)
    with pytest.raises(sw.ConfigError, match="cannot be split"):
        sw.Plan.from_dict(g, d, {"pool": {"dy": 2}})
    with pytest.raises(sw.ConfigError, match="does not divide"):
        sw.Plan.from_dict(g, d, {"fc": {"i": 5}})
    with pytest.raises(sw.ConfigError, match="devices"):
        sw.Plan.from_dict(g, d, {"fc": {"i": 4, "n": 2}})


def test_reduction_split_plans_round_trip_through_files(tmp_path):
    g = sw.Graph("fc")
    x = g.input("x", (8, 64))
    h = g.relu(x, name="r")
    g.linear(h, 16, name="fc")
    d = two_devices(4)
    plan = sw.Plan.from_dict(g, d, {"r": {"c": 2}, "fc": {"n": 2, "i": 2, "devices": [3, 2, 1, 0]}})
    assert plan["fc"].split_dims() == "n=2 i=2(sum)" and plan["fc"]["i"] == 2
    plan.save(tmp_path / "p.json")
    back = sw.Plan.load(tmp_path / "p.json", g, d)
    assert back["fc"] == plan["fc"]
    assert back.cost == pytest.approx(plan.cost, rel=1e-12)


def encoded_op(desc, producers):
    """The words of one op (encode_ops of it alone, the op count dropped) and where each data
    input's producer word lies in them, found from the layout (the C encoder's header comment)
    with the description read here: nvars, out_rank, extents, granules, additive flags, ninputs,
    then per input role, producer, rank, shape, five fields per index expression, window."""
    from shardwise.planning.problem import encode_ops

    blob, flops = encode_ops([desc], [producers])
    words = [int(w) for w in blob[1:]]
    nvars, rank = len(desc.extents), desc.out_rank
    at = 2 + nvars + rank + (nvars - rank) + 1
    slots = []
    for inp in desc.inputs:
        slots.append(at + 1)
        at += 3 + len(inp.shape) + len(inp.exprs) * (2 * nvars + 3) + 1
        at += 0 if inp.window is None else 2 * len(inp.window)
    assert at == len(words)
    assert tuple(flops[0]) == (desc.flops_per_point, desc.flops_per_output)
    return words, slots


def test_encoded_ops_carry_each_ops_split_granules_and_producers():
    """The C core's encoding of an op (encode_ops): its extents and granules are split_granules'
    (computed only where an expression has a divisor or modulus or a dimension is unsplittable),
    its additive reductions flagged, each index expression's coefficients, divisors, offset,
    div and mod in place, and encode_graph writes each data input's producer where a weight's
    -1 stands."""
    from shardwise.ops.desc import DATA, ROLE_BIAS
    from shardwise.planning.problem import encode_graph

    periodic = additive = 0
    for name in sw.models.names():
        g = sw.models.get(name)
        blob, flops = encode_graph(g)
        assert int(blob[0]) == len(g.ops) and flops.shape == (len(g.ops), 2)
        at = 1
        for i, op in enumerate(g.ops):
            desc = op.desc
            words, slots = encoded_op(desc, op.inputs)
            nvars, rank = words[0], words[1]
            assert (nvars, rank) == (len(desc.extents), desc.out_rank)
            assert tuple(words[2:2 + nvars]) == desc.extents
            assert tuple(words[2 + nvars:2 + nvars + rank]) == desc.split_granules()
            flags = words[2 + nvars + rank:2 * nvars + 2]
            assert flags == [int(v in desc.additive) for v in range(rank, nvars)]
            additive += sum(flags)
            periodic += any(e.div != 1 or e.mod != 0 for i in desc.inputs for e in i.exprs) or bool(desc.unsplittable)
            producers = iter(op.inputs)
            for inp, s in zip(desc.inputs, slots):
                assert words[s - 1] == (ROLE_BIAS if inp.bias else inp.role)
                assert words[s] == (next(producers) if inp.role == DATA else -1)
                assert tuple(words[s + 2:s + 2 + len(inp.shape)]) == inp.shape
                e = inp.exprs[-1] if inp.exprs else None
                if e is not None:   # the last expression's five fields end before the window word
                    end = s + 2 + len(inp.shape) + len(inp.exprs) * (2 * nvars + 3)
                    assert tuple(words[end - 3:end]) == (e.offset, e.div, e.mod)
                    assert tuple(words[end - 3 - 2 * nvars:end - 3 - nvars]) == e.coefs
                    assert tuple(words[end - 3 - nvars:end - 3]) == (e.vdivs or (1,) * nvars)
            assert [int(w) for w in blob[at:at + len(words)]] == words
            assert tuple(flops[i]) == (desc.flops_per_point, desc.flops_per_output)
            at += len(words)
        assert at == len(blob)
    assert periodic > 0   # some op's granules came from split_granules itself


def test_encode_ops_refuses_malformed_descriptions():
    """Bad descriptions raise a Python exception naming the op, never a crash."""
    from dataclasses import replace

    from shardwise.planning.problem import encode_ops

    g = sw.models.get("lenet5")
    good = [op.desc for op in g.ops]
    producers = [op.inputs for op in g.ops]
    with pytest.raises(ValueError, match="2 descriptions but 1 producer lists"):
        encode_ops(good[:2], producers[:1])
    bad = replace(good[1], out_rank=len(good[1].extents) + 1)
    with pytest.raises(ValueError, match="op 1: out_rank"):
        encode_ops([good[0], bad], producers[:2])
    with pytest.raises(AttributeError, match="op 0: .* no attribute 'extents'"):
        encode_ops([object()], [()])
    with pytest.raises(TypeError):
        encode_ops([good[0]], [None])
