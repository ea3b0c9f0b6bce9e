"""Search a strategy for VGG-16 on the 4x4 P100 cluster of the papers, compare it
with data, model and OWT parallelism, and save it.

    python examples/plan_vgg16.py [PLAN.json]

The same as ``python -m shardwise plan --model vgg16 --devices 4x4 --save PLAN.json``,
written out with the Python API.
"""
import sys

import shardwise as sw

path = sys.argv[1] if len(sys.argv) > 1 else "vgg16-4x4-p100.plan.json"

g = sw.models.vgg16(batch=512)
d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device="P100")  # NVLink inside, InfiniBand between
print(g.summary().splitlines()[0])
print(d.summary())

plan = sw.search(g, d, progress=True)  # stage timings on stderr
baselines = [sw.strategies.data_parallel(g, d), sw.strategies.model_parallel(g, d), sw.strategies.owt(g, d)]
print(plan.summary(baselines))

best = min(baselines, key=lambda p: p.cost)
data = baselines[0]
print(f"\n{best.cost / plan.cost:.2f}x faster than the best baseline ({best.name}); "
      f"{data.bytes_moved / plan.bytes_moved:.1f}x fewer bytes than data parallelism")
print("fc6 runs as", plan["fc6"], "| conv1_1 runs as", plan["conv1_1"])

plan.save(path)
again = sw.Plan.load(path, g, d)  # refuses a file made for another graph or device graph
assert abs(again.cost - plan.cost) <= 1e-12 * plan.cost
print(f"saved to {path}")
