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
