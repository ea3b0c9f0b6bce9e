"""Sharded optimizer state (``sync="zero"``) beside data parallelism, Megatron-LM's layout and the
searched plan, for GPT-2 small trained with Adam on one node of V100s.

For each plan: Eq. 1 and the simulated iteration (ms), the bytes moved per iteration, and from the
memory plan of Adam (two state buffers per parameter slice) the largest optimizer state and the
largest peak of any device.  ``zero`` is data parallelism with the optimizer state sharded as stage
1 of "ZeRO: Memory Optimizations Toward Training Trillion Parameter Models" describes (the ring's
reduce-scatter, each chunk updated by one replica, an allgather of the updated weights): the same
bytes as ``data`` (a ring all-reduce), 1/k of its optimizer state.  ``searched, zero`` is the
search run with ``sync="zero"``: its replicated weights shard their state too.

    python benchmarks/zero_state.py > benchmarks/results/zero_state.txt
"""
from __future__ import annotations

import platform

import shardwise as sw

RING = sw.CostOptions(sync="ring")
ZERO = sw.CostOptions(sync="zero")
ADAM_STATE = 2


def row(label: str, plan: sw.Plan) -> str:
    sim = sw.simulate(plan, check_memory=False)
    mp = sw.memory_plan(plan, optimizer_state=ADAM_STATE)
    state = max(mp.devices[d].optimizer_state for d in range(len(plan.devices)))
    peak = max(mp.devices[d].peak_bytes for d in range(len(plan.devices)))
    return (f"{label:<16}{plan.cost * 1e3:>10.2f}{sim.iteration_time * 1e3:>14.2f}{sim.bytes_moved / 1e9:>10.2f}"
            f"{state / 1e6:>16.1f}{peak / 1e9:>10.2f}")


def main() -> None:
    g = sw.models.gpt(vocab=50304, batch=8)   # the vocabulary padded to a multiple of 128, as Megatron-LM does
    print(f"# shardwise {sw.__version__}: GPT-2 small ({g.num_parameters() / 1e6:.0f}M parameters, lm_head "
          f"untied, vocabulary padded to 50,304), batch 8 x 1,024 tokens, Adam, on one node of V100s; "
          f"{platform.machine()}, Python {platform.python_version()}; roofline costs")
    for k in (4, 8):
        d = sw.DeviceGraph.parse(str(k), device="V100")
        plans = [("data (ring)", sw.strategies.data_parallel(g, d, RING)),
                 ("zero", sw.strategies.data_parallel(g, d, ZERO))]
        try:
            plans.append(("megatron", sw.Plan.from_dict(g, d, sw.models.megatron_spec(g, k), options=RING)))
        except (sw.ConfigError, ValueError) as e:   # where the heads do not split k ways
            print(f"# megatron on {k}: {e}")
        plans += [("searched, ring", sw.search(g, d, sync="ring", progress=False)),
                  ("searched, zero", sw.search(g, d, sync="zero", progress=False))]
        print(f"\n## {k} devices\n{'plan':<16}{'Eq. 1 ms':>10}{'simulated ms':>14}{'moved GB':>10}"
              f"{'opt. state MB':>16}{'peak GB':>10}   (state and peak: the largest of any device)")
        for label, plan in plans:
            print(row(label, plan))


if __name__ == "__main__":
    main()
