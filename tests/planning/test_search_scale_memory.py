"""The staged search of large machines under memory (shardwise.planning.search_scale_memory).

On machines small enough for both, the staged path (forced with SCALE_ABOVE = -1) and the
plain memory-constrained search over every configuration on every aligned block
(shardwise.planning.search_memory) must agree:

* under budgets from "the Eq. 1 optimum does not fit" down to "only lean plans fit", on
  several graphs and two machines, whenever both searches say they are exact their Eq. 1
  costs are equal; the staged result always fits its budget (its memory plan is checked
  here again, not read from search_stats) and costs at least the unconstrained optimum;
* when nothing fits, the error names the device short of memory, the bytes needed and
  available in the user's units, and what would help (swapping activations, more devices,
  a smaller minibatch), never an internal parameter of the search.
"""
from __future__ import annotations

import importlib

import numpy as np
import pytest

import shardwise as sw
from shardwise.models.spec import load_model
from shardwise.planning import search_memory as sm

search_module = importlib.import_module("shardwise.planning.search")
REL = 1e-9


def chain(batch: int = 16) -> sw.Graph:
    g = sw.Graph("chain")
    x = g.input("x", (batch, 8, 8, 8))
    y = g.conv2d(x, 32, 3, padding=1)
    y = g.relu(y)
    y = g.flatten(y)
    y = g.linear(y, 256)
    y = g.linear(y, 10)
    g.softmax(y)
    return g


def mlp(batch: int = 32) -> sw.Graph:
    g = sw.Graph("mlp")
    x = g.input("x", (batch, 512))
    y = g.relu(g.linear(x, 1024))
    y = g.relu(g.linear(y, 1024))
    g.softmax(g.linear(y, 16))
    return g


def towers(channels: int = 64, batch: int = 8, size: int = 4) -> sw.Graph:
    g = sw.Graph("towers")
    x = g.input("x", (batch, channels, size, size))
    a = g.conv2d(x, channels, kernel=3, padding=1, name="a")
    b = g.conv2d(x, channels, kernel=3, padding=1, name="b")
    g.relu(g.concat([a, b], name="c"), name="r")
    return g


GRAPHS = {"chain": chain, "towers": towers, "mlp": mlp}
# graphs on which both searches prove their plan optimal under at least one of the budgets
# (on the MLP the memory plans need more than the footprints, so neither is proven: it is
# checked for fitting and for doing no worse)
PROVEN = ("chain", "towers")
MACHINES = {"2x4": lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=4),
            "4x2": lambda: sw.DeviceGraph.cluster(nodes=4, devices_per_node=2, device="V100")}


def searched(g, d, budget, staged: bool):
    with pytest.MonkeyPatch.context() as m:
        m.setattr(sm, "MAX_SOLVES", 3000)   # small graphs: let the branch and bound finish
        if staged:
            m.setattr(search_module, "SCALE_ABOVE", -1)
        else:
            m.setattr(search_module, "SCALE_ABOVE", 10**12)
            m.setattr(search_module, "SCALE_WORK", float("inf"))
        return sw.search(g, d, objective="eq1", memory=budget)


def budgets(g, d) -> list[float]:
    """From just below the Eq. 1 optimum's arena down towards the leanest baseline's."""
    free = sw.search(g, d, objective="eq1", memory=False)
    top = float(sm.arenas(free).max())
    lean = min(float(sm.arenas(b).max()) for b in sw.strategies.baselines(g, d))
    return [top * 0.97, lean + 0.5 * (top - lean), lean * 1.02]


@pytest.mark.slow
@pytest.mark.parametrize("machine", list(MACHINES))
@pytest.mark.parametrize("graph", list(GRAPHS))
def test_staged_equals_the_exact_memory_search(graph, machine):
    g, d = GRAPHS[graph](), MACHINES[machine]()
    free = sw.search(g, d, objective="eq1", memory=False)
    compared = constrained = 0
    for budget in budgets(g, d):
        try:
            plain = searched(g, d, budget, staged=False)
        except sm.PlanDoesNotFitError:
            with pytest.raises(sm.PlanDoesNotFitError):
                searched(g, d, budget, staged=True)
            continue
        staged = searched(g, d, budget, staged=True)
        assert "scale" in staged.search_stats
        assert (sm.arenas(staged) <= budget).all(), "the staged plan does not fit"
        assert staged.cost >= free.cost * (1 - REL)
        info, pinfo = staged.search_stats["memory"], plain.search_stats["memory"]
        constrained += bool(info.get("constrained"))
        if info["exact"] and pinfo["exact"] and info.get("placements", "every aligned block") == "every aligned block":
            assert staged.cost == pytest.approx(plain.cost, rel=REL), (budget, info, pinfo)
            compared += 1
        if info["exact"]:
            assert staged.cost <= plain.cost * (1 + REL)   # plain is a plan that fits, in the same space
        if pinfo["exact"] and info.get("placements") == "every aligned block":
            assert staged.cost >= plain.cost * (1 - REL)   # and plain is the optimum of that space
    assert constrained >= 1 and (compared >= 1 or graph not in PROVEN)


def test_the_eq1_optimum_that_does_not_fit_is_not_returned():
    """A budget just below the Eq. 1 optimum's arena: the staged search searches under memory
    (it used to raise SearchError) and says which placements it searched."""
    g, d = chain(), MACHINES["2x4"]()
    free = sw.search(g, d, objective="eq1", memory=False)
    budget = 0.97 * float(sm.arenas(free).max())
    plan = searched(g, d, budget, staged=True)
    info = plan.search_stats["memory"]
    assert info["constrained"] and info["placements"] in ("first devices", "every aligned block")
    assert (sm.arenas(plan) <= budget).all()
    assert plan.cost > free.cost * (1 + 1e-6)


def test_staged_no_fit_names_the_shortfall_in_users_terms():
    g, d = load_model("vgg_small", None).graph, MACHINES["2x4"]()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(search_module, "SCALE_ABOVE", -1)
        with pytest.raises(sm.PlanDoesNotFitError) as err:
            sw.search(g, d, memory=2e5)
    e = err.value
    text = str(e)
    assert isinstance(e, ValueError)
    assert 0 <= e.device < len(d) and e.needed > e.available == 2e5
    assert f"device {e.device}" in text and "which has 200.00 KB" in text
    for advice in ("sw.swap_plan", "more devices", "smaller minibatch"):
        assert advice in text
    for internal in ("worker_counts_", "max_evaluations", "MAX_SOLVES", "SCALE_"):
        assert internal not in text


def test_staged_equals_the_exact_memory_search_on_a_chain():
    """One budget (half way between the leanest baseline's arena and the Eq. 1 optimum's) at
    which both searches prove their plan optimal: the same cost."""
    g, d = chain(), MACHINES["2x4"]()
    budget = budgets(g, d)[1]
    plain, staged = searched(g, d, budget, staged=False), searched(g, d, budget, staged=True)
    info = staged.search_stats["memory"]
    assert plain.search_stats["memory"]["exact"] and info["exact"] and info["constrained"]
    assert info["placements"] == "every aligned block"
    assert staged.cost == pytest.approx(plain.cost, rel=REL)
    assert (sm.arenas(staged) <= budget).all()


def _priced_case(seed: int):
    """Random tables, every strategy with its footprint and Eq. 1, a budget that 40% of them meet
    per device, and which strategies fit it."""
    import itertools

    from test_search_memory import _random_tables

    rng = np.random.default_rng(seed)
    t = _random_tables(rng, int(rng.integers(3, 6)), int(rng.integers(1, 4)))
    strategies = list(itertools.product(*[range(len(c)) for c in t.time]))
    peaks = np.array([t.footprint(x) for x in strategies])
    costs = np.array([t.eq1(x) for x in strategies])
    limit = np.quantile(peaks, 0.4, axis=0)
    return t, strategies, costs, limit, (peaks <= limit).all(axis=1)


@pytest.mark.parametrize("seed", range(10))
def test_priced_pruning_keeps_every_configuration_of_a_plan_that_fits(seed):
    """Brute force over random tables: every configuration used by some strategy within the
    budget and at most the threshold survives the Lagrangian pruning (that it drops some,
    so that this could fail, is test_priced_pruning_drops_something)."""
    from shardwise.planning.search_scale_memory import _priced_survivors

    t, strategies, costs, limit, fits = _priced_case(seed)
    if not fits.any():
        return
    threshold = float(np.quantile(costs[fits], 0.5))
    keep = _priced_survivors(t, limit, threshold, 1e-9, 1e9)
    used = [set() for _ in t.time]
    for x, ok, c in zip(strategies, fits, costs):
        if ok and c <= threshold:
            for v, k in enumerate(x):
                used[v].add(k)
    for v in range(t.n):
        assert used[v] <= set(keep[v].tolist()), f"op {v}: dropped {used[v] - set(keep[v].tolist())}"


def test_priced_pruning_drops_something():
    from shardwise.planning.search_scale_memory import _priced_survivors

    dropped = 0
    for seed in range(10):
        t, _, costs, limit, fits = _priced_case(seed)
        if fits.any():
            keep = _priced_survivors(t, limit, float(np.quantile(costs[fits], 0.5)), 1e-9, 1e9)
            dropped += sum(len(c) for c in t.time) - sum(len(k) for k in keep)
    assert dropped > 0


def first_devices_optimum(g, d, budget):
    """The memory-constrained search (search_memory.fitting) over every partition on the first
    devices, built directly: (its Eq. 1, exact?)."""
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts
    from shardwise.planning.search import _plan_of

    problem = make_problem(g, d, CostOptions())
    problem.enumerate(np.asarray(worker_counts(len(d)), np.int32), first_block_only=True)
    problem.build_tables()
    tables = sm.Tables(problem, g)
    limit = np.full(len(d), float(budget))
    found = sm.fitting(tables, limit, lambda x: _plan_of(problem, g, d, CostOptions(), None, x, {}), 1e9,
                       max_solves=3000)
    return found[0].cost, found[1]["exact"]


@pytest.mark.parametrize("graph", ["chain", "towers"])
def test_first_devices_result_is_the_optimum_there(graph, monkeypatch):
    """When the partitions left are too many to search on every block (FULL_SPACE_LIMIT forced
    to 0), the plan is the optimum with every partition on the first devices: equal to the
    memory-constrained search over that space built directly; search_stats says which space,
    and a SearchWarning that other placements were not searched."""
    monkeypatch.setattr(importlib.import_module("shardwise.planning.scale_space"), "FULL_SPACE_LIMIT", 0)
    g, d = GRAPHS[graph](), MACHINES["2x4"]()
    budget = budgets(g, d)[1]
    with pytest.warns(sw.SearchWarning, match="first devices"):
        plan = searched(g, d, budget, staged=True)
    info = plan.search_stats["memory"]
    assert info["placements"] == "first devices" and info["exact"] and not plan.search_stats["exact"]
    assert (sm.arenas(plan) <= budget).all()
    assert all(min(c.devices) == 0 for _, c in plan)
    want, exact = first_devices_optimum(g, d, budget)
    assert exact
    assert plan.cost == pytest.approx(want, rel=REL)


def test_a_time_limit_returns_a_plan_that_fits_and_says_so():
    """sw.search(time_limit=) on a staged search whose Eq. 1 optimum does not fit: even when the
    limit ran out before the memory stage, the search goes on until it holds a plan that fits,
    returns it (its memory plan fits the budget) and warns that the time limit stopped it."""
    g, d = chain(), MACHINES["2x4"]()
    free = sw.search(g, d, objective="eq1", memory=False)
    budget = 0.97 * float(sm.arenas(free).max())
    with pytest.MonkeyPatch.context() as m:
        m.setattr(search_module, "SCALE_ABOVE", -1)
        with pytest.warns(sw.SearchWarning, match="time limit"):
            plan = sw.search(g, d, objective="eq1", memory=budget, time_limit=1e-6)
    assert "scale" in plan.search_stats
    assert (sm.arenas(plan) <= budget).all()
    assert plan.search_stats["memory"]["constrained"]
    assert plan.cost >= free.cost * (1 - REL)


def test_the_solve_budget_scales_with_the_configurations(monkeypatch):
    """A constrained search of the staged path runs its full count of elimination searches over
    few configurations and fewer, down to MIN_SOLVES, where SOLVE_WORK runs out (a count, so the
    plan does not depend on the machine's speed); held to the least count, the search still
    returns a plan whose memory plan fits, within that many searches a round."""
    ssm = importlib.import_module("shardwise.planning.search_scale_memory")
    assert ssm.solves_for(10, 120) == 120
    assert ssm.solves_for(ssm.SOLVE_WORK // 30, 120) == 30
    assert ssm.solves_for(10**12, 120) == ssm.MIN_SOLVES
    assert ssm.solves_for(10**12, 10) == 10   # never more than asked
    assert ssm.MIN_SOLVES > sm.ROOT_STEPS   # the root's Lagrangian bound fits in it
    g, d = chain(), MACHINES["2x4"]()
    free = sw.search(g, d, objective="eq1", memory=False)
    budget = 0.97 * float(sm.arenas(free).max())
    monkeypatch.setattr(ssm, "SOLVE_WORK", 1)
    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sw.SearchWarning)
        plan = sw.search(g, d, objective="eq1", memory=budget)
    info = plan.search_stats["memory"]
    assert info["constrained"] and info["solves"] <= ssm.MIN_SOLVES
    assert (sm.arenas(plan) <= budget).all()
    assert plan.cost >= free.cost * (1 - REL)


def test_step3_beyond_the_work_limit_returns_step1s_cheapest_plan(monkeypatch):
    """Where even the floor of elimination searches over every partition left exceeds
    SOLVE_WORK, the constrained search over them is skipped: the plan is the cheapest that step
    1 found (its memory plan fits, its Eq. 1 is the threshold step 1 reports), not proven, with
    the relaxation's bound as its lower bound, and the warning says which search it comes from."""
    ssm = importlib.import_module("shardwise.planning.search_scale_memory")
    g, d = chain(), MACHINES["2x4"]()
    free = sw.search(g, d, objective="eq1", memory=False)
    budget = 0.97 * float(sm.arenas(free).max())
    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    exact = sw.search(g, d, objective="eq1", memory=budget)   # step 3 within the work limit
    assert "restricted" not in exact.search_stats["memory"]
    searched = []
    fitting = ssm.MemoryStage._fitting

    def counted(self, tables, configs, *args, **kwargs):
        searched.append(ssm._count(configs))
        return fitting(self, tables, configs, *args, **kwargs)

    monkeypatch.setattr(ssm.MemoryStage, "_fitting", counted)
    left = exact.search_stats["memory"]["survivors"]   # the partitions step 3 searched
    monkeypatch.setattr(ssm, "SOLVE_WORK", ssm.MIN_SOLVES * left - 1)   # one too many now
    monkeypatch.setattr(ssm, "full_space", lambda *args: None)   # no step 4: as on large machines
    with pytest.warns(sw.SearchWarning, match="beyond the search's work limit"):
        plan = sw.search(g, d, objective="eq1", memory=budget)
    info = plan.search_stats["memory"]
    assert info["restricted"] == info["first_fitting"] and not info["exact"]
    assert plan.cost == pytest.approx(info["first_fitting_cost"], rel=REL)
    assert (sm.arenas(plan) <= budget).all()
    assert info["lower_bound"] == plan.search_stats["scale"]["relaxation_bound"] <= plan.cost
    assert plan.cost >= exact.cost * (1 - REL)
    assert len(searched) == 2   # step 1's two restricted searches, no step 3


def test_step3_runs_beyond_the_work_limit_when_step1_found_nothing(monkeypatch):
    """Step 1 finding no plan that fits, step 3 runs its floor of searches all the same (it is
    the only way left to a plan), however many partitions are left."""
    ssm = importlib.import_module("shardwise.planning.search_scale_memory")
    g, d = chain(), MACHINES["2x4"]()
    free = sw.search(g, d, objective="eq1", memory=False)
    budget = 0.97 * float(sm.arenas(free).max())
    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    monkeypatch.setattr(ssm, "SOLVE_WORK", 1)
    monkeypatch.setattr(ssm, "baselines", lambda *args: [])
    fitting, calls = ssm.MemoryStage._fitting, []

    def none_in_step1(self, tables, configs, starts, *args, **kwargs):
        calls.append(ssm._count(configs))
        return None if len(calls) <= 2 else fitting(self, tables, configs, starts, *args, **kwargs)

    monkeypatch.setattr(ssm.MemoryStage, "_fitting", none_in_step1)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", sw.SearchWarning)
        plan = sw.search(g, d, objective="eq1", memory=budget)
    info = plan.search_stats["memory"]
    assert len(calls) >= 3 and "restricted" not in info and info["first_fitting"] is None
    assert info["solves"] > 0 and (sm.arenas(plan) <= budget).all()


def _llama13b_on_a_node():
    graph = sw.models.llama(layers=40, d_model=5120, heads=40, kv_heads=40, ffn=13824, seq=2048, batch=8)
    devices = sw.DeviceGraph.cluster(nodes=1, devices_per_node=8, device="H100")
    return graph, devices, sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)


def test_no_fit_names_a_nearer_miss_than_least_memory_in_all(monkeypatch):
    """Llama-2-13B's widths on one node of 8 H100s fit no plan.  The plan of least memory in all
    (one pricing round) piles most of the model on the first device; re-pricing the fullest
    devices finds a miss by far less, which the error names (its device, bytes needed and had)."""
    graph, devices, options = _llama13b_on_a_node()
    needed = {}
    for rounds in (1, sm.SHORTFALL_ROUNDS):
        monkeypatch.setattr(sm, "SHORTFALL_ROUNDS", rounds)
        with pytest.raises(sm.PlanDoesNotFitError) as err:
            sw.search(graph, devices, options=options, objective="eq1", progress=False)
        e = err.value
        assert e.proven and e.available == 80e9 and e.needed > e.available
        assert f"needs {e.needed / 1e9:.2f} GB on device {e.device}" in str(e)
        assert "recompute=True" in str(e)   # advised: the search was not asked to recompute
        needed[rounds] = e.needed
    assert needed[sm.SHORTFALL_ROUNDS] < 0.8 * needed[1]


def test_an_unproven_constrained_search_still_names_its_nearest_miss(monkeypatch):
    """When the staged constrained search runs its count of eliminations without a plan that fits
    or a proof that none does, the error says so (proven False, the count in words) and names
    the nearest miss like a proven one."""
    from shardwise.planning import search_scale_memory as ssm

    real = ssm.MemoryStage._fitting
    calls = []

    def fitting(self, tables, configs, starts, max_solves=None, deadline=None):
        calls.append(max_solves)
        if len(calls) == 3:   # step 3, after the two restricted searches of step 1
            raise sm.UnprovenError("found no plan that fits within 7 (could not prove)", 7)
        return real(self, tables, configs, starts, max_solves=max_solves, deadline=deadline)

    monkeypatch.setattr(ssm.MemoryStage, "_fitting", fitting)
    g, d = load_model("vgg_small", None).graph, MACHINES["2x4"]()
    monkeypatch.setattr(search_module, "SCALE_ABOVE", -1)
    with pytest.raises(sm.PlanDoesNotFitError) as err:
        sw.search(g, d, memory=2e5, objective="eq1", progress=False)
    e = err.value
    assert len(calls) == 3 and not e.proven
    assert "within 7 elimination searches (and could not prove that none does)" in str(e)
    assert 0 <= e.device < len(d) and e.needed > e.available == 2e5
    assert "which has 200.00 KB" in str(e)


def test_a_footprint_over_the_budget_settles_fits_without_a_memory_plan(monkeypatch):
    """MemoryStage.fits with a problem to cost the plan on answers as the memory plan does, and
    for a plan whose footprint (a lower bound of its arena) exceeds the budget somewhere makes
    no memory plan at all."""
    from shardwise.planning.problem import CostOptions, make_problem, worker_counts
    from shardwise.planning.scale_space import Configs
    from shardwise.planning.search_scale_memory import MemoryStage, _canonical_choice

    g, d = chain(), MACHINES["2x4"]()
    options = CostOptions()
    free = sw.search(g, d, objective="eq1", memory=False)
    relax = make_problem(g, d, options)
    relax.enumerate(np.asarray(worker_counts(len(d)), np.int32), first_block_only=True)
    canonical = Configs.of(relax, len(g.ops))
    work = make_problem(g, d, options)
    stage = MemoryStage(g, d, options, None, np.full(len(d), np.inf), 1e9)
    one = canonical.subset([np.array([c]) for c in _canonical_choice(canonical, g, free)])
    # just below the Eq. 1 optimum's footprint on its fullest device: it does not fit, leaner plans may
    budget = np.full(len(d), 0.99 * float(stage._tables(work, one).footprint([0] * len(g.ops)).max()))
    stage = MemoryStage(g, d, options, None, budget, 1e9)
    planned = []
    real = sm.fits
    monkeypatch.setattr(sm, "fits", lambda plan, limit, *a: planned.append(plan) or real(plan, limit, *a))
    over = fit = 0
    for plan in [free] + sw.strategies.baselines(g, d, options):
        choice = _canonical_choice(canonical, g, plan)
        if choice is None:
            continue
        one = canonical.subset([np.array([c]) for c in choice])
        footprint_over = bool((stage._tables(work, one).footprint([0] * len(g.ops)) > budget).any())
        planned.clear()
        got = stage.fits(one, work)
        assert got == stage.fits(one) == real(plan, budget)
        assert len(planned) == (1 if footprint_over else 2)   # the two calls without work: one memory check
        over += footprint_over
        fit += got
    assert over >= 1 and fit >= 1
