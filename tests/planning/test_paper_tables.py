"""Qualitative facts of benchmarks/paper_tables.py that hold in our model and mirror the papers.

Only conclusions that our cost model reproduces are asserted here; the ones it does not
(VGG-16's conv5 on 4 workers in seed 000 Table 3, height/width parallelism in seed 003 Table 5,
the searched plan beating OWT under the simulator) are reported in docs/paper-reproductions.md.
Eq. 1 only: every check runs in a few seconds.
"""
from __future__ import annotations

import importlib.util
import os

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(HERE, os.pardir, os.pardir, "benchmarks", "paper_tables.py")


@pytest.fixture(scope="module")
def pt():
    spec = importlib.util.spec_from_file_location("paper_tables", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def t2(pt):
    return pt.table2()


@pytest.fixture(scope="module")
def t3(pt):
    return pt.table3()


# ----- seed 000 Table 2: AlexNet fc6 on 16 K80s ------------------------------------------------

def test_table2_two_channel_workers_is_cheapest(t2, pt):
    # The paper's lowest total (27.0 ms) is {n=1, c=2}, the configuration the text says DeePa uses.
    totals = {k: r["total"] for k, r in t2.items()}
    assert min(totals, key=totals.get) == "c=2"
    assert min(pt.TABLE2_PAPER, key=lambda k: pt.TABLE2_PAPER[k][3]) == "c=2"
    # few channel workers beat OWT, which beats image parallelism
    assert totals["c=2"] < totals["c=16"] and totals["c=4"] < totals["c=16"] < totals["n=16"]
    # "DeePa reduces the total cost by 5x compared to other approaches" (vs OWT in the paper: 135.7 / 27.0);
    # ours is smaller but still well above 2x
    assert totals["c=16"] / totals["c=2"] > 2.0


def test_table2_terms_have_the_papers_structure(t2, pt):
    # Image parallelism moves no input and channel parallelism synchronizes nothing.
    assert t2["n=16"]["t_x"] == 0.0
    for k in ("c=16", "c=4", "c=2", "c=1"):
        assert t2[k]["t_s"] == 0.0
    # The input gathers scale 16 : 4 : 2 : 1 with the worker count, exactly as the paper's
    # 134.4 : 33.6 : 16.8 : 8.4.
    base = t2["c=1"]["t_x"]
    for k, factor in (("c=16", 16), ("c=4", 4), ("c=2", 2)):
        assert t2[k]["t_x"] == pytest.approx(factor * base, rel=1e-9)
        assert pt.TABLE2_PAPER[k][0] == pytest.approx(factor * pt.TABLE2_PAPER["c=1"][0], rel=1e-9)
    # Image parallelism's update over OWT's input transfer: 8.0 in the paper (1075 / 134.4),
    # the ratio of fc6's 37.7 M weights to its 512 x 9216 input; the same in our model.
    ours = t2["n=16"]["t_s"] / t2["c=16"]["t_x"]
    paper = pt.TABLE2_PAPER["n=16"][2] / pt.TABLE2_PAPER["c=16"][0]
    assert ours == pytest.approx(paper, rel=0.01)
    # Compute halves as channel workers double (paper: 20.4, 10.2, 5.1).
    assert t2["c=1"]["t_c"] == pytest.approx(2 * t2["c=2"]["t_c"], rel=1e-6)
    assert t2["c=2"]["t_c"] == pytest.approx(2 * t2["c=4"]["t_c"], rel=1e-6)


def test_search_puts_alexnet_fc6_on_two_workers(pt):
    # seed 000 section 7.1.2: "The configuration chosen by DeePa only uses 2 GPU workers for ...
    # the first fully-connected layer"
    assert pt.searched_configs("alexnet", ("fc6",)) == ["fc6 c=2 on 0-1"]


# ----- seed 000 Table 3: VGG-16 conv5 on 16 K80s ------------------------------------------------

def test_table3_terms_have_the_papers_structure(t3, pt):
    # No transfer when conv5 stays on pool4's configuration; one reshuffle of pool4's output
    # otherwise, the same for every sample split (paper: 39.2 ms for all four).
    assert t3["n=16"]["t_x"] == 0.0
    xs = [t3[k]["t_x"] for k in ("n=8", "n=4", "n=2")]
    assert max(xs) == pytest.approx(min(xs), rel=1e-9) and xs[0] > 0
    # Compute doubles as the workers halve (paper: 15.9, 31.8, 63.7, 127.4).
    for a, b in (("n=16", "n=8"), ("n=8", "n=4"), ("n=4", "n=2")):
        assert t3[b]["t_c"] == pytest.approx(2 * t3[a]["t_c"], rel=1e-6)
    # Fewer replicas, less synchronization; h=2 w=2 keeps 4 replicas like n=4 (paper: 33.6 both).
    ups = [t3[k]["t_s"] for k in ("n=16", "n=8", "n=4", "n=2")]
    assert ups == sorted(ups, reverse=True)
    assert t3["h=2 w=2"]["t_s"] == pytest.approx(t3["n=4"]["t_s"], rel=1e-9)


# ----- seed 003 Table 5: VGG-16 on 4 P100s ------------------------------------------------------

@pytest.fixture(scope="module")
def t5(pt):
    return pt.table5()


def test_table5_shared_features(t5):
    plan = t5["plans"]["searched"]
    # conv stages 1-4 (and their pools): data parallel on all four GPUs, as the paper's {n=4}
    for op in plan.graph.op_names():
        if op.startswith(("conv1", "conv2", "conv3", "conv4", "pool1", "pool2", "pool3", "pool4")):
            assert plan[op].split_dims() == "n=4" and plan[op].workers == 4, op
    # fully-connected layers: channel parallelism, fc6 on 4 workers, fc8 on 2, degrees non-increasing
    assert plan["fc6"].split_dims() == "c=4"
    assert plan["fc8"].split_dims() == "c=2"
    workers = [plan[op].workers for op in ("fc6", "fc7", "fc8")]
    assert workers == sorted(workers, reverse=True)
    for op in ("fc6", "fc7", "fc8"):
        assert plan[op]["n"] == 1 and plan[op]["c"] == plan[op].workers


def test_table5_paper_strategy_is_near_optimal_here(t5):
    plans = t5["plans"]
    searched, paper = plans["searched"], plans["paper Table 5"]
    assert searched.cost <= paper.cost * (1 + 1e-9)          # the search is exact under Eq. 1
    assert paper.cost < 1.10 * searched.cost                  # and the paper's strategy is close to it
    assert paper.cost < plans["data"].cost and paper.cost < plans["model"].cost


# ----- seed 003 Figures 7 and 8 on 16 P100s (Eq. 1) ----------------------------------------------

@pytest.fixture(scope="module")
def moved(pt):
    return pt.bytes_moved(16)


def test_searched_moves_less_than_owt_and_data(moved, pt):
    for model, b in moved.items():
        assert b["searched"] < b["owt"] < b["data"], model
        assert b["searched"] < b["model"], model
    # "reduces communication costs by 1.3-23.0x compared to data and model parallelism": ours spans
    # a similar range against the better of the two (1.3x for Inception-v3, 18x for AlexNet)
    ratios = [min(b["data"], b["model"]) / b["searched"] for b in moved.values()]
    lo, hi = pt.FIG8_PAPER["vs_data_and_model"]
    assert 0.9 * lo < min(ratios) and max(ratios) < hi
    assert max(ratios) > 10


def test_eq1_throughput_searched_never_below_the_baselines(pt):
    tp = pt.throughput(simulate=False, models=("alexnet", "vgg16"), counts=(1, 4, 16))
    for model, rows in tp.items():
        for n, row in rows.items():
            best_other = max(row[s]["eq1"] for s in ("data", "model", "owt"))
            assert row["searched"]["eq1"] >= best_other * (1 - 1e-9), (model, n)
        g = pt.gains(rows, "eq1")
        # layer-wise scales better from 1 to 16 GPUs than every other strategy (seed 003 section 6.1)
        assert g["scaling"]["searched"] >= g["best_other_scaling"], model
    # AlexNet gains most (paper: up to 2.2x at 16 GPUs)
    assert pt.gains(tp["alexnet"], "eq1")["at_last"] > 1.5
