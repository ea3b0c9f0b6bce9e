"""How long a user waits for a plan on today's machines, and how much memory the search takes:
each search runs in a fresh Python process, as a user's script would (imports and the model built
before the clock starts), and reports its wall time, processor time and peak resident memory.

Targets: a 32-layer Llama with Llama-2-7B's widths and ResNet-50 plan within every device's memory
on 64, 256 and 1,024 H100s in under 10 s and 2 GB each; a machine file of 4,096 devices on a chain
(routes of up to 4,095 links) loads, is searched and is simulated in seconds, under 2 GB; the Eq. 1
search of Inception-v3 on 4 x 4 P100s waits under 50 ms (the median of fresh processes).

These compare times, so they are marked ``calibration``: ``make calibration`` runs them, on a
quiet machine; the default test run never does (a busy laptop would fail them).  The figures
themselves are printed by benchmarks/search_time.py and ``python tools/doc_measures.py
llama-memory-search``.
"""
from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

import pytest

import shardwise as sw

pytestmark = pytest.mark.calibration

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
WAIT_S = 10.0                 # seconds a user waits at most on 64 to 1,024 GPUs
PEAK_BYTES = 2e9              # the search's process at most
INCEPTION_WAIT_S = 0.050      # the Eq. 1 search of Inception-v3 on 16 devices

# the child: the search between two clock readings, then its figures as JSON on the last line
HEADER = ("import json, resource, sys, time, warnings; import shardwise as sw; warnings.simplefilter('ignore'); "
          "n = int(sys.argv[1]); d = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device='H100'); ")
TIMED = ("w0 = time.perf_counter(); c0 = time.process_time(); p = sw.search(g, d, **kw); "
         "wall, cpu = time.perf_counter() - w0, time.process_time() - c0; "
         "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024; "
         "fits = all(b.arena <= b.budget for b in p.memory().values()); "
         "print(json.dumps(dict(wall=wall, cpu=cpu, peak=peak, fits=fits, eq1=p.search_stats['searched_cost'])))")
LLAMA = ("g = sw.models.llama(layers=32, kv_heads=32, ffn=11008, seq=2048, batch=n); "
         "kw = dict(options=sw.CostOptions(sync='ring', precision='bf16', reduction_splits=True), progress=False); ")
RESNET = "g = sw.models.resnet50(batch=64); kw = dict(objective='eq1', progress=False); "


def fresh(code: str, *args: str, timeout: float = 600) -> dict:
    """The last line of ``code``'s output, run by a fresh Python process on this tree's package."""
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                         timeout=timeout, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


@pytest.mark.parametrize("model", ["llama", "resnet50"])
@pytest.mark.parametrize("gpus", [64, 256, 1024])
def test_plans_within_memory_on_h100_clusters_in_seconds(model, gpus):
    r = fresh(HEADER + (LLAMA if model == "llama" else RESNET) + TIMED, str(gpus))
    assert r["fits"], f"{model} on {gpus} H100s: the plan does not fit every device's memory"
    assert r["wall"] < WAIT_S, f"{model} on {gpus} H100s: {r['wall']:.1f} s waited"
    assert r["peak"] < PEAK_BYTES, f"{model} on {gpus} H100s: {r['peak'] / 1e9:.2f} GB peak"


def test_a_4096_device_chain_file_loads_searches_and_simulates_in_seconds(tmp_path):
    """LeNet-5 (a sample per device) on a chain of 4,096 devices read from a machine file: every
    transfer to the parameter server crosses up to 4,095 links."""
    path = tmp_path / "chain.json"
    d = sw.DeviceGraph("chain")
    for k in range(4096):
        d.add_device(f"g{k}", flops=1e12, memory=16e9)
    for k in range(4095):
        d.add_link(k, k + 1, bandwidth=1e10)
    d.save(str(path))
    code = ("import json, resource, sys, time, warnings; import shardwise as sw; warnings.simplefilter('ignore'); "
            "g = sw.models.lenet5(batch=4096); t = [time.perf_counter()]; d = sw.DeviceGraph.load(sys.argv[1]); "
            "t.append(time.perf_counter()); p = sw.search(g, d, objective='eq1', progress=False); "
            "t.append(time.perf_counter()); r = sw.simulate(p); t.append(time.perf_counter()); "
            "peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024; "
            "print(json.dumps(dict(load=t[1] - t[0], search=t[2] - t[1], simulate=t[3] - t[2], peak=peak, "
            "iteration=r.iteration_time, devices=len(d))))")
    r = fresh(code, str(path))
    assert r["devices"] == 4096 and r["iteration"] > 0
    for stage in ("load", "search", "simulate"):
        assert r[stage] < WAIT_S, f"{stage}: {r[stage]:.1f} s"
    assert r["peak"] < PEAK_BYTES, f"{r['peak'] / 1e9:.2f} GB peak"


def test_inception_v3_eq1_search_on_16_devices_under_50_ms():
    """The median of nine fresh processes' first search (benchmarks/search_time.py --first prints
    the same figure with its quartiles and stages)."""
    code = ("import json, sys, time; sys.path.insert(0, sys.argv[1]); import shardwise as sw; import search_time; "
            "g, d = sw.models.get('inception_v3'), search_time.device_graph(16); "
            "w0 = time.perf_counter(); p = sw.search(g, d, objective='eq1', progress=False); "
            "print(json.dumps(dict(wall=time.perf_counter() - w0)))")
    waits = [fresh(code, os.path.join(ROOT, "benchmarks"))["wall"] for _ in range(9)]
    assert statistics.median(waits) < INCEPTION_WAIT_S, f"waits (ms): {sorted(round(w * 1e3, 1) for w in waits)}"
