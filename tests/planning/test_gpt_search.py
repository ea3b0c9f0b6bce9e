"""The search finds tensor parallelism on a GPT by itself (issue 17 point 3).

Where Megatron-LM's layout beats data parallelism (wide layers, few tokens per step: the
parameters to synchronize outweigh the activations to move), the default search must choose its
structure on 4 and 8 devices of one node: the MLP split by columns then by rows (``mlp.fc`` by
output features, ``mlp.proj`` by its reduction, partial sums added), attention split by heads
(q, k, v by columns, the (N, H, T, T) ops by heads, ``attn.proj`` by rows), and simulate no
slower than Megatron's hand-written layout.  Where data parallelism wins (narrow layers, many
tokens), the search must not lose to it either.  benchmarks/gpt_plans.py prints the plans.
"""
from __future__ import annotations

import pytest

import shardwise as sw

OPTIONS = sw.CostOptions(reduction_splits=True)


def wide() -> sw.Graph:
    """d_model 4096 at 2,048 tokens a step: 201M parameters a block against 32 MB of activations."""
    return sw.models.gpt(layers=2, d_model=4096, heads=32, seq=256, vocab=50304, batch=8)


def narrow() -> sw.Graph:
    """d_model 1024 at 8,192 tokens a step: activations outweigh the 12.6M parameters a block."""
    return sw.models.gpt(layers=2, d_model=1024, heads=16, seq=1024, vocab=50304, batch=8)


def simulated(plan: sw.Plan) -> float:
    return sw.simulate(plan, check_memory=False).iteration_time


def split(config, dim: str) -> int:
    return config.as_dict().get(dim, 1)


@pytest.fixture(scope="module", params=[4, 8])
def wide_case(request):
    k = request.param
    g, d = wide(), sw.DeviceGraph.cluster(1, k, device="V100")
    megatron = sw.Plan.from_dict(g, d, sw.models.megatron_spec(g, k), options=OPTIONS)
    data = sw.strategies.data_parallel(g, d, OPTIONS)
    return g, d, megatron, data, sw.search(g, d, options=OPTIONS)


def test_megatron_beats_data_parallelism_on_the_wide_gpt(wide_case):
    """The premise of the next tests: here tensor parallelism is the better layout."""
    _, _, megatron, data, _ = wide_case
    assert simulated(megatron) < simulated(data)


def test_the_search_splits_the_mlp_by_columns_then_rows(wide_case):
    g, _, _, _, plan = wide_case
    for layer in ("h.0", "h.1"):
        fc, gelu, proj = (plan.configs[f"{layer}.mlp.{p}"] for p in ("fc", "gelu", "proj"))
        assert split(fc, "l") > 1 and split(fc, "n") == 1, (layer, str(fc))          # columns
        assert split(gelu, "l") == split(fc, "l") and gelu.devices == fc.devices
        assert proj.reduction is not None and proj.reduction[0] == "i", (layer, str(proj))   # rows
        assert proj.reduction[1] == split(fc, "l") and proj.devices == fc.devices   # fc's columns are proj's rows


def test_the_search_splits_attention_by_heads(wide_case):
    g, _, _, _, plan = wide_case
    for layer in ("h.0", "h.1"):
        q = plan.configs[f"{layer}.attn.q"]
        heads = split(q, "l")
        assert heads > 1 and split(q, "n") == 1, (layer, str(q))
        for name in ("k", "v"):
            c = plan.configs[f"{layer}.attn.{name}"]
            assert split(c, "l") == heads and c.devices == q.devices
        for name in ("scores", "probs", ""):   # (N, H, T, T) and (N, H, T, Dh): dimension c is the head
            c = plan.configs[f"{layer}.attn.{name}".rstrip(".")]
            assert split(c, "c") == heads and split(c, "n") == 1 and c.devices == q.devices, (name, str(c))
        proj = plan.configs[f"{layer}.attn.proj"]
        assert proj.reduction == ("i", heads) and proj.devices == q.devices


def test_the_searched_plan_is_no_slower_than_megatron_or_data_parallelism(wide_case):
    _, _, megatron, data, plan = wide_case
    assert simulated(plan) <= min(simulated(megatron), simulated(data)) * (1 + 1e-12)


@pytest.mark.parametrize("k", [4, 8])
def test_on_the_narrow_gpt_data_parallelism_wins_and_the_search_does_not_lose_to_it(k):
    g, d = narrow(), sw.DeviceGraph.cluster(1, k, device="V100")
    megatron = sw.Plan.from_dict(g, d, sw.models.megatron_spec(g, k), options=OPTIONS)
    data = sw.strategies.data_parallel(g, d, OPTIONS)
    assert simulated(data) < simulated(megatron)
    plan = sw.search(g, d, options=OPTIONS)
    assert simulated(plan) <= simulated(data) * (1 + 1e-12)
    fc = plan.configs["h.0.mlp.fc"]
    assert split(fc, "n") > 1 and split(fc, "l") == 1, str(fc)   # by samples, as data parallelism


def test_megatron_spec_checks_its_arguments():
    g = sw.models.gpt_tiny()
    with pytest.raises((ValueError, TypeError)):
        sw.models.megatron_spec(g, 0)
    spec = sw.models.megatron_spec(g, 2)
    assert set(spec) == {op.name for op in g.ops}
    assert spec["h.0.mlp.proj"] == {"i": 2} and spec["wte"] == {"v": 2} and spec["h.0.mlp.fc"] == {"l": 2}
