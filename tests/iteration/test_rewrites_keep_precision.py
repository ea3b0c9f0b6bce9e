"""A rewritten task graph counts bytes at the plan's precision, as the lowering it came from does.

Recomputation, swapping and the split over ranks each build a new graph from the lowering
(csrc/graph/recompute.c, swap.c, ranks.c).  Each must carry over what the graph says about its
own sizes: a plan costed in bf16 counts its feature maps at 2 bytes an element and its weights
at 6 (master copy and compute copy), and its messages at 2 bytes a value.  A rewrite that
dropped that would count float32 sizes: a bf16 plan's memory plan with a few maps recomputed
would come out larger than keeping every map (a Llama under Megatron-style tensor parallelism
grew from 631 to 689 MB that way), and its messages between ranks twice their size."""
from __future__ import annotations

import pytest

import shardwise as sw
from shardwise.iteration.memory import memory_plan


def _plan(precision: str) -> sw.Plan:
    """A 2-layer Llama with tensor-parallel layers over 2 CPU workers (staging regions, partial
    sums and messages between the workers in every layer)."""
    g = sw.models.llama(layers=2, d_model=64, heads=4, kv_heads=2, ffn=128, seq=16, vocab=96, batch=4)
    return sw.Plan.from_dict(g, sw.DeviceGraph.cpu(2), sw.models.megatron_spec(g, 2),
                             options=sw.CostOptions(reduction_splits=True, precision=precision))


def _arenas(tg) -> list[int]:
    mp = memory_plan(tg)
    return [mp.devices[d].arena_bytes for d in sorted(mp.devices)]


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_a_recompute_rewrite_of_nothing_plans_the_same_memory(precision):
    """The loss is never recomputed: naming it alone rewrites the graph with no recompute task,
    whose memory plan must be the lowering's own, buffer by buffer and arena by arena."""
    plan = _plan(precision)
    plain = sw.lower(plan)
    rewritten = sw.lower(plan, recompute={"loss"})
    assert rewritten.counts().get("recompute", 0) == 0
    assert [b.plan_bytes for b in rewritten.buffers] == [b.plan_bytes for b in plain.buffers]
    assert _arenas(rewritten) == _arenas(plain)


def test_recomputed_maps_count_at_the_plans_precision():
    """Every buffer of the recomputed bf16 graph (the original ids keep their meaning; the
    recomputed copies are like the maps they copy) has the bytes the plain lowering gives it, and
    recomputing every map that can be lowers the arenas of the tensor-parallel plan."""
    plan = _plan("bf16")
    plain = sw.lower(plan)
    tg = sw.lower(plan, recompute="all")
    assert tg.counts()["recompute"] > 0
    n = len(plain.buffers)
    assert [b.plan_bytes for b in tg.buffers[:n]] == [b.plan_bytes for b in plain.buffers]
    maps = [b for b in plain.buffers if b.kind == "activation"]
    assert maps and all(2 * b.plan_bytes == b.nbytes for b in maps)   # bf16: half the executor's float32
    for copy in tg.buffers[n:]:
        assert 2 * copy.plan_bytes == copy.nbytes
    assert all(r < k for r, k in zip(_arenas(tg), _arenas(plain)))


def test_swapped_graph_counts_at_the_plans_precision():
    plan = _plan("bf16")
    plain = sw.lower(plan)
    budget = int(0.9 * max(_arenas(plain)))
    sp = sw.swap_plan(plan, budget=budget)
    assert sp.entries, "the budget should make the swap plan offload something"
    tg = sw.lower(plan, swap=sp)
    n = len(plain.buffers)
    assert [b.plan_bytes for b in tg.buffers[:n]] == [b.plan_bytes for b in plain.buffers]


def test_messages_between_ranks_count_at_the_plans_precision():
    """Split over two ranks, every copy between the workers becomes a send and a receive: the
    bytes moved (sends counted, receives not) are the unsplit graph's, in bf16 as in fp32."""
    for precision in ("fp32", "bf16"):
        plan = _plan(precision)
        plain = sw.lower(plan)
        split = sw.lower(plan, ranks=2)
        assert split.counts().get("send", 0) > 0
        assert split.bytes_moved() == pytest.approx(plain.bytes_moved(), rel=1e-12)
        assert plain.bytes_moved() == pytest.approx(plan.bytes_moved, rel=1e-9)
