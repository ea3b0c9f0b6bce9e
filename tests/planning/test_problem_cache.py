"""sw.search keeps the cost tables of its last plain searches (planning/problem_cache.py) and
reuses them only where building them afresh would give the same tables:

* the same graph, machine and options: the tables are reused, and the plan is bit for bit the
  plan of a search that built its own (configurations, cost, searched cost);
* a graph grown in place, a machine with another link, device or speed, other
  cost options or worker counts: new tables, and the plan of a fresh search;
* measured costs (which change the node costs of their problem) neither keep nor reuse tables;
* a memory-constrained search on kept tables leaves them as they were for the next search;
* the elimination's result is kept beside its tables, per algorithm and bound on its work;
* only the last MAX_KEPT problems are kept.
"""
from __future__ import annotations

import dataclasses

import pytest

import shardwise as sw
from shardwise.graph import Tensor
from shardwise.machine.devices import DeviceGraph
from shardwise.models.spec import load_model
from shardwise.planning import problem_cache, search_memory


@pytest.fixture(autouse=True)
def empty_cache():
    problem_cache.clear()
    yield
    problem_cache.clear()


def eq1(g, d, **kw):
    return sw.search(g, d, objective="eq1", progress=False, **kw)


def fresh(g, d, **kw):
    """The plan of a search that builds its own tables."""
    problem_cache.clear()
    plan = eq1(g, d, **kw)
    assert not plan.search_stats["kept_tables"]
    return plan


def same_plan(a, b) -> bool:
    return (a.configs == b.configs and a.cost.hex() == b.cost.hex()
            and a.search_stats["searched_cost"].hex() == b.search_stats["searched_cost"].hex())


def cluster(nodes=2, per=4, device="P100"):
    return sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per, device=device)


def test_the_same_problem_reuses_its_tables_and_finds_the_same_plan():
    g, d = sw.models.resnet18(), cluster()
    first = eq1(g, d)
    again = eq1(g, d)
    assert not first.search_stats["kept_tables"] and again.search_stats["kept_tables"]
    assert same_plan(first, again)
    # another Graph and DeviceGraph object with the same content: the same problem
    other = eq1(sw.models.resnet18(), cluster())
    assert other.search_stats["kept_tables"] and same_plan(first, other)
    assert same_plan(first, fresh(g, d))


def test_a_repeated_search_reads_the_kept_elimination_result():
    """The same problem, algorithm and max_evaluations: the elimination is not run again (its
    stage says so) and the plan is bit for bit the first search's; another bound runs its own
    elimination; editing a returned plan's stats leaves the kept result as it was."""
    g, d = sw.models.resnet18(), cluster()
    first = eq1(g, d)
    assert "elimination search" in first.search_stats["timings"]
    first.search_stats["residual_nodes"] = -1   # a caller's edit of its own plan
    again = eq1(g, d)
    assert again.search_stats["kept_tables"] and same_plan(first, again)
    assert not any(k == "elimination search" for k in again.search_stats["timings"])
    assert any(k.startswith("elimination search: kept") for k in again.search_stats["timings"])
    assert again.search_stats["residual_nodes"] >= 0
    bounded = eq1(g, d, max_evaluations=5e8)   # another bound: an elimination of its own, the same optimum
    assert "elimination search" in bounded.search_stats["timings"] and same_plan(first, bounded)
    assert same_plan(first, fresh(g, d))


def test_a_graph_grown_in_place_gets_new_tables():
    g, d = sw.models.lenet5(), cluster(1, 4)
    before = eq1(g, d)
    last = g.ops[-1]
    g.relu(Tensor(g, last.index, last.shape), name="extra")   # one more op, on the same Graph object
    after = eq1(g, d)
    assert not after.search_stats["kept_tables"] and "extra" in after.configs
    assert same_plan(after, fresh(g, d))
    assert "extra" not in before.configs


@pytest.mark.parametrize("change", ["bandwidth", "device", "link", "flops", "memory"])
def test_another_machine_gets_new_tables(change):
    g = sw.models.alexnet()
    d = cluster()
    eq1(g, d)
    if change == "bandwidth":
        d2 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100", intra_bandwidth=40e9)
    elif change == "device":
        d2 = cluster(device="V100")
    elif change == "link":
        d2 = sw.DeviceGraph("hand")
        for i in range(4):
            d2.add_device(f"g{i}", flops=9.3e12, memory=16e9, mem_bandwidth=732e9)
        for i in range(3):
            d2.add_link(i, i + 1, 20e9)
        eq1(g, d2)
        d2.add_link(0, 3, 40e9)   # the same DeviceGraph object, edited: a faster route 0 - 3
    elif change == "flops":
        d2 = cluster()
        d2.devices[5] = dataclasses.replace(d2.devices[5], flops=2 * d2.devices[5].flops)   # one device
    else:   # the same speeds, one device with more memory: a kind of its own, other device sets
        d2 = cluster()
        d2.devices[7] = dataclasses.replace(d2.devices[7], memory=2 * d2.devices[7].memory)
    plan = eq1(g, d2)
    assert not plan.search_stats["kept_tables"]
    assert same_plan(plan, fresh(g, d2))


@pytest.mark.parametrize("kw", [{"sync": "ring"}, {"precision": "bf16"}, {"worker_counts_": [1, 2, 4]},
                                {"options": sw.CostOptions(backward_factor=2.0)}])
def test_other_options_get_new_tables(kw):
    g, d = sw.models.alexnet(), cluster()
    eq1(g, d)
    plan = eq1(g, d, **kw)
    assert not plan.search_stats["kept_tables"]
    assert same_plan(plan, fresh(g, d, **kw))


def test_measured_costs_neither_keep_nor_reuse_tables():
    g, d = sw.models.lenet5(), cluster(1, 4)
    plain = eq1(g, d)
    conv = g.ops[1]
    shard = (conv.shape[0],) + tuple(conv.shape[1:])
    table = sw.ProfileTable({(conv.kind, shard): 1e-9})   # one op measured very fast on one worker
    measured = eq1(g, d, costs=table)
    assert not measured.search_stats["kept_tables"] and measured.search_stats["profiled_shards"] > 0
    again = eq1(g, d)   # the kept tables are the plain ones, untouched
    assert again.search_stats["kept_tables"] and same_plan(plain, again)
    problem_cache.clear()
    assert same_plan(measured, eq1(g, d, costs=table))


@pytest.mark.filterwarnings("ignore::shardwise.SearchWarning")
def test_a_memory_constrained_search_leaves_the_kept_tables_as_they_were():
    g, d = load_model("vgg_small", None).graph, DeviceGraph.parse("4", device="P100")
    plain = eq1(g, d, memory=False)
    budget = 0.95 * float(search_memory.arenas(plain).max())   # below the optimum's, above OWT's
    tight = eq1(g, d, memory=budget)   # the optimum does not fit: branch and bound over the tables
    assert tight.search_stats["kept_tables"] and tight.search_stats["memory"]["constrained"]
    again = eq1(g, d, memory=False)
    assert again.search_stats["kept_tables"] and same_plan(plain, again)


def test_only_the_last_problems_are_kept():
    d = cluster(1, 4)
    graphs = [sw.models.lenet5(), sw.models.alexnet(), sw.models.vgg16()][:problem_cache.MAX_KEPT + 1]
    for g in graphs:
        eq1(g, d)
    assert not eq1(graphs[0], d).search_stats["kept_tables"]   # the oldest went
    assert eq1(graphs[-1], d).search_stats["kept_tables"]


def test_the_path_a_search_takes_is_decided_afresh(monkeypatch):
    """Kept tables serve only a search that would take the same (plain) path: another
    algorithm, or the staged search's thresholds changed, build their own."""
    from shardwise.planning import search as search_module

    small, two = sw.models.lenet5(), sw.DeviceGraph.cpu(2)
    eq1(small, two)
    exhaustive = sw.search(small, two, algorithm="exhaustive", progress=False)
    assert not exhaustive.search_stats["kept_tables"]
    assert same_plan(exhaustive, eq1(small, two))   # (the elimination's own tables again)
    g, d = sw.models.alexnet(), cluster()
    eq1(g, d)
    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)   # every machine of identical devices is staged
    staged = eq1(g, d)
    assert "scale" in staged.search_stats and not staged.search_stats["kept_tables"]


@pytest.mark.filterwarnings("ignore::shardwise.SearchWarning")
def test_kept_buffer_totals_meet_each_searchs_own_budget():
    """The memory check of a search on kept tables reads the buffer totals of the same plan's
    earlier check, and compares them with its own budget: a budget below that plan's arena
    still gets a constrained search and a plan that fits it."""
    g, d = load_model("vgg_small", None).graph, DeviceGraph.parse("4", device="P100")
    roomy = eq1(g, d)   # every device's own memory: the optimum fits, its buffer totals are kept
    assert roomy.search_stats["memory"]["constrained"] is False
    again = eq1(g, d)
    assert again.search_stats["kept_tables"] and same_plan(roomy, again)
    budget = 0.95 * float(search_memory.arenas(roomy).max())
    tight = eq1(g, d, memory=budget)
    assert tight.search_stats["kept_tables"] and tight.search_stats["memory"]["constrained"]
    assert (search_memory.arenas(tight) <= budget).all()
    problem_cache.clear()
    assert same_plan(tight, eq1(g, d, memory=budget))


def test_searches_on_several_threads_never_share_a_kept_problem():
    """The C problem serves one thread at a time: searches of the same problem running at once
    on several threads (one of them finding it kept) all succeed with the same plan, and the
    kept problem is free again once they are done."""
    import threading

    g, d = sw.models.lenet5(batch=16), sw.DeviceGraph.parse("4", device="P100")
    want = sw.search(g, d, objective="eq1")
    errors, costs = [], []

    def run():
        try:
            for _ in range(4):
                costs.append(sw.search(g, d, objective="eq1").cost)
        except Exception as exc:   # noqa: BLE001 -- any failure is the test's
            errors.append(repr(exc))

    threads = [threading.Thread(target=run) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and len(costs) == 12 and all(c == want.cost for c in costs)
    assert sw.search(g, d, objective="eq1").search_stats["kept_tables"]
