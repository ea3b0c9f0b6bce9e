"""Searched GPT plans beside data parallelism and Megatron-LM's layout (issue 17, point 3).

Two 2-block GPTs on 4 and 8 V100s of one node (NVLink), with split reductions allowed:

* wide: d_model 4096, 32 heads, 256 tokens x batch 8: 201M parameters a block to synchronize
  against 32 MB of activations a layer; tensor parallelism should win;
* narrow: d_model 1024, 16 heads, 1,024 tokens x batch 8: the activations outweigh the 12.6M
  parameters a block; data parallelism should win.

For data parallelism, Megatron-LM's layout (``sw.models.megatron_spec`` through
``Plan.from_dict``) and the default search: Eq. 1 and the simulated iteration, then the searched
layout of the first block (which splits each op uses, on which devices) beside Megatron's.
Anchor: the layout of "Megatron-LM: Training Multi-Billion Parameter Language Models Using Model
Parallelism" (the MLP by columns then rows, attention by heads), which the search should find by
itself where it beats data parallelism.

    python benchmarks/gpt_plans.py > benchmarks/results/gpt_plans.txt
"""
from __future__ import annotations

import platform
import time

import shardwise as sw

OPTIONS = sw.CostOptions(reduction_splits=True)
MODELS = {"wide": dict(layers=2, d_model=4096, heads=32, seq=256, vocab=50304, batch=8),
          "narrow": dict(layers=2, d_model=1024, heads=16, seq=1024, vocab=50304, batch=8)}
BLOCK = ("ln_1", "attn.q", "attn.k", "attn.v", "attn.scores", "attn.probs", "attn", "attn.proj",
         "attn.residual", "ln_2", "mlp.fc", "mlp.gelu", "mlp.proj", "mlp.residual")


def simulated(plan: sw.Plan) -> float:
    return sw.simulate(plan, check_memory=False).iteration_time


def layout(config) -> str:
    return f"{config.split_dims()} on {config.device_text()}"


def main() -> None:
    print(f"# shardwise {sw.__version__}: GPT plans on one node of V100s; {platform.machine()}, "
          f"Python {platform.python_version()}; roofline costs")
    for name, shape in MODELS.items():
        g = sw.models.gpt(**shape)
        print(f"\n## {name} GPT {shape}, {g.num_parameters() / 1e6:.0f}M parameters")
        print(f"{'devices':>7}  {'plan':<10}{'Eq. 1 ms':>10}{'simulated ms':>14}{'vs data':>9}")
        for k in (4, 8):
            d = sw.DeviceGraph.cluster(1, k, device="V100")
            megatron = sw.Plan.from_dict(g, d, sw.models.megatron_spec(g, k), options=OPTIONS)
            data = sw.strategies.data_parallel(g, d, OPTIONS)
            t0 = time.perf_counter()
            plan = sw.search(g, d, options=OPTIONS)
            seconds = time.perf_counter() - t0
            base = simulated(data)
            for label, p in (("data", data), ("megatron", megatron), ("searched", plan)):
                t = simulated(p)
                print(f"{k:>7}  {label:<10}{p.cost * 1e3:>10.2f}{t * 1e3:>14.2f}{base / t:>8.2f}x")
            print(f"{'':>9}search {seconds:.2f} s; first block, searched | Megatron-LM:")
            for op in BLOCK:
                full = f"h.0.{op}"
                print(f"{'':>11}{op:<15}{layout(plan.configs[full]):<24}| {layout(megatron.configs[full])}")


if __name__ == "__main__":
    main()
