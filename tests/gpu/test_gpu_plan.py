"""The CUDA backend's host side, without a GPU (csrc/exec/gpu/, built into the core on every machine):

1. logical devices onto GPUs in blocks, and the route a box takes between two of them;
2. a schedule's stream priorities ranked onto a GPU's range of CUDA priorities;
3. the arena of a logical device: buffers, then one workspace per stream;
4. the window geometry that lets cuDNN run a worker's convolution on its view, checked
   against a brute-force walk of the positions the outputs read;
5. the event plan: every wait issued after its record in the one recorded list, on
   hand-made lists and on what real plans record (the record backend records exactly as the
   CUDA backend does);
6. without a GPU: Trainer(backend="cuda") and DeviceGraph.local_gpus name what is missing,
   backends() lists "cuda" only when built, `import shardwise` loads no CUDA library, and
   the build's SHARDWISE_CUDA switch skips or fails with its reason.
"""
from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest

import shardwise as sw
from shardwise import _core
from shardwise.machine.cuda import BackendUnavailableError
from shardwise.iteration.lower import plan_arrays
from shardwise.planning.problem import make_problem
from shardwise.train.runtime import op_attrs
from strategies_random import random_plan

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, os.pardir)
RUN, WAIT, RECORD = 0, 1, 2


# ---------------------------------------------------------------- 1. device map, routes
@pytest.mark.parametrize("ndev,ngpus,want", [(4, 1, [0, 0, 0, 0]), (4, 2, [0, 0, 1, 1]), (3, 2, [0, 0, 1]),
                                             (2, 4, [0, 2]), (4, 4, [0, 1, 2, 3]), (5, 2, [0, 0, 0, 1, 1])])
def test_gpu_map_gives_blocks_of_neighbours(ndev, ngpus, want):
    assert _core.gpu_map(ndev, ngpus) == want


def test_gpu_map_balances_and_keeps_order():
    for ndev in range(1, 33):
        for ngpus in range(1, 9):
            m = _core.gpu_map(ndev, ngpus)
            assert m == sorted(m) and 0 <= m[0] and m[-1] < ngpus
            counts = [m.count(g) for g in range(ngpus)]
            used = [c for c in counts if c]
            assert max(used) - min(used) <= 1, (ndev, ngpus, counts)
            assert len(used) == min(ndev, ngpus)   # as many GPUs busy as can be


def test_gpu_map_without_a_gpu_is_refused():
    with pytest.raises(ValueError, match="no GPU"):
        _core.gpu_map(4, 0)
    with pytest.raises(ValueError, match="at least one logical device"):
        _core.gpu_map(0, 2)


def test_routes_same_gpu_peer_and_staged():
    gpu_of = [0, 0, 1, 2]
    # 3 GPUs: 1 reads 0's memory (peer), the others cannot reach each other
    peer = [0, 0, 0,
            1, 0, 0,
            0, 0, 0]
    assert _core.gpu_route(gpu_of, 0, 1, peer) == 0           # one GPU
    assert _core.gpu_route(gpu_of, 0, 2, peer) == 1           # GPU 1 reads GPU 0
    assert _core.gpu_route(gpu_of, 2, 0, peer) == 2           # GPU 0 cannot read GPU 1: staged
    assert _core.gpu_route(gpu_of, 0, 3, peer) == 2
    with pytest.raises(ValueError, match="mapped to GPU 2"):
        _core.gpu_route([0, 2], 0, 1, [0, 1, 1, 0])


# ---------------------------------------------------------------- 2. priorities
def test_plain_streams_keep_cudas_default_priority():
    assert _core.gpu_priorities([0, 0, 1], [0, 0, 0], 0, -5) == [0, 0, 0]


def test_priorities_are_ranked_per_gpu_from_the_lowest():
    # GPU 0: priorities 7 > 3 > -1; GPU 1: 3 alone (its lowest: the default)
    got = _core.gpu_priorities([0, 0, 0, 1], [3, 7, -1, 3], 0, -5)
    assert got == [-1, -2, 0, 0]


def test_priorities_beyond_the_range_share_the_greatest_and_keep_order():
    rng = np.random.default_rng(0)
    for _ in range(50):
        n = int(rng.integers(1, 12))
        gpu = rng.integers(0, 3, n).tolist()
        prio = rng.integers(-20, 20, n).tolist()
        got = _core.gpu_priorities(gpu, prio, 0, -3)
        assert all(-3 <= p <= 0 for p in got)
        for i in range(n):
            for j in range(n):
                if gpu[i] == gpu[j] and prio[i] > prio[j]:
                    assert got[i] <= got[j]          # higher runs first: a lower CUDA number
                if gpu[i] == gpu[j] and prio[i] == prio[j]:
                    assert got[i] == got[j]


def test_priority_range_upside_down_is_refused():
    with pytest.raises(ValueError, match="greatest must be <= least"):
        _core.gpu_priorities([0], [0], -5, 0)


# ---------------------------------------------------------------- 3. arenas
def test_arena_layout_puts_aligned_workspaces_after_the_buffers():
    off, ws, total = _core.gpu_arena_layout(1000, 3, 5000)
    assert off == 1024 and ws == 5120 and total == 1024 + 3 * 5120
    assert off % 256 == 0 and ws % 256 == 0
    assert _core.gpu_arena_layout(0, 1, 0)[2] == 256            # one allocation to offset from, even empty
    assert _core.gpu_arena_layout(4096, 1, 256) == (4096, 256, 4352)


def test_arena_layout_bad_input():
    with pytest.raises(ValueError, match="1 to 1024 streams"):
        _core.gpu_arena_layout(100, 0, 100)
    with pytest.raises(ValueError, match="out of range"):
        _core.gpu_arena_layout(-1, 1, 100)


# ---------------------------------------------------------------- 4. window geometry
def cudnn_reads(in_lo, skip, used, pad, out_n, k, s):
    """Global positions cuDNN reads for out_n outputs on rows [in_lo + skip, + used) padded by
    `pad` on both sides (None: padding), and the output count its formula gives."""
    count = (used + 2 * pad - k) // s + 1
    reads = []
    for o in range(out_n):
        for j in range(k):
            local = o * s + j - pad
            reads.append(in_lo + skip + local if 0 <= local < used else None)
    return count, reads


def true_reads(in_lo, in_n, out_lo, out_n, k, s, p):
    """What the worker's outputs read: the view's position, or None outside the view (padding)."""
    reads = []
    for o in range(out_lo, out_lo + out_n):
        for j in range(k):
            x = o * s + j - p
            reads.append(x if in_lo <= x < in_lo + in_n else None)
    return reads


def test_window_examples_from_the_file_comment():
    # kernel 3, stride 1, padding 1 over 32 rows: whole, top half, bottom half
    assert _core.gpu_window_dim(0, 32, 0, 32, 3, 1, 1) == (-1, 33, 0, 32, 1, 1, True)
    assert _core.gpu_window_dim(0, 17, 0, 16, 3, 1, 1) == (-1, 17, 0, 17, 1, 0, False)
    assert _core.gpu_window_dim(15, 17, 16, 16, 3, 1, 1) == (15, 33, 0, 17, 0, 1, False)
    # ResNet's stride-2 windows on an even size: padding 1 before, none after, and cuDNN's symmetric
    # padding 1 gives the same 56 outputs (reads -1 .. 111; its extra padded row 112 is read by none)
    assert _core.gpu_window_dim(0, 112, 0, 56, 3, 2, 1) == (-1, 112, 0, 112, 1, 0, True)


def test_window_geometry_matches_a_brute_force_walk():
    rng = np.random.default_rng(1)
    direct = padded = asym = 0
    for _ in range(3000):
        k, s, p = int(rng.integers(1, 6)), int(rng.integers(1, 4)), int(rng.integers(0, 3))
        size = int(rng.integers(k, 40))                     # the tensor's extent
        out_total = (size + 2 * p - k) // s + 1
        if out_total < 1:
            continue
        out_lo = int(rng.integers(0, out_total))
        out_n = int(rng.integers(1, out_total - out_lo + 1))
        need_lo, need_hi = out_lo * s - p, (out_lo + out_n - 1) * s - p + k
        # a view holding every read inside the tensor, maybe some rows more on either side
        in_lo = max(0, need_lo) - int(rng.integers(0, 3))
        in_hi = min(size, need_hi) + int(rng.integers(0, 3))
        in_lo = max(0, in_lo)
        in_hi = max(in_lo, min(size, in_hi))   # all padding: an empty view
        got = _core.gpu_window_dim(in_lo, in_hi - in_lo, out_lo, out_n, k, s, p)
        g_lo, g_hi, skip, used, pad_lo, pad_hi, is_direct = got
        assert (g_lo, g_hi) == (need_lo, need_hi)
        assert used + pad_lo + pad_hi == need_hi - need_lo
        want = true_reads(in_lo, in_hi - in_lo, out_lo, out_n, k, s, p)
        count = (used + 2 * pad_lo - k) // s + 1 if used + 2 * pad_lo >= k else 0
        assert is_direct == (used > 0 and pad_hi <= pad_lo and count == out_n)   # cuDNN's count, from scratch
        if pad_lo == pad_hi and used > 0:
            assert is_direct                  # symmetric padding is always direct
        if is_direct:                         # cuDNN's symmetric padding reads exactly these
            direct += 1
            asym += pad_hi < pad_lo
            count, reads = cudnn_reads(in_lo, skip, used, pad_lo, out_n, k, s)
            assert count == out_n
            assert reads == want
        else:                                 # padded copy: row r of it is global need_lo + r
            padded += 1
            reads = [need_lo + o * s + j if in_lo + skip <= need_lo + o * s + j < in_lo + skip + used else None
                     for o in range(out_n) for j in range(k)]
            assert reads == want
    assert direct > 100 and padded > 100 and asym > 20


def test_window_bad_input():
    with pytest.raises(ValueError, match="window"):
        _core.gpu_window_dim(0, 10, 0, 0, 3, 1, 1)
    with pytest.raises(ValueError, match="window"):
        _core.gpu_window_dim(0, 10, 0, 4, 3, 0, 1)


# ---------------------------------------------------------------- 5. events
def test_event_plan_counts_events_and_cross_gpu_waits():
    # streams 0, 1 on GPU 0, stream 2 on GPU 1; tasks 0..3
    ops = [RUN, RECORD, RUN, RECORD, WAIT, RUN, WAIT, WAIT, RUN]
    streams = [0, 0, 2, 2, 1, 1, 1, 0, 0]
    ids = [0, 0, 1, 1, 0, 2, 1, 1, 3]
    slots, events, waits, cross = _core.gpu_event_plan(ops, streams, ids, 4, [0, 0, 1])
    assert slots == [0, 1, -1, -1] and events == 2 and waits == 3 and cross == 2


def test_event_plan_refuses_a_wait_before_its_record():
    with pytest.raises(RuntimeError, match="waits for task 0, which no earlier command records"):
        _core.gpu_event_plan([RUN, WAIT, RECORD], [0, 1, 0], [0, 0, 0], 1, [0, 0])


def test_event_plan_refuses_a_record_of_a_task_the_stream_did_not_run():
    with pytest.raises(RuntimeError, match="has not run it"):
        _core.gpu_event_plan([RUN, RECORD], [0, 1], [0, 0], 1, [0, 0])


def record_runtime(g, plan):
    problem = make_problem(g, plan.devices, plan.options)
    return _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1, backend="record")


@pytest.mark.parametrize("seed", range(8))
def test_real_plans_record_every_wait_after_its_record(seed):
    from shared_graphs import mixed_graph

    g = mixed_graph()
    rng = np.random.default_rng(seed)
    ndev = int(rng.integers(2, 5))
    plan = random_plan(g, sw.DeviceGraph.cpu(ndev), rng, reductions=seed % 2 == 1)
    rt = record_runtime(g, plan)
    ntasks = len(sw.lower(plan).tasks)
    for ngpus in (1, ndev):
        gpu_of = _core.gpu_map(ndev, ngpus)
        for lst in (0, 1):
            ops, streams, ids, stream_device, priority = rt.recorded(lst)
            assert stream_device == list(range(ndev)) and priority == [0] * ndev   # one stream per device
            stream_gpu = [gpu_of[d] for d in stream_device]
            slots, events, waits, cross = _core.gpu_event_plan(ops, streams, ids, ntasks, stream_gpu)
            ran = [i for o, i in zip(ops, ids) if o == RUN]
            assert len(ran) == len(set(ran))                    # every task once
            if lst == 0:
                assert sorted(ran) == list(range(ntasks))       # a training step runs them all
            assert events == len({i for o, i in zip(ops, ids) if o == RECORD})
            assert waits == ops.count(WAIT)
            if ngpus == 1:
                assert cross == 0
            # a task runs on its own device's stream
            tg = sw.lower(plan)
            assert all(stream_device[s] == tg.tasks[i].device for o, s, i in zip(ops, streams, ids) if o == RUN)
        if ngpus > 1:
            assert cross > 0 or waits == 0


@pytest.mark.parametrize("seed", range(4))
def test_scheduled_streams_record_every_wait_after_its_record_and_rank_priorities(seed):
    """A critical-path schedule puts a device's tasks on several prioritized streams: the
    recorded list still issues every wait after its record, and each GPU's CUDA priorities
    keep the schedule's order."""
    from shared_graphs import mixed_graph

    g = mixed_graph()
    rng = np.random.default_rng(50 + seed)
    ndev = int(rng.integers(2, 5))
    plan = random_plan(g, sw.DeviceGraph.cpu(ndev), rng)
    sched = sw.schedule(plan, "critical_path")
    problem = make_problem(g, plan.devices, plan.options)
    rt = _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1, backend="record", streams=sched.stream_arrays())
    ops, streams, ids, stream_device, priority = rt.recorded(0)
    assert len(stream_device) > ndev                       # several streams on some device
    gpu_of = _core.gpu_map(ndev, 1)
    stream_gpu = [gpu_of[d] for d in stream_device]
    ntasks = len(sw.lower(plan).tasks)
    slots, events, waits, cross = _core.gpu_event_plan(ops, streams, ids, ntasks, stream_gpu)
    assert waits == ops.count(WAIT) and cross == 0
    cuda = _core.gpu_priorities(stream_gpu, priority, 0, -5)
    for i in range(len(priority)):
        for j in range(len(priority)):
            if priority[i] > priority[j]:
                assert cuda[i] <= cuda[j]


def test_the_record_backend_runs_nothing():
    g = sw.models.lenet5(batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    rt = record_runtime(g, plan)
    assert rt.backend == "record"
    x = np.zeros(g.ops[0].shape, np.float32)
    with pytest.raises(ValueError, match="runs none of it"):
        rt.forward([x] + [None] * (len(g.ops) - 1), np.zeros(4, np.int64))


# ---------------------------------------------------------------- 6. without a GPU
def test_backends_list_cuda_only_when_built():
    assert sw.backends() == ["cpu"] + (["cuda"] if sw.cuda.built() else [])


def test_trainer_on_cuda_names_what_is_missing():
    ok, reason = sw.cuda.status()
    if ok:
        pytest.skip("a GPU is visible: the error path cannot be seen here")
    g = sw.models.lenet5(batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    with pytest.raises(BackendUnavailableError) as e:
        sw.Trainer(g, plan, backend="cuda")
    msg = str(e.value)
    assert msg == reason
    if not sw.cuda.built():
        assert "not built" in msg and "SHARDWISE_CUDA=1" in msg
    else:
        assert any(w in msg for w in ("driver", "no GPU", "sees no GPU", "libraries"))
    with pytest.raises(BackendUnavailableError, match="CUDA"):
        sw.DeviceGraph.local_gpus(logical=4)
    with pytest.raises(sw.ConfigError, match="unknown backend 'tpu'"):
        sw.Trainer(g, plan, backend="tpu")


def test_the_core_refuses_cuda_with_the_same_reason():
    ok, _ = sw.cuda.status()
    if ok:
        pytest.skip("a GPU is visible")
    g = sw.models.lenet5(batch=4)
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(2))
    problem = make_problem(g, plan.devices, plan.options)
    with pytest.raises((ValueError, RuntimeError), match="driver|GPU|CUDA backend"):
        _core.Runtime(problem, *plan_arrays(plan), op_attrs(g), 1, backend="cuda")


def test_import_shardwise_loads_no_cuda_library():
    code = ("import shardwise, sys\n"
            "assert 'shardwise._cuda' not in sys.modules\n"
            "maps = open('/proc/self/maps').read()\n"
            "assert not any(n in maps for n in ('libcudart', 'libcudnn', 'libcublas', 'libcuda.so')), 'loaded'\n"
            "print('ok')\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert out.returncode == 0 and out.stdout.strip() == "ok", out.stderr


def test_info_prints_versions_and_why_no_gpu(capsys):
    from shardwise.cli.main import main

    assert main(["info"]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"shardwise {sw.__version__}")
    assert f"backends built: {', '.join(sw.backends())}" in out
    assert "NCCL" in out
    if sw.cuda.built() and not sw.cuda.status()[0]:
        assert "GPUs: none (" in out and "cuDNN 9." in out


# ---------------------------------------------------------------- the build's switch
@pytest.fixture
def build_cuda(monkeypatch):
    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import build_cuda

    return build_cuda


def test_build_switch_off_and_bad_values(build_cuda):
    assert build_cuda.find("0").ok is False and build_cuda.find("0").reason == "SHARDWISE_CUDA=0"
    with pytest.raises(SystemExit, match="auto, 0 or 1"):
        build_cuda.find("yes")


def test_build_without_nvcc_skips_in_auto_and_fails_when_required(build_cuda, monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))        # no nvcc anywhere
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    found = build_cuda.find("auto")
    assert found.ok is False and "nvcc not found" in found.reason
    with pytest.raises(SystemExit, match="SHARDWISE_CUDA=1 but .*nvcc not found"):
        build_cuda.find("1")


def test_build_with_nvcc_but_no_cudnn_names_the_wheels(build_cuda, monkeypatch, tmp_path):
    # a toolkit with nvcc and the CUDA runtime but neither cuDNN nor cuBLAS (CI's machine)
    (tmp_path / "bin").mkdir()
    (tmp_path / "include").mkdir()
    (tmp_path / "lib64").mkdir()
    nvcc = tmp_path / "bin" / "nvcc"
    nvcc.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc.chmod(0o755)
    (tmp_path / "include" / "cuda_runtime_api.h").write_text("")
    (tmp_path / "lib64" / "libcudart_static.a").write_text("")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path))
    monkeypatch.setattr(build_cuda, "_site_roots", lambda: [])
    monkeypatch.setattr(build_cuda, "_find_lib", lambda *a: None)
    found = build_cuda.find("auto")
    assert found.ok is False and "not cuDNN" in found.reason and "shardwise[cuda]" in found.reason


def test_command_line_training_on_cuda_names_what_is_missing(capsys):
    from shardwise.cli.main import main

    if sw.cuda.status()[0]:
        pytest.skip("a GPU is visible")
    pytest.importorskip("sklearn", reason="scikit-learn not installed (it bundles the digits): pip install scikit-learn")
    assert main(["train", "--backend", "cuda", "--devices", "gpu:4", "--epochs", "1", "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and sw.cuda.status()[1] in err
    assert main(["train", "--devices", "gpu:2", "--epochs", "1", "--quiet"]) == 2
    assert "add --backend cuda" in capsys.readouterr().err


def test_the_cuda_extra_and_the_build_requirements_name_the_same_wheels(monkeypatch):
    import re

    monkeypatch.syspath_prepend(os.path.join(ROOT, "tools"))
    import build_backend

    text = open(os.path.join(ROOT, "pyproject.toml"), encoding="utf-8").read()
    extra = re.search(r'^cuda = \[(.*)\]$', text, re.M).group(1)
    assert sorted(re.findall(r'"([^"]+)"', extra)) == sorted(build_backend.CUDA_WHEELS)
    monkeypatch.setattr(build_backend._orig, "get_requires_for_build_wheel", lambda cs=None: ["wheel"])
    monkeypatch.setenv("SHARDWISE_CUDA", "1")
    assert build_backend.get_requires_for_build_wheel() == ["wheel"] + build_backend.CUDA_WHEELS
    monkeypatch.setenv("SHARDWISE_CUDA", "auto")   # auto never downloads the wheels for the build
    assert build_backend.get_requires_for_build_wheel() == ["wheel"]


CUDA_KINDS = {"input", "conv2d", "pool2d", "relu", "add", "batchnorm2d", "concat", "flatten", "linear", "softmax",
              "parameter", "matmul", "lstm_cell", "lstm_hidden", "sigmoid", "tanh", "gelu", "silu", "leaky_relu"}


def test_the_cuda_backend_names_the_op_kinds_it_has_kernels_for():
    if not sw.cuda.built():
        assert sw.cuda.op_kinds() == frozenset()
        return
    assert sw.cuda.op_kinds() == CUDA_KINDS <= set(_core.CPU_OP_KINDS)


def test_a_graph_the_cuda_backend_cannot_run_is_refused_before_looking_for_a_gpu():
    if not sw.cuda.built():
        pytest.skip("the CUDA backend is not built here")
    missing = sorted(set(_core.CPU_OP_KINDS) - CUDA_KINDS)
    if "layer_norm" not in missing:
        pytest.skip("every CPU op kind runs on CUDA")
    g = sw.Graph("ln")
    x = g.input("x", (4, 6))
    g.softmax(g.linear(g.layer_norm(x, name="ln"), 3, name="fc"), name="prob")
    plan = sw.strategies.data_parallel(g, sw.DeviceGraph.cpu(1))
    with pytest.raises(sw.ConfigError, match="CUDA backend has no kernels for op kind 'layer_norm'"):
        sw.Trainer(g, plan, backend="cuda")


def test_default_cuda_workspace_holds_twice_the_largest_feature_map_within_an_eighth_of_memory():
    from shardwise.train.runtime import MIN_WORKSPACE, default_workspace_bytes

    g = sw.models.get("resnet50", batch=64)
    devices = sw.DeviceGraph()
    devices.add_device("gpu0", flops=60e12, memory=141e9)
    tg = sw.lower(sw.strategies.data_parallel(g, devices))
    stem = 64 * 64 * 112 * 112 * 4          # conv1's output, ResNet-50's largest feature map
    got = default_workspace_bytes(tg, devices)
    assert 2 * stem <= got < 2 * stem + (1 << 20) and got % (1 << 20) == 0
    small = sw.DeviceGraph()
    small.add_device("gpu0", flops=60e12, memory=2e9)   # an eighth: 250 MB
    capped = default_workspace_bytes(tg, small)
    assert 2e9 / 8 <= capped < 2e9 / 8 + (1 << 20) and capped < 2 * stem
    tiny = sw.lower(sw.strategies.data_parallel(sw.models.get("lenet5", batch=4), devices))
    assert default_workspace_bytes(tiny, devices) == MIN_WORKSPACE
