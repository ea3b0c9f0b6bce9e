"""Weight sizes of the Wide ResNets of seed 004, beside its Table 1 (issue 5, point 5).

Seed 004 Table 1 gives "total size for weight tensors" of WResNet-<depth>-<width>.
Our count is the float32 parameters of sw.models.wide_resnet(depth, width).  The
table's figures are three times ours, in GiB, to within 3%: weights, their
gradients and the optimizer's momentum (the text's "WResNet-152-10 requires 22GB
for just its weight tensors" is our 21.7 GiB of weights alone).  The multi-layer
LSTMs of the table are not in the zoo yet (they need matrix products with weights
shared across timesteps).

    python benchmarks/tofu_models.py
"""
from __future__ import annotations

import sys

import shardwise as sw

TABLE_1_GB = {(50, 4): 4.2, (101, 4): 7.8, (152, 4): 10.5, (50, 6): 9.6, (101, 6): 17.1, (152, 6): 23.4,
              (50, 8): 17.1, (101, 8): 30.6, (152, 8): 41.7, (50, 10): 26.7, (101, 10): 47.7, (152, 10): 65.1}
GIB = 2 ** 30


def rows() -> list[tuple[int, int, int, float, float, float]]:
    out = []
    for (depth, width), paper in TABLE_1_GB.items():
        params = sw.models.wide_resnet(depth, width, batch=1).num_parameters()
        weights = params * 4 / GIB
        out.append((depth, width, params, weights, 3 * weights, paper))
    return out


def main() -> int:
    head = (f"{'model':<16} {'parameters':>14} {'weights GiB':>12} {'x3 GiB':>8} {'Table 1 GB':>11} "
            f"{'Table 1 / x3':>13}")
    print("# seed 004 Table 1 (total size for weight tensors) beside WResNet-<depth>-<width> here")
    print(head)
    print("-" * len(head))
    for depth, width, params, weights, triple, paper in rows():
        print(f"WResNet-{depth}-{width:<6} {params:>14,} {weights:12.2f} {triple:8.2f} {paper:11.1f} "
              f"{paper / triple:13.3f}")
    print("x3: weights + gradients + momentum; the paper's text gives 22 GB of weights for WResNet-152-10")
    return 0


if __name__ == "__main__":
    sys.exit(main())
