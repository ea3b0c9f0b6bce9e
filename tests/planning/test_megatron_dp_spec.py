"""Megatron tensor parallelism inside a node with data parallelism across nodes.

``sw.models.megatron_dp_spec`` (GPT) and ``sw.models.llama_megatron_dp_spec`` (Llama) as plans:
2 tensor-parallel x 2 data-parallel workers on cpu(4) train the tiny models like one worker
(losses and weights), and on a cluster of 8-GPU nodes every tensor-parallel group (the workers of
one op that share a sample block) sits on one node while the data-parallel groups are on
different nodes.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw

from training_checks import RTOL, assert_close_weights

OPTIONS = sw.CostOptions(reduction_splits=True)
SPECS = {"gpt": (sw.models.gpt_tiny, sw.models.megatron_dp_spec),
         "llama": (sw.models.llama_tiny, sw.models.llama_megatron_dp_spec)}


def tokens(seed: int, batch: int = 4, seq: int = 8, vocab: int = 64) -> tuple[np.ndarray, np.ndarray]:
    data = np.random.default_rng(seed).integers(0, vocab, (batch, seq + 1))
    return data[:, :-1], data[:, 1:]    # next-token prediction


@pytest.mark.parametrize("model", sorted(SPECS))
def test_two_by_two_plan_trains_like_one_worker(model):
    build, spec_of = SPECS[model]
    g = build(batch=4)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), spec_of(g, 2, 2), options=OPTIONS)
    # it is both: some op split by columns and samples, a projection summed over 2 row parts
    assert any(c.workers == 4 and c["n"] == 2 for _, c in plan)
    assert any(c.reduction_degree == 2 and c["n"] == 2 for _, c in plan)
    one = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=sw.SGD(lr=0.5))
    many = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.5))
    ids, labels = tokens(3)
    got = [many.step(ids, labels) for _ in range(3)]
    want = [one.step(ids, labels) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert got[2] < got[0]   # it learns
    assert_close_weights(many.get_weights(), one.get_weights())


@pytest.mark.parametrize("model", sorted(SPECS))
def test_tensor_parallel_groups_sit_inside_nodes(model):
    build, spec_of = SPECS[model]
    tp, dp = 8, 4
    g = build(batch=32, heads=8, kv_heads=8) if model == "llama" else build(batch=32, heads=8)
    cluster = sw.DeviceGraph.cluster(dp, tp, device="H100")
    plan = sw.Plan.from_dict(g, cluster, spec_of(g, tp, dp), options=OPTIONS)
    node_of = {dev.index: dev.node for dev in cluster.devices}
    tensor_parallel = 0
    for name, config in plan:
        if g[name].kind == "parameter":
            continue                                           # wpe (T, D), split by positions
        assert config.workers == tp * dp, name                # every op uses the whole machine
        per_block = config.workers // config["n"]             # workers of one sample block
        blocks = [config.devices[b * per_block:(b + 1) * per_block] for b in range(config["n"])]
        if per_block == 1:
            continue                                           # split by samples only
        tensor_parallel += 1
        assert per_block == tp, name
        nodes = [{node_of[d] for d in block} for block in blocks]
        assert all(len(n) == 1 for n in nodes), (name, nodes)             # a group inside one node
        assert len({next(iter(n)) for n in nodes}) == dp, (name, nodes)    # groups on distinct nodes
    assert tensor_parallel > 10


def test_megatron_spec_is_the_single_group_case():
    g = sw.models.gpt_tiny()
    assert sw.models.megatron_spec(g, 2) == sw.models.megatron_dp_spec(g, 2, 1)
    with pytest.raises((ValueError, TypeError)):
        sw.models.megatron_dp_spec(g, 2, 0)
    with pytest.raises((ValueError, TypeError)):
        sw.models.llama_megatron_dp_spec(sw.models.llama_tiny(), 0, 2)


def test_sequence_parallel_llama_trains_like_one_worker():
    """A batch of 2 on 2 x 2 workers: not a multiple of dp * tp, so the Llama layout splits its
    RMS norms, residual adds and token ids by samples and positions (Megatron's sequence
    parallelism); it trains like one worker, and asked for on a batch that needs none, it is
    the same split."""
    g = sw.models.llama_tiny(batch=2)
    spec = sw.models.llama_megatron_dp_spec(g, 2, 2)
    assert spec["model.layers.0.input_layernorm"] == {"n": 2, "c": 2} == spec["input_ids"]
    assert sw.models.llama_megatron_dp_spec(g, 2, 1, sequence_parallel=True)["model.norm"] == {"c": 2}
    assert sw.models.llama_megatron_dp_spec(sw.models.llama_tiny(batch=4), 2, 2)["model.norm"] == {"n": 4}
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(4), spec, options=OPTIONS)
    one = sw.Trainer(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {}), optimizer=sw.SGD(lr=0.5))
    many = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.5))
    ids, labels = tokens(5, batch=2)
    got = [many.step(ids, labels) for _ in range(3)]
    want = [one.step(ids, labels) for _ in range(3)]
    np.testing.assert_allclose(got, want, rtol=RTOL)
    assert got[2] < got[0]
    assert_close_weights(many.get_weights(), one.get_weights())
