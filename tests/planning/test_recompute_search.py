"""Recomputation in the memory-constrained search: GPT-2 small at batch 64 x 1,024 tokens on one
node of 8 V100s (16 GB each) fits no plan keeping every feature map, and fits with the search's
greedy recomputation (attention's (N, H, T, T) maps first)."""
from __future__ import annotations

import pytest

import shardwise as sw
from shardwise.errors import SearchError
from shardwise.iteration.memory import memory_plan

OPTIONS = sw.CostOptions(reduction_splits=True)


@pytest.mark.slow
def test_gpt2_small_fits_eight_v100s_with_recomputation():
    g = sw.models.gpt(batch=64)   # GPT-2 small, 1,024 tokens
    d = sw.DeviceGraph.cluster(1, 8, device="V100")
    with pytest.raises((sw.PlanDoesNotFitError, SearchError)):
        sw.search(g, d, options=OPTIONS, progress=False)
    p = sw.search(g, d, options=OPTIONS, progress=False, recompute=True)
    r = p.search_stats["memory"]["recompute"]
    assert "greedy" in r["method"] and r["added_seconds"] > 0
    assert any(name.endswith(".attn.probs") for name in r["ops"])
    mp = memory_plan(sw.lower(p, recompute=r["ops"]))
    for dev in range(8):
        assert mp.devices[dev].arena_bytes <= d.devices[dev].memory
        assert mp.devices[dev].arena_bytes == r["peak_bytes"][dev]
    assert memory_plan(p).peak_bytes > d.devices[0].memory   # keeping everything it does not fit


def test_the_models_own_layout_is_tried_with_recomputation(monkeypatch):
    """sw.search(recompute=True) tries the layouts the graph's builder registered (Megatron-LM's
    for sw.models.llama) after the Eq. 1 optimum and the cheapest baselines: here only that
    layout fits with recomputation (the greedy stubbed to say so), and the search returns it,
    naming it in search_stats."""
    from shardwise.iteration import recompute_plan as module
    from shardwise.planning.strategies import layout_baselines

    g = sw.models.llama_tiny(batch=8, heads=4, kv_heads=4)
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=2, device="H100")
    (layout,) = layout_baselines(g, d, OPTIONS)
    assert layout.name == "megatron 2 x data 2"
    tried = []

    def greedy(plan, budget, costs=None, **kwargs):
        tried.append(plan.name)
        fits = plan.name == layout.name
        arenas = {dev: 1 if fits else 2 ** 40 for dev in budget}
        return module.RecomputePlan(plan=plan, budget=budget, ops=(), fits=fits, peak_bytes=arenas,
                                    unrecomputed_peak=arenas, iteration_time=1.0, recomputed_iteration_time=1.0,
                                    method="stub", evaluations=1)

    monkeypatch.setattr(module, "recompute_plan", greedy)
    plan = sw.search(g, d, options=OPTIONS, memory=1024, recompute=True, objective="eq1", progress=False)
    assert tried[-1] == layout.name and len(tried) >= 2 and tried[0] != layout.name
    assert plan.search_stats["memory"]["recompute"]["plan"] == layout.name
    assert dict(plan.configs) == dict(layout.configs)
