#!/usr/bin/env python3
"""doc_measures.py -- small measurements behind figures the docs quote that no benchmark prints.

Each subcommand prints a few labelled lines that tools/check_docs.py reads (its registry,
tools/doc_figures.py, names the subcommand as the command of those figures):

    python tools/doc_measures.py llama-sizes          # docs/transformers.md: sw.models.llama's parameters and ops
    python tools/doc_measures.py reduction-splits     # docs/cost-model.md: AlexNet on 4 P100s with reduction splits
    python tools/doc_measures.py resnet50-arenas      # docs/scheduling.md: arenas under fifo and critical_path
    python tools/doc_measures.py swap-stalls          # docs/memory.md: benchmarks/memory.py's stall rows (nothing written)
    python tools/doc_measures.py digits-seeds         # docs/training.md: examples/train_digits.py for seeds 0-11
    python tools/doc_measures.py llama13b-no-fit      # docs/memory.md: the nearest miss of Llama-13B on 8 and 64 H100s
    python tools/doc_measures.py capped-marginals     # docs/cost-model.md: GPT-2 small's relaxation on 1,024 H100s
    python tools/doc_measures.py llama-memory-search  # docs/memory.md: the 32-layer Llama searched on 64-1,024 H100s
    python tools/doc_measures.py populate-ahead       # docs/cost-model.md, memory.md: pages mapped ahead, off and on
    python tools/doc_measures.py footprint-gap        # docs/memory.md: the footprint against the arena and the buffers' sum
    python tools/doc_measures.py fused-rings          # docs/simulator.md: ResNet-50's rings fused and chunked on 64 H100s
    python tools/doc_measures.py kept-memory-plan     # docs/simulator.md: a replay reading the task graph's memory plan
    python tools/doc_measures.py tp-recompute         # docs/memory.md: recomputation under tensor parallelism
    python tools/doc_measures.py gpt2-recompute       # docs/memory.md: GPT-2 small on 8 V100s with recomputation
    python tools/doc_measures.py recompute-greedy-64  # docs/memory.md: sw.recompute_plan of a 32-layer Llama on 64 H100s
    python tools/doc_measures.py llama-1024-recompute # docs/memory.md: Llama-2-7B's shape, batch 512 x 4,096, on 1,024 H100s
    python tools/doc_measures.py conv-isa             # docs/cpu_kernels.md: the direct loops' GFLOP/s, AVX2 and AVX-512
    python tools/doc_measures.py conv-wide            # docs/cpu_kernels.md: direct against im2col on wide layers
    python tools/doc_measures.py pool-layers          # docs/cpu_kernels.md: max pooling on the scaled AlexNet's pools

Deterministic except digits-seeds' seconds and the kernel timings (conv-isa, conv-wide, pool-layers); the package must be importable.
"""
from __future__ import annotations

import argparse
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:   # the installed package, or a checkout built in place
    import shardwise as sw
except ImportError:
    sys.path.insert(0, os.path.join(ROOT, "python"))
    import shardwise as sw


def llama_sizes() -> None:
    """sw.models.llama's defaults (8 key/value heads) and Llama-2-7B itself (32)."""
    t0 = time.perf_counter()
    g = sw.models.llama()
    print(f"build {time.perf_counter() - t0:.3f} s")
    print(f"gqa {g.num_parameters()} parameters {len(g.op_names())} ops")
    print(f"mha {sw.models.llama(kv_heads=32).num_parameters()} parameters")


def reduction_splits() -> None:
    """AlexNet on 4 P100s of one node: the Eq. 1 optimum with and without reduction splits."""
    g = sw.models.alexnet()
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=4, device="P100")
    plain = sw.search(g, d, objective="eq1", progress=False)
    wider = sw.search(g, d, objective="eq1", progress=False, options=sw.CostOptions(reduction_splits=True))
    print(f"fc6 {wider['fc6'].split_dims()}; cheaper by {100 * (1 - wider.cost / plain.cost):.4f} %")


def resnet50_arenas() -> None:
    """ResNet-50 (batch 32) data parallel on 4 and 16 P100s: the arenas of the gradients' receiving
    device (device 0) and of another replica, under fifo (program order) and critical_path."""
    for n in (4, 16):
        g = sw.models.resnet50(batch=32)
        d = sw.DeviceGraph.cluster(nodes=n // 4, devices_per_node=4, device="P100")
        p = sw.strategies.data_parallel(g, d)
        fifo = [x.arena_bytes / 2**20 for x in sw.memory_plan(p).devices.values()]
        crit = [x.arena_bytes / 2**20 for x in sw.memory_plan(p, schedule=sw.schedule(p)).devices.values()]
        print(f"{n} P100s: receiving device {fifo[0]:.1f} -> {crit[0]:.1f} MiB; "
              f"another replica {fifo[1]:.1f} -> {crit[1]:.1f} MiB")


def swap_stalls() -> None:
    """benchmarks/memory.py's part 4 (the stall a swap plan reports), printed, its results file untouched."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    import memory   # benchmarks/memory.py
    for line in memory.stall_rows():
        print(line, flush=True)


def digits_seeds() -> None:
    """examples/train_digits.py's main for seeds 0-11 (each prints its accuracy and seconds)."""
    sys.path.insert(0, os.path.join(ROOT, "examples"))
    import train_digits
    for seed in range(12):
        train_digits.main(seed=seed, progress=False)


def llama13b_no_fit() -> None:
    """A 40-layer Llama with Llama-2-13B's widths (one sequence of 2,048 tokens a GPU, bf16) on
    one and on eight nodes of 8 H100s: no plan fits; the shortfall the error names."""
    import warnings

    for n in (8, 64):
        devices = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device="H100")
        graph = sw.models.llama(layers=40, d_model=5120, heads=40, kv_heads=40, ffn=13824, seq=2048, batch=n)
        options = sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                sw.search(graph, devices, options=options, progress=False)
                print(f"llama-13b on {n}: a plan fits")
            except sw.PlanDoesNotFitError as e:
                print(f"llama-13b on {n}: nearest miss {e.needed / 1e9:.2f} GB on device {e.device} of "
                      f"{e.available / 1e9:.2f} GB, proven {e.proven}")


def capped_marginals() -> None:
    """The staged search's relaxation of GPT-2 small (batch 8 a GPU, bf16) on 1,024 H100s: its
    partitions, the eliminations with every min-marginal and with them capped at the relaxation's
    own strategy's exact cost (as the search runs them), processor seconds, and how many are
    within the cap (equal in both: checked)."""
    import numpy as np
    from shardwise.planning.problem import make_problem, worker_counts

    n = 1024
    devices = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device="H100")
    graph = sw.models.gpt(vocab=50304, batch=8 * n)
    options = sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)
    problem = make_problem(graph, devices, options)
    problem.enumerate(np.asarray(worker_counts(n), np.int32), first_block_only=True)
    problem.build_tables(bounds=True)
    t0 = time.process_time()
    _, _, stats, capped = problem.search("elimination", 1e9, True, -1.0, 2e-9)
    t_capped = time.process_time() - t0
    t0 = time.process_time()
    _, _, _, full = problem.search("elimination", 1e9, True)
    t_full = time.process_time() - t0
    cap = stats["marginals_cap"]
    kept = sum(int(np.isfinite(m).sum()) for m in capped)
    assert kept == sum(int((m <= cap).sum()) for m in full)
    print(f"gpt2-small on {n}: {sum(len(m) for m in full)} partitions, {kept} within the cap")
    print(f"marginals: every one {t_full:.2f} s, capped {t_capped:.2f} s (processor time)")


def llama_memory_search() -> None:
    """sw.search of a 32-layer Llama with Llama-2-7B's widths (one sequence of 2,048 tokens a GPU,
    bf16, split reductions) on 64, 256 and 1,024 H100s under their memory, each in a fresh
    process: seconds waited (wall clock) and processor seconds (all threads), peak resident memory,
    the plan's Eq. 1 seconds; then ResNet-50 at minibatch 64 the same way (its Eq. 1 optimum fits:
    the memory plan is only checked); then what memory new to a process costs here, and the
    1,024-GPU search again right after 3 GB were touched once."""
    # a fresh process per search, on n // 8 nodes of 8 H100s (n = sys.argv[1])
    start = ("import resource, sys, time, warnings; import shardwise as sw; warnings.simplefilter('ignore'); "
             "n = int(sys.argv[1]); d = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device='H100'); ")
    llama = ("g = sw.models.llama(layers=32, kv_heads=32, ffn=11008, seq=2048, batch=n); "
             "o = sw.CostOptions(sync='ring', precision='bf16', reduction_splits=True); "
             "w0 = time.perf_counter(); t0 = time.process_time(); p = sw.search(g, d, options=o, progress=False); "
             "t = time.process_time() - t0; w = time.perf_counter() - w0; "
             "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6; "
             "print(f'llama on {n}: {w:.1f} s wall, {t:.1f} s processor, {rss:.2f} GB peak, '"
             "f'Eq. 1 {p.search_stats[\"searched_cost\"]:.5f} s')")
    # ResNet-50 at minibatch 64: its Eq. 1 optimum fits, so only its memory plan is checked
    resnet = ("g = sw.models.resnet50(batch=64); "
              "w0 = time.perf_counter(); t0 = time.process_time(); p = sw.search(g, d, objective='eq1', progress=False); "
              "t = time.process_time() - t0; w = time.perf_counter() - w0; "
              "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3; "
              "print(f'resnet50 on {n}: {w:.1f} s wall, {t:.1f} s processor, {rss:.0f} MB peak, '"
              "f'constrained {p.search_stats[\"memory\"][\"constrained\"]}')")
    for code in (llama, resnet):
        for n in (64, 256, 1024):
            print(_fresh_process(start + code, str(n)))
    # memory new to a virtual machine's guest can cost far more than on bare metal: the host backs
    # a page on its first touch (and takes idle memory back).  That cost beside the searches, and
    # the 1,024-GPU search again right after 3 GB were touched once (the guest's free memory
    # backed, as a machine's memory that has been in use is)
    touch = ("import time, numpy as np; a = np.empty({gb} << 30, np.uint8); t = time.perf_counter(); "
             "a[::4096] = 1; print(f'memory new to a process: {{(time.perf_counter() - t) / {gb}:.2f}} s per GB')")
    print(_fresh_process(touch.format(gb=1)))
    _fresh_process(touch.format(gb=3))
    print(_fresh_process(start + llama, "1024").replace("llama on 1024", "llama on 1024, memory warmed"))


def populate_ahead() -> None:
    """Pages of large arrays mapped ahead of their writes on other threads (_core.populate_ahead),
    off and on in turn, each in a fresh process: five pairs of Inception-v3's first Eq. 1 search
    on 4 x 4 P100s (milliseconds waited, peak resident memory), then two pairs of the 32-layer
    Llama's search on 1,024 H100s, each after the machine idled 25 s (the host of a virtual
    machine takes idle memory back, and backs it again at the guest's first touch)."""
    start = ("import os, resource, sys, time, warnings; import shardwise as sw; from shardwise import _core; "
             "warnings.simplefilter('ignore'); on = int(sys.argv[1]); _core.populate_ahead(on); ")
    inception = ("g = sw.models.get('inception_v3'); "
                 "d = sw.DeviceGraph.cluster(nodes=4, devices_per_node=4, device='P100'); "
                 "w0 = time.perf_counter(); p = sw.search(g, d, objective='eq1', progress=False); "
                 "w = time.perf_counter() - w0; rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e3; "
                 "print(f'inception {\"on\" if on else \"off\"}: {1e3 * w:.1f} ms wall, {rss:.0f} MB peak')")
    llama = ("n = 1024; d = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device='H100'); "
             "g = sw.models.llama(layers=32, kv_heads=32, ffn=11008, seq=2048, batch=n); "
             "o = sw.CostOptions(sync='ring', precision='bf16', reduction_splits=True); "
             "w0 = time.perf_counter(); p = sw.search(g, d, options=o, progress=False); "
             "w = time.perf_counter() - w0; rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6; "
             "print(f'llama on 1024 {\"on\" if on else \"off\"}: {w:.1f} s wall, {rss:.2f} GB peak')")
    walls: dict[str, list[float]] = {"off": [], "on": []}
    for _ in range(5):
        for on in ("0", "1"):
            line = _fresh_process(start + inception, on)
            print(line)
            walls["on" if on == "1" else "off"].append(float(line.split(": ")[1].split(" ms")[0]))
    print(f"inception mean: off {sum(walls['off']) / 5:.1f} ms, on {sum(walls['on']) / 5:.1f} ms")
    for _ in range(2):
        for on in ("0", "1"):
            time.sleep(25)
            print(_fresh_process(start + llama, on))


def footprint_gap() -> None:
    """The memory search's footprint (parameters, optimizer state, running statistics and the
    activations kept for the backward pass) against the memory plan's arena, on the device of the
    largest arena of the Eq. 1 optimum: VGG-16 on 4 K80s and Inception-v3 on 4 P100s (each at its
    default batch, memory not constrained); the buffers added up (the sufficient test's sum) over
    the arena on the zoo models on 4 P100s; and the processor time of that fit check of the Eq. 1
    optimum on 64 P100s (ResNet-50 and Inception-v3, a fresh lowering each)."""
    import warnings

    import numpy as np

    from shardwise.iteration.lower import lowered
    from shardwise.planning import search_memory

    warnings.simplefilter("ignore")

    def searched(name: str, nodes: int, per_node: int, device: str):
        g = sw.models.get(name)
        d = sw.DeviceGraph.cluster(nodes=nodes, devices_per_node=per_node, device=device)
        return sw.search(g, d, memory=False, progress=False)

    for name, device in (("vgg16", "K80"), ("inception_v3", "P100")):
        plan = searched(name, 1, 4, device)
        mp = sw.memory_plan(plan)
        x = max(mp.devices.values(), key=lambda v: v.arena_bytes)
        kept = x.activations_kept + sum(x.at_peak.get(k, 0) for k in ("param", "momentum", "running_stats"))
        print(f"{name} on 4 {device}s: arena {x.arena_bytes / 1e9:.2f} GB, footprint {kept / 1e9:.2f} GB, "
              f"on top {(x.arena_bytes - kept) / 1e9:.2f} GB")
    ratios = []
    for name in ("alexnet", "vgg16", "resnet50", "inception_v3"):
        plan = searched(name, 1, 4, "P100")
        summed = lowered(plan, rings="fused").buffer_totals()[0]
        arena = search_memory.arenas(plan)
        ratios.append(float(np.max(summed / arena)))
        print(f"{name} on 4 P100s: buffers added up over the arena {ratios[-1]:.2f}")
    print(f"buffers added up over the arena: {min(ratios):.1f} to {max(ratios):.1f}")
    for name in ("resnet50", "inception_v3"):
        plan = searched(name, 4, 16, "P100")
        limit = search_memory.budgets(plan.devices, True)
        t0 = time.process_time()
        search_memory.fits(plan, limit)
        print(f"{name} on 64 P100s: fit check {time.process_time() - t0:.3f} s processor")


def fused_rings() -> None:
    """ResNet-50 (64 samples a GPU) data parallel with ring all-reduce on 64 H100s, simulated with
    the rings fused and chunked: tasks replayed and processor seconds of sw.simulate (best of 2)."""
    import warnings

    from shardwise.iteration.lower import lowered

    warnings.simplefilter("ignore")
    d = sw.DeviceGraph.cluster(nodes=8, devices_per_node=8, device="H100")
    plan = sw.strategies.data_parallel(sw.models.resnet50(batch=64 * 64), d, options=sw.CostOptions(sync="ring"))
    for rings in ("fused", "chunked"):
        best = float("inf")
        for _ in range(2):
            t0 = time.process_time()
            sw.simulate(plan, rings=rings)
            best = min(best, time.process_time() - t0)
        print(f"{rings}: {lowered(plan, rings=rings).ntasks} tasks, simulate {best:.2f} s processor")


def tp_recompute() -> None:
    """A 4-layer Llama with Llama-2-13B's widths (8 sequences of 2,048 tokens, bf16) under
    Megatron-style tensor parallelism over one node of 8 H100s: the fullest arena keeping every
    feature map, recomputing attention and recomputing every map."""
    import warnings

    warnings.simplefilter("ignore")
    d = sw.DeviceGraph.cluster(nodes=1, devices_per_node=8, device="H100")
    g = sw.models.llama(layers=4, d_model=5120, heads=40, kv_heads=40, ffn=13824, seq=2048, batch=8)
    plan = sw.Plan.from_dict(g, d, sw.models.megatron_spec(g, 8),
                             options=sw.CostOptions(reduction_splits=True, precision="bf16"))
    for recompute in (None, "attention", "all"):
        arena = sw.memory_plan(sw.lower(plan, recompute=recompute)).peak_bytes
        print(f"recompute {recompute}: fullest arena {arena / 1e9:.2f} GB")


def _thread_ms(fn, repeat: int = 5) -> float:
    """Median thread CPU time of fn in ms after one untimed call: benchmarks/conv_layers.py's
    timer (the kernels run on the calling thread; CPU time leaves out the time other jobs of a
    shared machine hold the core)."""
    sys.path.insert(0, os.path.join(ROOT, "benchmarks"))
    from conv_layers import median_ms

    return median_ms(fn, repeat)


def _conv_calls(n: int, ci: int, co: int, h: int, k: int = 3, s: int = 1, p: int = 1):
    """The three convolution kernels on random tensors (batch n, ci -> co channels, h x h planes)."""
    import numpy as np
    from shardwise import _core
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, ci, h, h), dtype=np.float32)
    w = rng.standard_normal((co, ci, k, k), dtype=np.float32)
    ho = (h + 2 * p - k) // s + 1
    dy = rng.standard_normal((n, co, ho, ho), dtype=np.float32)
    gflop = 2 * n * co * ci * k * k * ho * ho / 1e9
    return gflop, (lambda: _core.conv2d_forward(x, None, w, None, None, None, None, dy.shape, s, p),
                   lambda: _core.conv2d_backward_data(w, None, dy, None, None, x.shape, k, s, p),
                   lambda: _core.conv2d_backward_weight(x, None, dy, None, w.shape, s, p, False))


def _machine_line() -> None:
    model = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")),
                 "unknown CPU") if os.path.exists("/proc/cpuinfo") else "unknown CPU"
    print(f"# {model}; OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', 'unset')}; "
          f"load average {os.getloadavg()[0]:.2f}")


def _each_isa(names):
    """Each instruction set of ``names`` this CPU has, set for the kernels while the caller's loop
    body runs ("<isa>: not on this CPU" printed for the others); the automatic choice after."""
    from shardwise import _core
    try:
        for isa in names:
            try:
                _core.conv_isa(isa)
            except ValueError:
                print(f"{isa}: not on this CPU")
                continue
            yield isa
    finally:
        _core.conv_isa("auto")


def conv_isa() -> None:
    """The direct loops' GFLOP/s (forward / data gradient / weight gradient), one thread, 3x3
    convolutions at batch 32, with each instruction set this CPU has."""
    from shardwise import _core
    _machine_line()
    _core.conv_algorithm("direct")
    try:
        for isa in _each_isa(("avx2", "avx512")):
            for ci, h in ((64, 16), (128, 8), (16, 32)):
                gflop, calls = _conv_calls(32, ci, ci, h)
                rates = " / ".join(f"{gflop / _thread_ms(f) * 1e3:.1f}" for f in calls)
                print(f"{isa} {ci}->{ci} {h}x{h}: {rates} GFLOP/s")
    finally:
        _core.conv_algorithm("auto")


WIDE = ((32, 128, 8), (64, 192, 7), (32, 256, 8), (32, 512, 2))     # (batch, channels, plane), 3x3


def conv_wide() -> None:
    """Direct loops against im2col + GEMM on wide 3x3 layers, thread CPU ms of fwd / dx / dw: the
    AVX2 loops with OpenBLAS's Haswell kernels and the AVX-512 loops with its SkylakeX kernels
    (the pairs an AVX2 and an AVX-512 machine run; the GEMM's kernels are chosen at load time,
    so each pair runs in a process of its own)."""
    import subprocess
    for isa, core in (("avx2", "Haswell"), ("avx512", "SkylakeX")):
        env = dict(os.environ, OPENBLAS_CORETYPE=core, DOC_MEASURES_ISA=isa)
        out = subprocess.run([sys.executable, os.path.abspath(__file__), "conv-wide-rows"], env=env,
                             capture_output=True, text=True)
        print(out.stdout, end="", flush=True)
        if out.returncode:
            print(f"{isa}: {out.stderr.strip().splitlines()[-1] if out.stderr.strip() else 'failed'}")


def conv_wide_rows() -> None:
    """conv-wide's rows for the instruction set in $DOC_MEASURES_ISA (run by conv-wide)."""
    from shardwise import _core
    _machine_line()
    try:
        for isa in _each_isa((os.environ.get("DOC_MEASURES_ISA", "auto"),)):
            for n, c, h in WIDE:
                _, calls = _conv_calls(n, c, c, h)
                cells = []
                for algorithm in ("direct", "im2col"):
                    _core.conv_algorithm(algorithm)
                    cells.append(" / ".join(f"{_thread_ms(f):.1f}" for f in calls))
                print(f"{isa} {c}->{c} {h}x{h} batch {n}: direct {cells[0]} against im2col {cells[1]} ms")
    finally:
        _core.conv_algorithm("auto")


def pool_layers() -> None:
    """Max pooling (3 x 3, stride 2) on the scaled AlexNet's three pools at batch 64, thread CPU ms
    of the forward and backward pass, with the vector lanes of each instruction set, and PyTorch's
    (one thread) when it is installed."""
    import numpy as np
    from shardwise import _core
    _machine_line()
    rng = np.random.default_rng(0)
    z = (0, 0, 0, 0)
    for isa in _each_isa(("avx512", "avx2")):
        for name, c, h in (("pool1", 64, 31), ("pool2", 128, 15), ("pool5", 128, 7)):
            x = rng.standard_normal((64, c, h, h), dtype=np.float32)
            ho = (h - 3) // 2 + 1
            dy = rng.standard_normal((64, c, ho, ho), dtype=np.float32)
            fwd = _thread_ms(lambda: _core.pool2d_forward("max", x, z, z, dy.shape, (3, 3), (2, 2), (0, 0)), 9)
            bwd = _thread_ms(lambda: _core.pool2d_backward("max", x, z, dy, z, z, x.shape, (3, 3), (2, 2), (0, 0)), 9)
            print(f"{isa} {name} {c}x{h}x{h}->{ho}x{ho}: forward {fwd:.2f} ms, backward {bwd:.2f} ms")
    try:
        import torch
    except ImportError:
        return
    torch.set_num_threads(1)   # PyTorch keeps the argmax indices from the forward pass for its backward pass
    for name, c, h in (("pool1", 64, 31), ("pool2", 128, 15), ("pool5", 128, 7)):
        x = torch.randn(64, c, h, h)
        y, idx = torch.nn.functional.max_pool2d(x, 3, 2, return_indices=True)
        dy = torch.randn_like(y)
        fwd = _thread_ms(lambda: torch.nn.functional.max_pool2d(x, 3, 2, return_indices=True), 9)
        bwd = _thread_ms(lambda: torch.ops.aten.max_pool2d_with_indices_backward(dy, x, [3, 3], [2, 2], [0, 0],
                                                                                  [1, 1], False, idx), 9)
        print(f"torch {name}: forward with indices {fwd:.2f} ms, backward {bwd:.2f} ms")


def gpt2_recompute() -> None:
    """GPT-2 small at batch 64 x 1,024 tokens on one node of 8 V100s (split reductions allowed):
    sw.search(recompute=True) (nothing fits without): the ops it recomputes, the fullest arena
    with and without them, the simulated iteration with and without the recomputes; and data
    parallelism recomputing attention alone against keeping everything."""
    import warnings

    from shardwise.iteration.memory import memory_plan

    warnings.simplefilter("ignore")
    g = sw.models.gpt(batch=64)
    d = sw.DeviceGraph.cluster(1, 8, device="V100")
    p = sw.search(g, d, options=sw.CostOptions(reduction_splits=True), progress=False, recompute=True)
    r = p.search_stats["memory"]["recompute"]
    kept = memory_plan(p).peak_bytes
    with_ = sw.simulate(sw.lower(p, recompute=r["ops"]), check_memory=False).iteration_time
    without = sw.simulate(p, check_memory=False).iteration_time
    print(f"searched: {len(r['ops'])} ops recomputed, fullest arena {max(r['peak_bytes'].values()) / 1e9:.2f} GB "
          f"({kept / 1e9:.2f} GB keeping everything); simulated {with_:.3f} s ({without:.3f} s without the recomputes)")
    dp = sw.strategies.data_parallel(g, d)
    att = memory_plan(sw.lower(dp, recompute="attention")).peak_bytes
    print(f"data parallel: recompute attention {att / 1e9:.2f} GB ({memory_plan(dp).peak_bytes / 1e9:.2f} GB keeping everything)")


def kept_memory_plan() -> None:
    """A replay after the memory plan of the same task graph (kept) against a replay of a graph
    lowered afresh (which plans memory first): Megatron x data parallelism (tensor parallel in a
    node) of the 32-layer Llama with Llama-2-7B's widths, a sequence of 2,048 tokens a GPU, on
    1,024 H100s, rings as the simulator lowers them; processor seconds."""
    import warnings

    from shardwise.iteration.lower import TaskGraph, lowered, ring_detail
    from shardwise.iteration.simulate import iteration_time

    warnings.simplefilter("ignore")
    n = 1024
    d = sw.DeviceGraph.cluster(nodes=n // 8, devices_per_node=8, device="H100")
    g = sw.models.llama(layers=32, kv_heads=32, ffn=11008, seq=2048, batch=n)
    o = sw.CostOptions(sync="ring", precision="bf16", reduction_splits=True)
    p = sw.Plan.from_dict(g, d, sw.models.llama_megatron_dp_spec(g, 8, n // 8), options=o)
    rings = ring_detail(p, "auto")
    times = {}
    for kept in (False, True):
        handle = lowered(p, rings=rings)
        if kept:
            handle.memory_plan()
        t0 = time.process_time()
        seconds, tasks, _ = iteration_time(TaskGraph(plan=p, handle=handle, rings=rings))
        times[kept] = time.process_time() - t0
    print(f"{tasks} tasks, simulated {seconds:.4f} s; replay {times[False]:.2f} s planning memory, "
          f"{times[True]:.2f} s on the kept memory plan")


def _fresh_process(code: str, *args: str) -> str:
    """The standard output of ``code`` run by a fresh Python process on this tree's package."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python") + os.pathsep + os.environ.get("PYTHONPATH", ""))
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, env=env,
                          check=True).stdout.strip()


def recompute_greedy_64() -> None:
    """sw.recompute_plan of Megatron x data (8 x 8) of the 32-layer Llama with Llama-2-7B's widths
    (a sequence of 2,048 tokens a GPU, bf16) on 64 H100s under 30 GB a device: what it chose, its
    memory plans, processor seconds and peak resident memory, in a fresh process."""
    code = ("import resource, time, warnings; import shardwise as sw; warnings.simplefilter('ignore'); "
            "d = sw.DeviceGraph.cluster(nodes=8, devices_per_node=8, device='H100'); "
            "g = sw.models.llama(layers=32, kv_heads=32, ffn=11008, seq=2048, batch=64); "
            "o = sw.CostOptions(sync='ring', precision='bf16', reduction_splits=True); "
            "p = sw.Plan.from_dict(g, d, sw.models.llama_megatron_dp_spec(g, 8, 8), options=o); "
            "t0 = time.process_time(); rp = sw.recompute_plan(p, '30GB'); t = time.process_time() - t0; "
            "rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6; "
            "print(f'fits {rp.fits}: {len(rp.ops)} ops recomputed, {rp.evaluations} memory plans, fullest arena '"
            "f'{max(rp.unrecomputed_peak.values()) / 1e9:.2f} -> {max(rp.peak_bytes.values()) / 1e9:.2f} GB'); "
            "print(f'{t:.1f} s processor, {rss:.2f} GB peak')")
    print(_fresh_process(code))


def llama_1024_recompute() -> None:
    """sw.search(recompute=True) of a 32-layer Llama with Llama-2-7B's widths and grouped-query
    attention (8 key/value heads), batch 512 x 4,096 tokens, bf16, on 128 nodes of 8 H100s: the
    plan it returns and its recomputation, processor seconds and peak resident memory, in a fresh
    process (about ten minutes here)."""
    code = ("import resource, time, warnings; import shardwise as sw; warnings.simplefilter('ignore'); "
            "d = sw.DeviceGraph.cluster(nodes=128, devices_per_node=8, device='H100'); "
            "g = sw.models.llama(layers=32, d_model=4096, heads=32, kv_heads=8, seq=4096, vocab=32000, batch=512); "
            "t0 = time.process_time(); p = sw.search(g, d, precision='bf16', recompute=True, progress=False); "
            "t = time.process_time() - t0; r = p.search_stats['memory']['recompute']; "
            "print(f\"plan {r['plan']!r}: {len(r['ops'])} ops recomputed, fullest arena \""
            "f\"{max(r['peak_bytes'].values()) / 1e9:.2f} GB ({max(r['unrecomputed_peak'].values()) / 1e9:.2f} GB \""
            "f\"keeping everything)\"); "
            "print(f'{t:.0f} s processor, {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1e6:.2f} GB peak')")
    print(_fresh_process(code))


MEASURES = {"llama-sizes": llama_sizes, "reduction-splits": reduction_splits, "resnet50-arenas": resnet50_arenas,
            "swap-stalls": swap_stalls, "digits-seeds": digits_seeds, "llama13b-no-fit": llama13b_no_fit,
            "capped-marginals": capped_marginals, "llama-memory-search": llama_memory_search,
            "populate-ahead": populate_ahead,
            "footprint-gap": footprint_gap, "fused-rings": fused_rings, "kept-memory-plan": kept_memory_plan,
            "tp-recompute": tp_recompute, "conv-isa": conv_isa, "conv-wide": conv_wide,
            "conv-wide-rows": conv_wide_rows, "pool-layers": pool_layers, "gpt2-recompute": gpt2_recompute,
            "recompute-greedy-64": recompute_greedy_64, "llama-1024-recompute": llama_1024_recompute}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("measure", choices=sorted(MEASURES))
    MEASURES[ap.parse_args(argv).measure]()
    return 0


if __name__ == "__main__":
    sys.exit(main())
