"""The papers' tables and figures, reproduced on device graphs modelled on their machines.

Every number we compute is printed beside the number the paper published (the
anchors below are copied from the papers and cite their table or figure).
docs/paper-reproductions.md explains where and why the two differ.

 1. DeePa Table 2: configurations of AlexNet's fc6 on 16 K80s in one node, minibatch 512
 2. DeePa Table 3: VGG-16's last three convolutions (conv5_1..conv5_3), same machine
 3. the layer-wise parallelism paper (ICML 2018) Table 5: the VGG-16 strategy on 4 P100s of one node
 4. ICML 2018 Figure 8 / section 6.1: bytes moved per iteration on 16 P100s (4 nodes x 4)
 5. ICML 2018 Figure 7 / section 6.1: throughput at 1-16 P100s, Eq. 1 and simulated
 6. DeePa Figures 7 and 8 / section 7.1: the same comparison on 16 K80s in one node

    python benchmarks/paper_tables.py            # everything (about 15 s on 2 cores)
    python benchmarks/paper_tables.py --quick    # without the simulations (Eq. 1 only)

The functions return plain data so that tests/planning/test_paper_tables.py can check the
qualitative facts the tables show.
"""
from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from typing import Any

import shardwise as sw

MS = 1e3
MB = 1e-6
STRATEGIES = ("data", "model", "owt", "searched")
SHORT = {"data": "data", "model": "model", "owt": "owt", "searched": "srch"}
MODELS = ("alexnet", "vgg16", "inception_v3")
PER_GPU_BATCH = 32          # ICML 2018 section 6: "a per-GPU batch size of 32 for all experiments"
DEVICE_COUNTS = (1, 2, 4, 8, 16)

# ----- anchors: the papers' published numbers ------------------------------------------------

# DeePa Table 2 (ms): transfer, compute, update, total; and the paper's label for the row.
TABLE2_PAPER: dict[str, tuple[float, float, float, float, str]] = {
    "n=16": (0.0, 1.28, 1075.0, 1076.0, "image parallelism"),
    "c=16": (134.4, 1.28, 0.0, 135.7, "OWT"),
    "c=4": (33.6, 5.1, 0.0, 38.7, "DeePa (as marked in the table)"),
    "c=2": (16.8, 10.2, 0.0, 27.0, "(text: DeePa uses 2 workers)"),
    "c=1": (8.4, 20.4, 0.0, 28.8, ""),
}
TABLE2_CONFIGS: dict[str, dict[str, int]] = {"n=16": {"n": 16}, "c=16": {"c": 16}, "c=4": {"c": 4},
                                             "c=2": {"c": 2}, "c=1": {}}

# DeePa Table 3 (ms), the three layers together.
TABLE3_PAPER: dict[str, tuple[float, float, float, float, str]] = {
    "n=16": (0.0, 15.9, 134.4, 150.3, "image parallelism & OWT"),
    "n=8": (39.2, 31.8, 67.2, 138.2, ""),
    "n=4": (39.2, 63.7, 33.6, 136.5, "DeePa (as marked in the table)"),
    "h=2 w=2": (39.2, 54.7, 33.6, 127.5, "(lowest total in the table)"),
    "n=2": (39.2, 127.4, 16.8, 183.4, ""),
}
TABLE3_CONFIGS: dict[str, dict[str, int]] = {"n=16": {"n": 16}, "n=8": {"n": 8}, "n=4": {"n": 4},
                                             "h=2 w=2": {"h": 2, "w": 2}, "n=2": {"n": 2}}
VGG_CONV5 = ("conv5_1", "conv5_2", "conv5_3")

# ICML 2018 Table 5: layer groups of VGG-16 and the configuration the paper lists.  The table
# leaves a cell blank when it repeats the one above (stages 2-4 share stage 1's {n=4}; the
# second fully-connected layer's cell is blank, read here as {n=1, c=4}).
TABLE5_PAPER: list[tuple[str, tuple[str, ...], str]] = [
    ("2 x Conv + Pooling", ("conv1_1", "conv1_2", "pool1"), "n=4"),
    ("2 x Conv + Pooling", ("conv2_1", "conv2_2", "pool2"), "n=4 (blank: same)"),
    ("3 x Conv + Pooling", ("conv3_1", "conv3_2", "conv3_3", "pool3"), "n=4 (blank: same)"),
    ("3 x Conv + Pooling", ("conv4_1", "conv4_2", "conv4_3", "pool4"), "n=4 (blank: same)"),
    ("3 x Conv + Pooling", ("conv5_1", "conv5_2", "conv5_3", "pool5"), "h=2 w=2"),
    ("(flatten: no layer in the paper)", ("flatten",), ""),
    ("Fully-connected", ("fc6",), "c=4"),
    ("Fully-connected", ("fc7",), "c=4 (blank: same)"),
    ("Fully-connected", ("fc8",), "c=2"),
    ("Softmax", ("prob",), "- (n=1, c=1)"),
]

# ICML 2018 section 6.1 (Figures 7 and 8 give bars; the text gives these numbers).
FIG7_PAPER = {
    # "increases the training throughput by up to 2.2x, 1.5x, and 1.4x" over the other strategies
    "gain_up_to": {"alexnet": 2.2, "vgg16": 1.5, "inception_v3": 1.4},
    # "Scaling ... from 1 GPU to 16 GPUs (on 4 nodes), layer-wise parallelism achieves 12.2x, 14.8x,
    #  and 15.5x speedup ..., while the best other strategy achieves 6.1x, 10.2x, and 11.2x"
    "scaling_searched": {"alexnet": 12.2, "vgg16": 14.8, "inception_v3": 15.5},
    "scaling_best_other": {"alexnet": 6.1, "vgg16": 10.2, "inception_v3": 11.2},
}
FIG8_PAPER = {
    "vs_data_and_model": (1.3, 23.0),   # abstract / section 1: "reduces communication costs by 1.3-23.0x"
    "owt_vs_data_and_model": (1.1, 23.0),  # section 6.1
    "vs_owt": (1.2, 2.5),               # section 6.1: "further reducing communication overhead by 1.2-2.5x"
}
# DeePa section 7.1 and 6 (16 K80, minibatch 512).
SEED000_FIG7 = {
    "owt_vs_image": {"alexnet": 1.4, "vgg16": 1.2, "inception_v3": 1.07},
    # "The best configurations found by DeePa achieve 6.5x, 1.9x, and 1.5x speedup compared to
    #  TensorFlow and PyTorch" (DeePa's own image parallelism is "competitive" with them)
    "deepa_vs_tf_pytorch": {"alexnet": 6.5, "vgg16": 1.9, "inception_v3": 1.5},
    "alexnet_deepa_vs_owt_time": 2.3,          # section 6: "per-step training time by 2.3x"
}
SEED000_FIG8 = {
    "owt_vs_image": (1.05, 8.4),     # "the OWT approach reduces data transfers by 1.05-8.4x"
    "deepa_vs_owt": (1.2, 2.7),      # "the best configuration used by DeePa further reduces ... by 1.2-2.7x"
    "alexnet_deepa_vs_owt": 3.0,     # section 6: "reduces the overall data transfers for AlexNet by 3x"
}


# ----- machines ---------------------------------------------------------------------------------

def k80_node(intra_bandwidth: float | None = None) -> sw.DeviceGraph:
    """Seed 000 section 7.1: 16 K80 GPUs (8 cards of 2) in one machine (the preset's link between
    two GPUs, or intra_bandwidth bytes/s)."""
    if intra_bandwidth is None:
        return sw.DeviceGraph.cluster(nodes=1, devices_per_node=16, device="K80")
    return sw.DeviceGraph.cluster(nodes=1, devices_per_node=16, device="K80", intra_bandwidth=intra_bandwidth)


def p100_cluster(ndev: int) -> sw.DeviceGraph:
    """Seed 003 section 6: up to 4 nodes of 4 P100s (NVLink inside, 100 Gb/s EDR InfiniBand between);
    1, 2 and 4 GPUs on one node, 8 on two, 16 on four."""
    per = min(4, ndev)
    return sw.DeviceGraph.cluster(nodes=ndev // per, devices_per_node=per, device="P100")


def _model(name: str, batch: int) -> sw.Graph:
    return getattr(sw.models, name)(batch=batch)


def _all(graph: sw.Graph, devices: sw.DeviceGraph) -> dict[str, sw.Plan]:
    plans = {p.name: p for p in sw.strategies.baselines(graph, devices)}
    plans["searched"] = sw.search(graph, devices, objective="eq1")
    return {s: plans[s] for s in STRATEGIES}


# ----- 1, 2: DeePa Tables 2 and 3 --------------------------------------------------------

def _group_costs(graph: sw.Graph, devices: sw.DeviceGraph, ops: tuple[str, ...], config: dict[str, int],
                 rest: dict[str, int]) -> dict[str, float]:
    """t_x (in-edges of the group, internal edges included), t_c, t_s of ``ops`` under ``config``,
    every other op under ``rest``; also the out-edge's t_x (charged to the next op)."""
    spec = {op: dict(rest) for op in graph.op_names()}
    for op in ops:
        spec[op] = dict(config)
    plan = sw.Plan.from_dict(graph, devices, spec, name="+".join(ops))
    rows = {r.op: r for r in plan.layer_costs()}
    names = graph.op_names()
    nxt = names[names.index(ops[-1]) + 1]
    out = {"t_x": sum(rows[o].t_x for o in ops), "t_c": sum(rows[o].t_c for o in ops),
           "t_s": sum(rows[o].t_s for o in ops), "t_x_out": rows[nxt].t_x,
           "workers": plan[ops[0]].workers, "devices": plan[ops[0]].device_text()}
    out["total"] = out["t_x"] + out["t_c"] + out["t_s"]
    return out


# the link between two K80s at which our transfer and update columns of Table 2 equal the paper's
PAPER_K80_LINK = 4.214e9


def table2(intra_bandwidth: float | None = None) -> dict[str, dict[str, float]]:
    """Seed 000 Table 2: fc6 of AlexNet (minibatch 512) on 16 K80s, every other op {n=16}."""
    g, d = sw.models.alexnet(batch=512), k80_node(intra_bandwidth)
    return {k: _group_costs(g, d, ("fc6",), cfg, {"n": 16}) for k, cfg in TABLE2_CONFIGS.items()}


def table3() -> dict[str, dict[str, float]]:
    """Seed 000 Table 3: conv5_1..conv5_3 of VGG-16 (minibatch 512) on 16 K80s, every other op {n=16}."""
    g, d = sw.models.vgg16(batch=512), k80_node()
    return {k: _group_costs(g, d, VGG_CONV5, cfg, {"n": 16}) for k, cfg in TABLE3_CONFIGS.items()}


def searched_configs(model: str, ops: tuple[str, ...]) -> list[str]:
    """What the search picks for ``ops`` on the 16-K80 machine (whole-network optimum)."""
    plan = sw.search(_model(model, 512), k80_node(), objective="eq1")
    return [f"{op} {plan[op].split_dims()} on {plan[op].device_text()}" for op in ops]


def _print_cost_table(title: str, ours: dict[str, dict[str, float]],
                      paper: dict[str, tuple[float, float, float, float, str]], out_col: bool) -> None:
    print(title)
    head = (f"{'config':<9} {'wk':>3} | {'transfer':>8} {'compute':>8} {'update':>8} {'total':>8}"
            + (f" {'(out)':>7}" if out_col else "")
            + f" | {'transfer':>8} {'compute':>8} {'update':>8} {'total':>8}  paper's label")
    print(f"{'':<13} | {'ours (ms)':<{len(head.split('|')[1]) - 1}}| paper (ms)")
    print(head)
    print("-" * len(head))
    for k, r in ours.items():
        p = paper[k]
        extra = f" {r['t_x_out'] * MS:7.1f}" if out_col else ""
        print(f"{k:<9} {r['workers']:>3} | {r['t_x'] * MS:8.1f} {r['t_c'] * MS:8.1f} {r['t_s'] * MS:8.1f} "
              f"{r['total'] * MS:8.1f}{extra} | {p[0]:8.1f} {p[1]:8.2f} {p[2]:8.1f} {p[3]:8.1f}  {p[4]}")
    best = min(ours, key=lambda k: ours[k]["total"])
    pbest = min(paper, key=lambda k: paper[k][3])
    print(f"lowest total: ours {best}, paper {pbest}")


# ----- 3: ICML 2018 Table 5 ----------------------------------------------------------------------

def paper_table5_plan(graph: sw.Graph, devices: sw.DeviceGraph) -> sw.Plan:
    """Seed 003 Table 5's strategy written for our graph.  pool5's 7x7 output cannot be split
    h=2 w=2 and flatten is no layer in the paper, so both take whichever of {n=4}, {c=4} or one
    device costs least (Eq. 1)."""
    spec: dict[str, dict[str, int]] = {op: {"n": 4} for op in graph.op_names()}
    for op in VGG_CONV5:
        spec[op] = {"h": 2, "w": 2}
    spec.update(fc6={"c": 4}, fc7={"c": 4}, fc8={"c": 2}, prob={})
    best = None
    for pool5 in ({"n": 4}, {"c": 4}, {}):
        for flat in ({"n": 4}, {"c": 4}, {}):
            plan = sw.Plan.from_dict(graph, devices, {**spec, "pool5": pool5, "flatten": flat},
                                     name="paper Table 5")
            if best is None or plan.cost < best.cost:
                best = plan
    return best


def table5() -> dict[str, Any]:
    g, d = sw.models.vgg16(batch=4 * PER_GPU_BATCH), p100_cluster(4)
    plans = _all(g, d)
    plans["paper Table 5"] = paper_table5_plan(g, d)
    rows = []
    for label, ops, paper in TABLE5_PAPER:
        ours = []
        for op in ops:
            c = plans["searched"][op]
            text = f"{c.split_dims()} on {c.device_text()}"
            if text not in ours:
                ours.append(text)
        rows.append((label, ops, paper, ours))
    return {"rows": rows, "plans": plans}


def print_table5(t5: dict[str, Any]) -> None:
    print("3. ICML 2018 Table 5: VGG-16 on 4 P100s of one node (NVLink), batch 128 = 4 x 32")
    head = f"{'layers':<34} {'ops':<30} {'searched (ours)':<22} paper"
    print(head)
    print("-" * len(head))
    for label, ops, paper, ours in t5["rows"]:
        span = ops[0] if len(ops) == 1 else f"{ops[0]}..{ops[-1]}"
        print(f"{label:<34} {span:<30} {'; '.join(ours):<22} {paper}")
    plans = t5["plans"]
    print("Eq. 1 on this machine:")
    base = plans["searched"].cost
    for name in ("searched", "paper Table 5", "owt", "data", "model"):
        p = plans[name]
        print(f"  {name:<14} {p.cost * MS:9.1f} ms/iter  {p.bytes_moved * MB:9.1f} MB moved  "
              f"{p.cost / base:5.2f}x the searched")
    pt = plans["paper Table 5"]
    print(f"  (paper Table 5 here with pool5 {pt['pool5'].split_dims()}, flatten {pt['flatten'].split_dims()})")
    print()


# ----- 4: bytes moved on 16 P100s -------------------------------------------------------------

def bytes_moved(ndev: int = 16) -> dict[str, dict[str, float]]:
    """Bytes moved per iteration (Eq. 1's accounting; the simulator's task graph moves the same)."""
    out = {}
    for m in MODELS:
        plans = _all(_model(m, ndev * PER_GPU_BATCH), p100_cluster(ndev))
        out[m] = {s: p.bytes_moved for s, p in plans.items()}
    return out


def print_bytes(b: dict[str, dict[str, float]]) -> None:
    print("4. ICML 2018 Figure 8: bytes moved per iteration, 16 P100s (4 nodes x 4), batch 512 = 16 x 32")
    head = (f"{'model':<13} " + " ".join(f"{s + ' MB':>11}" for s in STRATEGIES)
            + f" {'data/srch':>9} {'model/srch':>10} {'owt/srch':>8} {'min(d,m)/srch':>13}")
    print(head)
    print("-" * len(head))
    ratios = {"data": [], "model": [], "owt": [], "dm": []}
    for m, r in b.items():
        s = r["searched"]
        dm = min(r["data"], r["model"]) / s
        for k in ("data", "model", "owt"):
            ratios[k].append(r[k] / s)
        ratios["dm"].append(dm)
        print(f"{m:<13} " + " ".join(f"{r[k] * MB:11.1f}" for k in STRATEGIES)
              + f" {r['data'] / s:8.2f}x {r['model'] / s:9.1f}x {r['owt'] / s:7.2f}x {dm:12.2f}x")
    owt_dm = [min(r["data"], r["model"]) / r["owt"] for r in b.values()]
    lo, hi = FIG8_PAPER["vs_data_and_model"]
    print(f"searched vs the better of data and model: ours {min(ratios['dm']):.2f}-{max(ratios['dm']):.1f}x less, "
          f"paper {lo}-{hi}x")
    lo, hi = FIG8_PAPER["owt_vs_data_and_model"]
    print(f"OWT vs the better of data and model:      ours {min(owt_dm):.2f}-{max(owt_dm):.1f}x less, "
          f"paper {lo}-{hi}x")
    lo, hi = FIG8_PAPER["vs_owt"]
    print(f"searched vs OWT:                          ours {min(ratios['owt']):.2f}-{max(ratios['owt']):.2f}x less, "
          f"paper {lo}-{hi}x")
    print()


# ----- 5: throughput at 1-16 P100s --------------------------------------------------------------

def throughput(simulate: bool = True, models: tuple[str, ...] = MODELS,
               counts: tuple[int, ...] = DEVICE_COUNTS) -> dict[str, dict[int, dict[str, dict[str, float]]]]:
    """images/s = batch / time, Eq. 1 ("eq1") and simulated ("sim"), per model, device count, strategy."""
    out: dict[str, dict[int, dict[str, dict[str, float]]]] = {}
    for m in models:
        out[m] = {}
        for n in counts:
            batch = n * PER_GPU_BATCH
            plans = _all(_model(m, batch), p100_cluster(n))
            row = {}
            for s, p in plans.items():
                r = {"eq1": batch / p.cost}
                if simulate:
                    r["sim"] = batch / sw.simulate(p, check_memory=False).iteration_time
                row[s] = r
            out[m][n] = row
    return out


def gains(tp: dict[int, dict[str, dict[str, float]]], key: str) -> dict[str, Any]:
    """Searched vs the best other strategy at the largest count, the most over the counts above 1
    (on one device every strategy is the same), and 1 -> largest scaling of every strategy."""
    counts = sorted(tp)
    first, last = counts[0], counts[-1]

    def gain(n: int) -> float:
        return tp[n]["searched"][key] / max(tp[n][s][key] for s in STRATEGIES if s != "searched")

    scaling = {s: tp[last][s][key] / tp[first][s][key] for s in STRATEGIES}
    return {"at_last": gain(last), "up_to": max(gain(n) for n in counts if n > 1), "scaling": scaling,
            "best_other_scaling": max(v for s, v in scaling.items() if s != "searched")}


def print_throughput(tp: dict[str, dict[int, dict[str, dict[str, float]]]], simulated: bool) -> None:
    print("5. ICML 2018 Figure 7: throughput (images/s), P100s, per-GPU batch 32; 1-4 GPUs on one node, "
          "8 on two, 16 on four")
    keys = ("eq1", "sim") if simulated else ("eq1",)
    head = f"{'model':<13} {'GPUs':>4} | " + " | ".join(
        " ".join(f"{SHORT[s] + ' ' + k:>10}" for s in STRATEGIES) for k in keys)
    print(head)
    print("-" * len(head))
    for m, rows in tp.items():
        for n, row in rows.items():
            print(f"{m:<13} {n:>4} | " + " | ".join(" ".join(f"{row[s][k]:10.0f}" for s in STRATEGIES)
                                                   for k in keys))
    print()
    print("searched vs the best other strategy, and scaling from 1 to 16 GPUs:")
    head = (f"{'model':<13} {'':<5} {'gain@16':>8} {'gain max':>8} | "
            + " ".join(f"{'x ' + s:>10}" for s in STRATEGIES) + " | paper: gain up to, x layer-wise, x best other")
    print(head)
    print("-" * len(head))
    for m, rows in tp.items():
        for k in keys:
            g = gains(rows, k)
            paper = (f"{FIG7_PAPER['gain_up_to'][m]}x, {FIG7_PAPER['scaling_searched'][m]}x, "
                     f"{FIG7_PAPER['scaling_best_other'][m]}x") if k == "eq1" else ""
            print(f"{m:<13} {k:<5} {g['at_last']:7.2f}x {g['up_to']:7.2f}x | "
                  + " ".join(f"{g['scaling'][s]:9.1f}x" for s in STRATEGIES) + f" | {paper}")
    print()


# ----- 6: DeePa on 16 K80s ----------------------------------------------------------------------

def k80_comparison(simulate: bool = True) -> dict[str, dict[str, dict[str, float]]]:
    out = {}
    for m in MODELS:
        plans = _all(_model(m, 512), k80_node())
        out[m] = {}
        for s, p in plans.items():
            r = {"eq1": p.cost, "bytes": p.bytes_moved}
            if simulate:
                r["sim"] = sw.simulate(p, check_memory=False).iteration_time
            out[m][s] = r
    return out


def print_k80(k: dict[str, dict[str, dict[str, float]]], simulated: bool) -> None:
    print("6. DeePa Figures 7 and 8: 16 K80s in one node, minibatch 512 (\"image\" = data parallelism)")
    keys = ("eq1", "sim") if simulated else ("eq1",)
    head = (f"{'model':<13} " + " ".join(f"{'ms ' + SHORT[s] + ' ' + key:>14}" for key in keys for s in STRATEGIES))
    print(head)
    print("-" * len(head))
    for m, r in k.items():
        print(f"{m:<13} " + " ".join(f"{r[s][key] * MS:14.1f}" for key in keys for s in STRATEGIES))
    print()
    head = (f"{'model':<13} {'':<5} {'owt/image':>9} {'srch/image':>10} {'srch/owt':>8} | "
            f"paper: OWT vs image 1.4/1.2/1.07x; DeePa vs TF & PyTorch 6.5/1.9/1.5x; AlexNet DeePa vs OWT 2.3x")
    print("speedups (time ratios):")
    print(head)
    print("-" * len(head))
    for m, r in k.items():
        for key in keys:
            print(f"{m:<13} {key:<5} {r['data'][key] / r['owt'][key]:8.2f}x "
                  f"{r['data'][key] / r['searched'][key]:9.2f}x {r['owt'][key] / r['searched'][key]:7.2f}x | "
                  + (f"{SEED000_FIG7['owt_vs_image'][m]}x, {SEED000_FIG7['deepa_vs_tf_pytorch'][m]}x"
                     + (f", {SEED000_FIG7['alexnet_deepa_vs_owt_time']}x" if m == "alexnet" else "")
                     if key == "eq1" else ""))
    print("bytes moved per iteration:")
    for m, r in k.items():
        b = {s: r[s]["bytes"] for s in STRATEGIES}
        print(f"  {m:<13} " + " ".join(f"{s} {b[s] * MB:9.1f} MB" for s in STRATEGIES)
              + f"  image/owt {b['data'] / b['owt']:5.2f}x  owt/searched {b['owt'] / b['searched']:5.2f}x")
    print(f"  paper: OWT moves {SEED000_FIG8['owt_vs_image'][0]}-{SEED000_FIG8['owt_vs_image'][1]}x less than image, "
          f"DeePa {SEED000_FIG8['deepa_vs_owt'][0]}-{SEED000_FIG8['deepa_vs_owt'][1]}x less than OWT "
          f"(AlexNet {SEED000_FIG8['alexnet_deepa_vs_owt']}x)")
    print()


# ----- main ----------------------------------------------------------------------------------------

def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip the simulations (Eq. 1 only)")
    args = ap.parse_args(argv)
    simulated = not args.quick
    start = time.perf_counter()
    print(f"# shardwise {sw.__version__} paper reproductions; {platform.machine()}, {os.cpu_count()} cores, "
          f"Python {platform.python_version()}; {'Eq. 1 only (--quick)' if args.quick else 'Eq. 1 and simulated'}")
    print("# K80 preset: 4.37 TFLOP/s, 240 GB/s, 10 GB/s between any two GPUs of the node; P100 preset: "
          "9.3 TFLOP/s, 732 GB/s, NVLink 20 GB/s, 12.5 GB/s InfiniBand between nodes; parameter server sync")
    print()
    _print_cost_table("1. DeePa Table 2: AlexNet fc6 (9216 -> 4096) on 16 K80s, minibatch 512; "
                      "every other op {n=16} on all 16", table2(), TABLE2_PAPER, out_col=False)
    print("the search (whole network) picks: " + "; ".join(searched_configs("alexnet", ("fc6", "fc7", "fc8")))
          + "   paper (section 7.1.2): fc6 on 2 workers")
    at_paper_link = table2(PAPER_K80_LINK)
    print(f"with {PAPER_K80_LINK / 1e9:.3f} GB/s between K80s: "
          + ", ".join(f"{k} {r['t_x'] * MS:.1f} / {r['t_s'] * MS:.1f} / {r['total'] * MS:.1f}"
                      for k, r in at_paper_link.items())
          + " ms (transfer / update / total); lowest total first: "
          + " < ".join(sorted(at_paper_link, key=lambda k: at_paper_link[k]["total"])))
    print()
    _print_cost_table("2. DeePa Table 3: VGG-16 conv5_1..conv5_3 together on 16 K80s, minibatch 512; "
                      "every other op {n=16}\n   transfer = pool4's edge and the edges inside the group; "
                      "(out) = the edge to pool5, not in the total", table3(), TABLE3_PAPER, out_col=True)
    print("the search (whole network) picks: " + "; ".join(searched_configs("vgg16", VGG_CONV5))
          + "   paper (section 7.1.3): 4 workers")
    print()
    print_table5(table5())
    print_bytes(bytes_moved(16))
    print_throughput(throughput(simulate=simulated), simulated)
    print_k80(k80_comparison(simulate=simulated), simulated)
    print(f"# {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
