"""A hand-made device graph: two pairs of GPUs, NVLink inside a pair and one slow
link between the pairs, so that most transfers between the pairs take two or
three hops.  Search ResNet-18 on it and compare with the baselines.

    python examples/custom_devices.py

Transfers between devices without a direct link follow the widest route (the
path whose slowest link is fastest) at that slowest link's bandwidth.
"""
import numpy as np

import shardwise as sw

d = sw.DeviceGraph("two pairs")
# mem_bandwidth defaults to 80 bytes per 1000 FLOPs when not given
g0 = d.add_device("gpu0", flops=9.3e12, memory=16e9, mem_bandwidth=732e9)
g1 = d.add_device("gpu1", flops=9.3e12, memory=16e9, mem_bandwidth=732e9)
g2 = d.add_device("gpu2", flops=15.7e12, memory=16e9, mem_bandwidth=900e9)  # a faster pair
g3 = d.add_device("gpu3", flops=15.7e12, memory=16e9, mem_bandwidth=900e9)
d.add_link(g0, g1, bandwidth=20e9)      # NVLink
d.add_link(g2, g3, bandwidth=25e9)      # NVLink 2
d.add_link(g1, g2, bandwidth=3e9)       # the only way between the pairs: gpu0 -> gpu1 -> gpu2 is two hops
print(d.summary())
with np.printoptions(precision=2):
    print("route bandwidth (GB/s), row = from, column = to; diagonal = same device:")
    print(np.where(np.isinf(d.route_bandwidths()), 0, d.route_bandwidths()) / 1e9)

g = sw.models.resnet18(batch=256)
plan = sw.search(g, d)
print(plan.summary(sw.strategies.baselines(g, d)))
used = sorted({dev for _, c in plan for dev in c.devices})
print(f"\nsearch took {plan.search_stats['total_seconds'] * 1e3:.0f} ms over "
      f"{plan.search_stats['configurations']} configurations; devices used: {[d.devices[i].name for i in used]}")
