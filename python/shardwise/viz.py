"""Pictures of strategies: the network drawn with each op's configuration.

    plan.plot("p.png")

Ops are placed by depth (longest path from an input) from left to right, the
ops of one depth stacked vertically; each box shows the op's name, its split
(``n=4 c=2``) and devices, and is coloured by its worker count.  matplotlib is
imported only here (``pip install matplotlib``).
"""
from __future__ import annotations

import io
import os
from typing import Any

from .atomic import write_atomically


def depths(graph) -> list[int]:
    """Longest distance from a graph input, per op (ops are in topological order)."""
    out = []
    for op in graph.ops:
        out.append(1 + max((out[i] for i in op.inputs), default=-1))
    return out


def save_figure(fig: Any, path: str) -> None:
    """Write a figure atomically, in the format its file name's extension names (png by default)."""
    buffer = io.BytesIO()
    fig.savefig(buffer, format=(os.path.splitext(path)[1][1:] or "png"))
    write_atomically(path, buffer.getvalue())


def plot_plan(plan, path: str | None = None, max_label: int = 18, wrap: int = 10):
    """Draw ``plan``'s graph with every op's configuration; returns the figure (saved if ``path``).
    Deep networks are folded into bands of ``wrap`` depth levels."""
    try:
        import matplotlib
        if path is not None:
            matplotlib.use("Agg", force=False)
        import matplotlib.pyplot as plt
        from matplotlib import cm, colors
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from None
    graph = plan.graph
    level = depths(graph)
    rows: dict[int, int] = {}
    slot = []
    for op, d in zip(graph.ops, level):
        slot.append(rows.get(d, 0))
        rows[d] = rows.get(d, 0) + 1
    band_height = max(rows.values()) + 1
    pos = [(d % wrap, r + (d // wrap) * band_height) for d, r in zip(level, slot)]
    width = min(max(level) + 1, wrap)
    used = max(y for _, y in pos) + 1
    fig, ax = plt.subplots(figsize=(min(4 + 1.6 * width, 60), min(1.5 + 0.8 * used, 40)))
    most = max(c.workers for c in plan.configs.values())
    norm = colors.LogNorm(vmin=1, vmax=max(most, 2))
    cmap = matplotlib.colormaps["viridis"]
    for op in graph.ops:
        x1, y1 = pos[op.index]
        for i in op.inputs:
            x0, y0 = pos[i]
            ax.plot([x0, x1], [-y0, -y1], color="0.7", lw=0.8, zorder=1)
    for op in graph.ops:
        x, y = pos[op.index]
        cfg = plan.configs[op.name]
        name = op.name if len(op.name) <= max_label else op.name[: max_label - 1] + "~"
        text = f"{name}\n{op.kind}\n{cfg.split_dims()} on {cfg.device_text()}"
        color = cmap(norm(cfg.workers))
        ax.text(x, -y, text, ha="center", va="center", fontsize=7, zorder=2,
                bbox=dict(boxstyle="round,pad=0.3", fc=color, ec="0.3", alpha=0.85))
    ax.set_xlim(-0.7, width - 0.3)
    ax.set_ylim(-max(y for _, y in pos) - 0.7, 0.7)
    ax.axis("off")
    sm = cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, fraction=0.02, pad=0.01, label="workers")
    ax.set_title(f"{plan.name} plan for {graph.name} on {plan.devices.name}: "
                 f"{plan.cost * 1e3:.2f} ms/iteration (Eq. 1)")
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
