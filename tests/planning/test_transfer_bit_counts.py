"""Exact transfer tables of first-device partitions counted from bit fields (cost_placed.c).

On a machine of uniform nodes whose sizes are powers of two, t_x of two partitions both
placed from device 0 is counted by summing over bit fields of the worker and block indices
(groups of factors that share no bit summed apart) instead of one box per worker.  Those
tables must equal the ones listing every (worker, block) overlap on a machine given as a plain
bandwidth matrix (no node structure): the moved bytes exactly, the seconds within 1e-12
relative (the listing adds seconds pair by pair, the counting adds elements first).  The
canonical enumeration of the staged search (first devices only) on 32 and 64 devices is where
the bit counts are used (at least 32 workers on shared devices); 8 devices check the
box-by-box path beside it.
"""
from __future__ import annotations

import numpy as np
import pytest

import shardwise as sw
from shardwise.models.spec import load_model
from shardwise.planning.problem import CostOptions, SYNC_MODELS, make_problem, worker_counts

MACHINES = {
    "p100_2x4": lambda: sw.DeviceGraph.cluster(nodes=2, devices_per_node=4, device="P100"),
    "v100_4x8": lambda: sw.DeviceGraph.cluster(nodes=4, devices_per_node=8, device="V100"),
    "h100_8x8": lambda: sw.DeviceGraph.cluster(nodes=8, devices_per_node=8, device="H100"),
}
MODELS = {
    "resnet18_small": lambda n: load_model("resnet18_small", None).graph,
    "gpt_tiny": lambda n: load_model("gpt_tiny", None).graph,
    "inception_small": lambda n: load_model("inception_small", None).graph,
    "llama": lambda n: sw.models.llama(layers=1, batch=n),
}


def first_device_tables(g, devices, options, structure):
    p = make_problem(g, devices, options)
    p.set_options(SYNC_MODELS[options.sync], options.bytes_per_element, options.backward_factor, 1,
                  options.reduction_splits, structure)
    p.enumerate(np.asarray(worker_counts(len(devices)), dtype=np.int32), first_block_only=True)
    p.build_tables(with_bytes=True)
    return p


# one case in the default run (a fifth of a second): a transformer on 32 devices meets every
# kind of factor (dimensions split alike, one side unsplit, read whole); the rest are slow
QUICK = ("v100_4x8", "gpt_tiny", "ring", True)
CASES = [pytest.param(*case, marks=() if case == QUICK else pytest.mark.slow)
         for case in ((m, g, sync, red) for m in MACHINES for g in MODELS
                      for sync, red in (("ring", True), ("zero", False), ("parameter_server", True))
                      if m != "h100_8x8" or sync == "ring")]


@pytest.mark.parametrize("machine,model,sync,reductions", CASES)
def test_bit_counted_tables_equal_listed(machine, model, sync, reductions):
    devices = MACHINES[machine]()
    g = MODELS[model](len(devices))
    options = CostOptions(threads=1, sync=sync, reduction_splits=reductions)
    counted = first_device_tables(g, devices, options, structure=True)
    listed = first_device_tables(g, devices, options, structure=False)
    assert counted.node_size > 0 and listed.node_size == 0
    assert max(int(counted.workers(i).max()) for i in range(len(g.ops))) == len(devices)
    for e in range(len(counted.edges())):
        (t1, b1), (t2, b2) = counted.edge_table(e), listed.edge_table(e)
        np.testing.assert_array_equal(b1, b2, err_msg=f"edge {e} bytes")
        np.testing.assert_allclose(t1, t2, rtol=1e-12, atol=0, err_msg=f"edge {e} seconds")
        assert np.isfinite(t1).all() and (b1 >= 0).all()
