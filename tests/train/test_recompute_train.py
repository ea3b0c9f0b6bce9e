"""Training with recomputation (Trainer(recompute=...)): feature maps dropped after their forward
use and recomputed before the backward pass reads them give bitwise the weights and losses of
keeping every one, on one worker and on plans split over 2 and 4 workers, for an MLP, a small CNN
with batch norm and dropout (the recompute must redraw the same mask) and a tiny GPT."""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.errors import ConfigError
from shardwise.iteration.memory import memory_plan

STEPS = 3


def mlp(batch=8):
    g = sw.Graph("mlp")
    x = g.input("x", (batch, 24))
    h = g.relu(g.linear(x, 32, name="fc1"), name="relu1")
    h = g.dropout(h, 0.25, name="drop1")
    h = g.relu(g.linear(h, 32, name="fc2"), name="relu2")
    g.softmax(g.linear(h, 10, name="fc3"), name="loss")
    return g


def cnn(batch=8):
    g = sw.Graph("cnn")
    x = g.input("x", (batch, 3, 8, 8))
    h = g.relu(g.batchnorm2d(g.conv2d(x, 8, 3, padding=1, name="conv1"), name="bn1"), name="relu1")
    h = g.dropout(h, 0.3, name="drop1")
    h = g.relu(g.conv2d(h, 8, 3, padding=1, name="conv2"), name="relu2")
    h = g.dropout(g.flatten(h, name="flat"), 0.2, name="drop2")
    g.softmax(g.linear(h, 10, name="fc"), name="loss")
    return g


def relu_chain(batch=256):
    """Three linear + relu layers of 32 features: a batch large enough that feature maps, not
    weights, set the arena."""
    g = sw.Graph("chain")
    h = g.input("x", (batch, 8))
    for i in (1, 2, 3):
        h = g.relu(g.linear(h, 32, name=f"fc{i}"), name=f"relu{i}")
    g.softmax(g.linear(h, 10, name="head"), name="loss")
    return g


def data(g, seed=0):
    rng = np.random.default_rng(seed)
    first = g.ops[0]
    if g.name == "gpt_tiny":
        n, t = first.shape
        tokens = rng.integers(0, 64, (n, t + 1))
        return tokens[:, :-1], tokens[:, 1:]
    return rng.standard_normal(first.shape).astype(np.float32), rng.integers(0, 10, first.shape[0])


def train(g, plan, recompute=None):
    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), recompute=recompute)
    x, y = data(g)
    losses = [t.step(x, y) for _ in range(STEPS)]
    return t, losses, t.get_weights()


def check_bitwise(g, plan):
    _, losses0, w0 = train(g, plan)
    t, losses1, w1 = train(g, plan, recompute="all")
    tg = t.task_graph
    assert tg.recomputed and tg.counts()["recompute"] > 0
    assert losses1 == losses0
    assert set(w1) == set(w0)
    for k in w0:
        assert w1[k].dtype == w0[k].dtype and np.array_equal(w1[k], w0[k]), k
    memory_plan(tg, check=True).validate()   # every recomputed map's bytes proved unshared while live
    return tg


def plans(g, k):
    if k == 1:
        return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(1), {})
    return sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(k))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_mlp_with_dropout_recomputed_trains_bitwise(k):
    g = mlp()
    tg = check_bitwise(g, plans(g, k))
    assert {"fc1", "relu1", "drop1", "fc2", "relu2"} <= set(tg.recomputed)


@pytest.mark.parametrize("k", [1, 2, 4])
def test_cnn_with_batchnorm_and_dropout_recomputed_trains_bitwise(k):
    g = cnn()
    tg = check_bitwise(g, plans(g, k))
    assert "drop1" in tg.recomputed and "conv2" in tg.recomputed
    assert "bn1" not in tg.recomputed   # its running statistics would move twice


def test_cnn_split_by_channels_recomputed_trains_bitwise():
    """Convolutions split over their output channels: staging regions gathered from the other
    worker are read by the recomputes."""
    g = cnn()
    spec = {"conv1": {"c": 2}, "conv2": {"c": 2}}
    check_bitwise(g, sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), spec))


@pytest.mark.parametrize("k", [1, 2, 4])
def test_tiny_gpt_recomputed_trains_bitwise(k):
    g = sw.models.gpt_tiny(batch=4)
    tg = check_bitwise(g, plans(g, k))
    assert "h.0.attn.probs" in tg.recomputed and "h.1.mlp.gelu" in tg.recomputed


def test_tiny_gpt_megatron_plan_recomputed_trains_bitwise():
    g = sw.models.gpt_tiny(batch=4)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), sw.models.megatron_spec(g, 2),
                             options=sw.CostOptions(reduction_splits=True))
    check_bitwise(g, plan)


def test_recompute_refuses_what_it_does_not_combine_with():
    g = mlp()
    plan = plans(g, 1)
    with pytest.raises(ConfigError, match="does not have"):
        sw.Trainer(g, plan, recompute={"nope"})
    with pytest.raises(ConfigError, match="'attention' or a set of op names"):
        sw.lower(plan, recompute="some")
    with pytest.raises(ConfigError, match="steps_in_flight=1"):
        sw.Trainer(g, plan, recompute="all", steps_in_flight=2)
    with pytest.raises(ConfigError, match="one compute stream"):
        sw.lower(plan, recompute="all", schedule="critical_path")


def test_tiny_gpt_attention_recomputed_trains_bitwise_and_keeps_less():
    """recompute="attention": every attention's (N, H, T, T) scores and probabilities are
    recomputed in the backward pass, as memory-efficient attention does, and no longer kept."""
    g = sw.models.gpt_tiny(batch=4)
    plan = plans(g, 2)
    _, losses0, w0 = train(g, plan)
    t, losses1, w1 = train(g, plan, recompute="attention")
    assert t.task_graph.recomputed == ("h.0.attn.scores", "h.0.attn.probs", "h.1.attn.scores", "h.1.attn.probs")
    assert losses1 == losses0 and all(np.array_equal(w1[k], w0[k]) for k in w0)
    n, heads, tokens = 4 // 2, 4, 8                 # a worker's samples; heads and tokens of gpt_tiny
    maps = 2 * 2 * n * heads * tokens * tokens * 4  # scores and probabilities of both layers, float32
    kept = memory_plan(sw.lower(plan)).devices[0].activations_kept
    assert memory_plan(t.task_graph).devices[0].activations_kept == kept - maps


def test_keep_recompute_and_swap_in_one_graph_train_bitwise():
    """Per feature map one of three: the relus recomputed, then a swap plan made on that graph
    offloads some of the maps still kept, under a budget below what recomputation alone reaches;
    the Trainer lowers the swap plan with its recomputation first, stays within the budget, and
    trains bitwise as keeping everything."""
    g = relu_chain()
    plan = plans(g, 1)
    recomputed = sw.lower(plan, recompute={"relu1", "relu2", "relu3"})
    arena = memory_plan(recomputed).devices[0].arena_bytes
    assert arena < memory_plan(sw.lower(plan)).devices[0].arena_bytes
    budget = arena - 256 * 32 * 4   # one hidden map less
    sp = sw.swap_plan(recomputed, budget=budget)
    assert sp.recompute == ("relu1", "relu2", "relu3") and sp.entries
    assert not set(sp.offloaded[0]) & set(sp.recompute)   # a map is recomputed or swapped, not both
    _, losses0, w0 = train(g, plan)
    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), swap=sp)
    x, y = data(g)
    losses1 = [t.step(x, y) for _ in range(STEPS)]
    counts = t.task_graph.counts()
    assert counts["recompute"] == 3 and counts["swap_out"] == len(sp.entries)
    assert losses1 == losses0 and all(np.array_equal(t.get_weights()[k], w0[k]) for k in w0)
    assert t.memory_plan.devices[0].arena_bytes <= budget and max(t.arena_high_water().values()) <= budget
    with pytest.raises(ConfigError, match="swap plan was made on a graph recomputing"):
        sw.lower(plan, swap=sp, recompute={"relu1"})


def test_recompute_plan_with_swap_fits_where_recomputation_alone_does_not():
    """recompute_plan(..., swap=True) under a budget three hidden maps below the full arena:
    recomputation alone does not reach it, a recomputation with a swap plan does; the Trainer
    given the recompute plan trains with both, within the budget, bitwise as keeping everything."""
    g = relu_chain()
    plan = plans(g, 1)
    budget = memory_plan(sw.lower(plan)).devices[0].arena_bytes - 3 * 256 * 32 * 4
    assert not sw.recompute_plan(plan, budget).fits
    rp = sw.recompute_plan(plan, budget, swap=True)
    assert rp.fits and rp.swap is not None and rp.swap.recompute == rp.ops and rp.peak_bytes[0] <= budget
    assert "swapping" in rp.method
    _, losses0, w0 = train(g, plan)
    t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9, weight_decay=1e-4), recompute=rp)
    x, y = data(g)
    assert [t.step(x, y) for _ in range(STEPS)] == losses0
    assert all(np.array_equal(t.get_weights()[k], w0[k]) for k in w0)
    assert t.task_graph.recomputed == rp.ops and t.task_graph.counts()["swap_out"] == len(rp.swap.entries)
    assert max(t.arena_high_water().values()) <= budget


def test_tiny_llama_megatron_plan_attention_recomputed_trains_bitwise():
    """Attention recomputed on a Megatron plan: the regions the probabilities are gathered into
    are copied again in the backward pass (across the workers), with the same bits."""
    g = sw.models.llama(layers=2, d_model=64, heads=4, kv_heads=2, ffn=128, seq=16, vocab=96, batch=4)
    plan = sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), sw.models.megatron_spec(g, 2),
                             options=sw.CostOptions(reduction_splits=True))
    tokens = np.random.default_rng(0).integers(0, 96, (4, 17))

    def run(recompute):
        t = sw.Trainer(g, plan, optimizer=sw.SGD(lr=0.05, momentum=0.9), recompute=recompute)
        return t, [t.step(tokens[:, :-1], tokens[:, 1:]) for _ in range(STEPS)], t.get_weights()

    _, losses0, w0 = run(None)
    t, losses1, w1 = run("attention")
    tg = t.task_graph
    origin = np.asarray(tg.handle.origin)
    assert any(o < 0 and task.kind == "copy" and task.src_device != task.device for task, o in zip(tg.tasks, origin))
    assert losses1 == losses0
    for k in w0:
        assert np.array_equal(w1[k], w0[k]), k
    memory_plan(tg, check=True).validate()
