"""Precision in the plan: precision="fp32" | "bf16" | "fp16" (CostOptions, sw.search, plan files).

Every expected figure is worked out here from the presets' data-sheet numbers, the ops' FLOPs
(a multiply-add is 2 FLOPs) and the mixed-precision convention of docs/cost-model.md (2-byte
activations, gradients and messages; each weight a 2-byte compute copy plus a float32 master;
float32 optimizer state), never read back from the program.
"""
import json
import random
import warnings

import numpy as np
import pytest

import shardwise as sw
from shardwise import cli
from shardwise.machine.devices import DEVICE_PRESETS
from shardwise.planning import search_memory as sm
from shardwise.planning import strategies
from shardwise.planning.problem import CostOptions

# H100 SXM data sheet: 67 TFLOP/s float32 (CUDA cores), 989 TFLOP/s BF16 / FP16 dense (tensor cores)
H100_FP32, H100_HALF = 67e12, 989e12
BWD = 3   # backward_factor: forward + backward = 3 x the forward


def _mlp(m, k, hidden, classes, bias=False, name="mlp"):
    g = sw.Graph(name)
    x = g.input("x", (m, k))
    h = g.linear(x, hidden, bias=bias, name="fc1")
    y = g.linear(h, classes, bias=bias, name="fc2")
    g.softmax(y, name="prob")
    return g


# ------------------------------------------------------------------ options
@pytest.mark.parametrize("bad", ["fp8", "FP32", "half", "", None, 16])
def test_a_bad_precision_raises_naming_the_choices(bad):
    with pytest.raises(ValueError, match="fp32.*bf16.*fp16"):
        CostOptions(precision=bad)
    g = _mlp(8, 16, 32, 4)
    if bad is not None:   # sw.search's default: precision not given (options', else fp32)
        with pytest.raises(ValueError, match="fp32.*bf16.*fp16"):
            sw.search(g, sw.DeviceGraph.cpu(1), precision=bad, memory=False)
    with pytest.raises(ValueError, match="fp32.*bf16.*fp16"):
        sw.DeviceGraph.cluster(1, 1, "H100").devices[0].peak_flops(bad)


def test_precision_sets_the_value_bytes_and_search_records_it():
    assert CostOptions().bytes_per_element == 4.0
    assert CostOptions(precision="bf16").bytes_per_element == 2.0
    assert CostOptions(precision="fp16").bytes_per_element == 2.0
    assert CostOptions(precision="bf16", bytes_per_element=3.0).bytes_per_element == 3.0   # an explicit override
    g = _mlp(64, 128, 256, 10)
    plan = sw.search(g, sw.DeviceGraph.cluster(1, 2, "H100"), precision="bf16", objective="eq1")
    assert plan.options.precision == "bf16"
    text = plan.summary()
    assert "precision=bf16" in text and "float32" in text   # the note: trained in float32
    assert "precision bf16" in str(plan.explain("fc1"))
    with pytest.raises(ValueError, match="disagrees"):
        sw.search(g, sw.DeviceGraph.cpu(1), precision="bf16", options=CostOptions(precision="fp16"))


def test_plan_files_keep_the_precision(tmp_path):
    g = _mlp(64, 128, 256, 10)
    d = sw.DeviceGraph.cluster(1, 2, "H100")
    plan = strategies.data_parallel(g, d, CostOptions(precision="fp16"))
    plan.save(tmp_path / "p.json")
    back = sw.Plan.load(tmp_path / "p.json", g, d)
    assert back.options == plan.options and back.options.precision == "fp16"
    assert back.cost == pytest.approx(plan.cost, rel=1e-12)
    doc = json.loads((tmp_path / "p.json").read_text())
    del doc["cost_model"]["precision"]                  # a file written before precision existed
    (tmp_path / "old.json").write_text(json.dumps(doc))
    assert sw.Plan.load(tmp_path / "old.json", g, d).options.precision == "fp32"


# ------------------------------------------------------------------ peak FLOP/s
def test_compute_bound_step_on_h100_is_faster_by_the_ratio_of_the_peaks():
    # one H100 (3.35 TB/s), a large matrix product: M x K @ K x N with no bias, then a
    # 16-class classifier (fc2) and its softmax
    m, k, n, classes = 16384, 4096, 4096, 16
    membw = 3.35e12
    g = _mlp(m, k, n, classes)
    d = sw.DeviceGraph.cluster(1, 1, "H100")
    fc1_flops, fc2_flops = 2.0 * m * k * n, 2.0 * m * n * classes
    # fc1 is compute-bound in both formats: it reads and writes M K + K N + M N elements
    fc1_elements = m * k + k * n + m * n
    assert fc1_elements * 4 / membw < fc1_flops / H100_FP32 and fc1_elements * 2 / membw < fc1_flops / H100_HALF
    # fc2 (M x N @ N x 16) is bound by memory in both: its time is its bytes, which halve
    fc2_elements = m * n + n * classes + m * classes
    assert fc2_flops / H100_FP32 < fc2_elements * 2 / membw
    plans = {p: strategies.data_parallel(g, d, CostOptions(precision=p)) for p in ("fp32", "bf16", "fp16")}
    # Eq. 1's compute term of the matrix product: 3 x its FLOPs over the peak of the format
    for p, peak in (("fp32", H100_FP32), ("bf16", H100_HALF), ("fp16", H100_HALF)):
        row = next(r for r in plans[p].layer_costs() if r.op == "fc1")
        assert row.t_c == pytest.approx(BWD * fc1_flops / peak, rel=1e-9)
    sims = {p: sw.simulate(plans[p]) for p in plans}
    # the simulator: fc1's forward and backward tasks take 3 x FLOPs / peak in all
    for p, peak in (("fp32", H100_FP32), ("bf16", H100_HALF)):
        busy = sum(e.end - e.start for e in sims[p].events if e.op == "fc1" and e.phase in ("forward", "backward"))
        assert busy == pytest.approx(BWD * fc1_flops / peak, rel=1e-9)
    # the whole step (one device: its tasks back to back): fc1 saves 3 x FLOPs x (1/fp32 peak -
    # 1/half peak), fc2 3 x its bytes at 2 bytes an element less; the softmax's ~1 us and the
    # updates (float32 master and momentum: unchanged) are below the tolerance (2 us)
    saved = BWD * fc1_flops * (1 / H100_FP32 - 1 / H100_HALF) + BWD * fc2_elements * (4 - 2) / membw
    step32, step16 = sims["fp32"].iteration_time, sims["bf16"].iteration_time
    assert step32 - step16 == pytest.approx(saved, rel=1e-4)
    assert sims["fp16"].iteration_time == pytest.approx(step16, rel=1e-12)   # the same peaks on H100


def test_devices_without_a_half_peak_keep_the_float32_figure():
    d = sw.DeviceGraph.cluster(1, 1, "V100")
    dev = d.devices[0]
    assert dev.peak_flops("fp32") == 15.7e12
    assert dev.peak_flops("fp16") == 125e12        # tensor cores
    assert dev.peak_flops("bf16") == 15.7e12       # no bfloat16 on V100
    assert sw.DeviceGraph.cpu(1).devices[0].peak_flops("bf16") == DEVICE_PRESETS["cpu"].flops
    for name, half in (("A100", 312e12), ("A100-40GB", 312e12), ("H100", 989e12), ("H200", 989e12)):
        dev = sw.DeviceGraph.cluster(1, 1, name).devices[0]
        assert (dev.peak_flops("bf16"), dev.peak_flops("fp16")) == (half, half)
        assert dev.peak_flops("fp32") == DEVICE_PRESETS[name].flops


# ------------------------------------------------------------------ message bytes
def test_data_parallel_all_reduce_moves_half_the_bytes_in_bf16():
    # two H100s joined by a slow 1 GB/s link: the gradient exchange is bound by its bytes
    g = _mlp(64, 256, 512, 8, bias=True)
    bw = 1e9
    d = sw.DeviceGraph.cluster(1, 2, "H100", intra_bandwidth=bw)
    params = 256 * 512 + 512 + 512 * 8 + 8
    for p, each in (("fp32", 4), ("bf16", 2), ("fp16", 2)):
        plan = strategies.data_parallel(g, d, CostOptions(precision=p))
        # parameter server on 2 replicas: device 1 sends its gradients to device 0, which sends
        # the updated weights back: 2 x params elements over the link
        assert plan.bytes_moved == pytest.approx(2 * params * each, rel=1e-12)
        assert plan.breakdown["sync"] == pytest.approx(2 * params * each / bw, rel=1e-9)
        sim = sw.simulate(plan)
        assert sim.bytes_moved == 2 * params * each
        copies = [e for e in sim.events if e.kind == "copy" and e.src_device != e.device]
        assert sum(e.end - e.start for e in copies) == pytest.approx(2 * params * each / bw, rel=1e-9)
        assert sum(e.nbytes for e in copies) == 2 * params * each
        tg = sw.lower(plan)
        assert tg.bytes_moved() == 2 * params * each
        # what the runtime sends stays float32
        assert sum(t.nbytes for t in tg.tasks if t.kind == "copy") == 2 * params * 4


# ------------------------------------------------------------------ memory
def test_memory_of_a_two_layer_mlp_follows_the_convention():
    # x (8, 16) -> fc1 (16 -> 32, bias) -> fc2 (32 -> 4, bias) -> softmax, one device, SGD momentum
    g = _mlp(8, 16, 32, 4, bias=True)
    d = sw.DeviceGraph.cluster(1, 1, "H100")
    params = 16 * 32 + 32 + 32 * 4 + 4                # 676 weights and biases
    kept = 8 * 16 + 8 * 32 + 8 * 4 + 8 * 4            # x, fc1, fc2, softmax: all read by the backward
    act_grads = 8 * 32 + 8 * 4                        # the gradients of fc1's and fc2's outputs
    for p, value, weight in (("fp32", 4, 4), ("bf16", 2, 2 + 4), ("fp16", 2, 2 + 4)):
        mem = sw.memory_plan(strategies.data_parallel(g, d, CostOptions(precision=p))).devices[0]
        assert mem.parameters == params * weight      # mixed precision: 2-byte copy + float32 master
        assert mem.optimizer_state == params * 4      # momentum stays float32
        assert mem.activations_kept == kept * value
        total = params * weight + params * 4 + params * value + kept * value + act_grads * value
        assert mem.sum_of_buffers == total            # + weight gradients and activation gradients
        tg = sw.lower(strategies.data_parallel(g, d, CostOptions(precision=p)))
        assert sum(tg.memory_per_device().values()) == total
        for b in tg.buffers:                          # the runtime's buffers stay float32
            assert b.nbytes == 4 * b.elements
            assert b.plan_bytes == b.elements * {"param": weight, "momentum": 4}.get(b.kind, value)


@pytest.mark.parametrize("sync", ["parameter_server", "zero"])
@pytest.mark.parametrize("model", ["resnet18_small", "gpt_tiny"])
def test_footprint_is_what_the_memory_plan_keeps_in_bf16(model, sync):
    """The search's memory model and the memory plan read one rule: byte for byte in bf16 too,
    batchnorm (float32 running statistics, float64 batch sums) and sharded optimizer state
    (sync zero: float32 chunks) included."""
    from shardwise.models.spec import load_model
    from test_search_memory import _plan, _problem

    rng = random.Random(model)
    graph = load_model(model, None).graph
    devices = sw.DeviceGraph.parse("3", device="A100")
    options = CostOptions(precision="bf16", reduction_splits=model != "gpt_tiny", sync=sync)
    problem = _problem(graph, devices, options)
    tables = sm.Tables(problem, graph)
    for _ in range(3):
        choice = [rng.randrange(len(t)) for t in tables.time]
        mp = sw.memory_plan(_plan(problem, graph, devices, options, choice))
        kept = [mp.devices[dv].activations_kept + sum(mp.devices[dv].at_peak.get(k, 0) for k in
                                                      ("param", "momentum", "running_stats"))
                for dv in range(len(devices))]
        np.testing.assert_allclose(tables.footprint(choice), kept, rtol=0, atol=0.5)


# ------------------------------------------------------------------ machine files
def test_machine_files_keep_the_half_peaks(tmp_path):
    d = sw.DeviceGraph("mixed")
    d.add_device("a", flops=20e12, memory=16e9, flops_bf16=300e12, flops_fp16=310e12)
    d.add_device("b", flops=10e12, memory=8e9)                       # no half peaks
    d.add_device("c", flops=60e12, memory=80e9, kind="H100")         # the preset's
    d.add_link(0, 1, 10e9)
    d.add_link(1, 2, 10e9)
    d.save(tmp_path / "m.json")
    back = sw.DeviceGraph.load(tmp_path / "m.json")
    assert [(x.flops_bf16, x.flops_fp16) for x in back.devices] == [(300e12, 310e12), (None, None),
                                                                    (989e12, 989e12)]
    assert back.fingerprint() == d.fingerprint()
    preset = sw.DeviceGraph.cluster(2, 2, "A100")
    preset.save(tmp_path / "p.json")
    assert all(x.peak_flops("bf16") == 312e12 for x in sw.DeviceGraph.load(tmp_path / "p.json").devices)
    doc = json.loads((tmp_path / "m.json").read_text())
    doc["devices"][0]["flops_bf16"] = -1
    (tmp_path / "bad.json").write_text(json.dumps(doc))
    with pytest.raises(sw.DeviceGraphError, match=r"devices\[0\]\.flops_bf16"):
        sw.DeviceGraph.load(tmp_path / "bad.json")


# ------------------------------------------------------------------ execution stays float32
def test_a_trainer_of_a_bf16_plan_trains_in_float32_and_says_so():
    g = _mlp(16, 8, 12, 3, bias=True, name="tiny")
    d = sw.DeviceGraph.cpu(2)
    p32 = strategies.data_parallel(g, d)
    p16 = strategies.data_parallel(g, d, CostOptions(precision="bf16"))
    with pytest.warns(sw.PrecisionWarning, match="float32"):
        t16 = sw.Trainer(g, p16, optimizer=sw.SGD(lr=0.1), seed=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", sw.PrecisionWarning)
        t32 = sw.Trainer(g, p32, optimizer=sw.SGD(lr=0.1), seed=3)
    # the runtime's arenas are the float32 plan's, whatever the plan was costed in
    assert t16.memory_per_worker() == t32.memory_per_worker()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((16, 8)).astype(np.float32)
    y = rng.integers(0, 3, 16)
    for _ in range(3):
        a, b = t16.step(x, y), t32.step(x, y)
        assert a == b                                # float32 arithmetic, bitwise the same
    for name, w in t32.get_weights().items():
        np.testing.assert_array_equal(t16.get_weights()[name], w)


def test_cli_precision(capsys):
    code = cli.main(["plan", "--model", "lenet5", "--devices", "2", "--device-type", "H100", "--precision", "bf16",
                     "--quiet", "--json"])
    out, _ = capsys.readouterr()
    assert code == 0 and json.loads(out)["cost_model"]["precision"] == "bf16"
    assert cli.main(["plan", "--model", "lenet5", "--precision", "fp8"]) != 0
    assert "invalid choice: 'fp8'" in capsys.readouterr().err
