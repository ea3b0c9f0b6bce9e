"""Today's GPUs as presets: A100 (40 and 80 GB), H100 SXM and H200 in 8-GPU servers whose
GPUs reach each other through NVSwitch and the other servers through a 400 Gb/s InfiniBand
adapter of their own; the older presets (P100, K80, V100) keep one adapter per node.

What is checked: the figures the presets give the devices and links (the data sheets'
numbers, docs/machines.md), which adapter the simulator queues a transfer between nodes on
(one per device, or one per node), that one adapter per device is what makes model
parallelism across nodes faster than a shared adapter, and that machine files keep it."""
from __future__ import annotations

import json

import numpy as np
import pytest

import shardwise as sw
from shardwise.iteration.sim_costs import _machine
from shardwise.machine.devices import DEVICE_PRESETS

GB = 1e9


@pytest.mark.parametrize("kind,flops,memory,mem_bw,nvlink", [
    ("A100-40GB", 19.5e12, 40 * GB, 1555 * GB, 300 * GB),
    ("A100-80GB", 19.5e12, 80 * GB, 2039 * GB, 300 * GB),
    ("A100", 19.5e12, 80 * GB, 2039 * GB, 300 * GB),
    ("H100", 67e12, 80 * GB, 3350 * GB, 450 * GB),
    ("H200", 67e12, 141 * GB, 4800 * GB, 450 * GB),
])
def test_cluster_of_todays_gpus(kind, flops, memory, mem_bw, nvlink):
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=8, device=kind)
    assert len(d) == 16 and {dev.kind for dev in d.devices} == {kind}
    dev = d.devices[9]
    assert (dev.flops, dev.memory, dev.mem_bandwidth, dev.node) == (flops, memory, mem_bw, 1)
    bw = d.route_bandwidths()
    assert bw[0, 7] == bw[8, 15] == nvlink           # NVSwitch: every pair of a node at full NVLink
    assert bw[0, 8] == bw[15, 3] == 50 * GB          # 400 Gb/s InfiniBand
    assert d.nic_per_device and not d.shared_nics
    assert dev.host_bandwidth == (32 * GB if kind.startswith("A100") else 64 * GB)   # PCIe 4.0 / 5.0 x16


def test_one_node_has_no_network_and_the_older_presets_share_one_adapter_per_node():
    one = sw.DeviceGraph.cluster(nodes=1, devices_per_node=8, device="H100")
    assert not one.nic_per_device and not one.shared_nics
    v100 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="V100")
    assert v100.shared_nics and not v100.nic_per_device
    assert v100.route_bandwidths()[0, 4] == 12.5 * GB   # 100 Gb/s EDR, as the papers' clusters
    faster = sw.DeviceGraph.cluster(nodes=2, devices_per_node=8, device="H100", inter_bandwidth=100 * GB)
    assert faster.route_bandwidths()[0, 8] == 100 * GB and faster.nic_per_device


def test_unknown_preset_lists_the_new_ones():
    with pytest.raises(sw.DeviceGraphError, match="unknown device preset 'B200'") as err:
        sw.DeviceGraph.cluster(2, 8, device="B200")
    for kind in ("A100-40GB", "A100-80GB", "H100", "H200"):
        assert repr(kind) in str(err.value)


def _route_names(d: sw.DeviceGraph, a: int, b: int) -> list[str]:
    m = _machine(d)
    k = a * len(d) + b
    return [m.name(int(r)) for r in m.route_res[m.route_ptr[k]:m.route_ptr[k + 1]]]


def test_transfers_between_nodes_queue_on_their_own_devices_adapters():
    h100 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="H100")
    assert _route_names(h100, 1, 6) == ["nic device 1 out", "nic device 6 in"]
    assert _route_names(h100, 2, 6) == ["nic device 2 out", "nic device 6 in"]
    assert _route_names(h100, 1, 2) == ["link 1->2"]
    v100 = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="V100")
    assert _route_names(v100, 1, 6) == _route_names(v100, 2, 5) == ["nic 0 out", "nic 1 in"]


def test_an_adapter_per_device_speeds_up_model_parallelism_across_nodes():
    """Model parallelism over two nodes sends layer outputs from several devices of one node to
    several of the other at once: through one adapter per device they overlap, through one
    shared adapter they queue.  The same machine otherwise, so the simulated step is strictly
    shorter with an adapter per device, and never longer for data parallelism."""
    g = sw.models.get("alexnet", batch=64)

    def machine(shared: bool) -> sw.DeviceGraph:
        d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="H100")
        if shared:
            d.nic_per_device, d.shared_nics = False, True
        return d

    own, shared = (sw.simulate(sw.strategies.model_parallel(g, machine(s))).iteration_time for s in (False, True))
    assert own < 0.9 * shared
    own, shared = (sw.simulate(sw.strategies.data_parallel(g, machine(s))).iteration_time for s in (False, True))
    assert own <= shared


def test_machine_files_keep_the_adapters(tmp_path):
    d = sw.DeviceGraph.cluster(nodes=2, devices_per_node=8, device="H200")
    path = tmp_path / "h200.json"
    d.save(path)
    data = json.loads(path.read_text())
    assert data["nic_per_device"] is True and data["shared_nics"] is False
    e = sw.DeviceGraph.load(path)
    assert (e.nic_per_device, e.shared_nics) == (True, False)
    assert e.fingerprint() == d.fingerprint()
    np.testing.assert_array_equal(e.route_bandwidths(), d.route_bandwidths())
    plan = sw.strategies.model_parallel(sw.models.get("lenet5", batch=16), e)
    assert sw.simulate(plan).iteration_time == sw.simulate(sw.strategies.model_parallel(plan.graph, d)).iteration_time
    data["shared_nics"] = True
    path.write_text(json.dumps(data))
    with pytest.raises(sw.DeviceGraphError, match="nic_per_device: and shared_nics are both true"):
        sw.DeviceGraph.load(path)


def test_a_preset_kind_in_a_machine_file_fills_the_figures(tmp_path):
    path = tmp_path / "m.json"
    path.write_text(json.dumps({"format": "shardwise-machine", "version": 1,
                                "devices": [{"name": "a", "kind": "H200"}, {"name": "b", "kind": "A100-40GB"}],
                                "links": [{"from": "a", "to": "b", "bandwidth": 5e10}]}))
    d = sw.DeviceGraph.load(path)
    for dev, kind in zip(d.devices, ("H200", "A100-40GB")):
        spec = DEVICE_PRESETS[kind]
        assert (dev.flops, dev.memory, dev.mem_bandwidth, dev.host_bandwidth) == (
            spec.flops, spec.memory, spec.mem_bandwidth, spec.host_bandwidth)
