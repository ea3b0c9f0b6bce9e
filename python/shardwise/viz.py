"""Pictures of strategies: the network drawn with each op's configuration.

    plan.plot("p.png")

Ops are placed by depth (longest path from an input) from top to bottom, the
boxes of one depth side by side; each box shows an op's (or a chain of ops split
alike) name, its split (``n=4 c=2``) and devices, and is coloured by its worker
count.  matplotlib is imported only here (``pip install matplotlib``), and only
as ``matplotlib.figure.Figure``: pyplot and the backend are left alone.
"""
from __future__ import annotations

import io
import os
from typing import Any

from shardwise.atomic import write_atomically


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


def plan_boxes(plan) -> list[list[int]]:
    """The boxes :func:`plot_plan` draws: op indices, in topological order.  A chain of ops
    (each the only consumer of the one before, which is its only data input) that share one
    configuration, e.g. convolution, batch norm and ReLU split alike, is one box."""
    graph = plan.graph
    consumers = [0] * len(graph.ops)
    for op in graph.ops:
        for i in op.inputs:
            consumers[i] += 1
    box_of: list[int] = []
    boxes: list[list[int]] = []
    for op in graph.ops:
        if len(op.inputs) == 1:
            prev = op.inputs[0]
            same = str(plan.configs[graph.ops[prev].name]) == str(plan.configs[op.name])
            if consumers[prev] == 1 and same and boxes[box_of[prev]][-1] == prev:
                box_of.append(box_of[prev])
                boxes[box_of[prev]].append(op.index)
                continue
        box_of.append(len(boxes))
        boxes.append([op.index])
    return boxes


def _box_text(plan, ops: list[int], max_label: int) -> str:
    graph = plan.graph

    def short(name: str) -> str:
        return name if len(name) <= max_label else name[: max_label - 1] + "~"

    first, last = graph.ops[ops[0]], graph.ops[ops[-1]]
    cfg = plan.configs[first.name]
    where = f"{cfg.split_dims()} on {cfg.device_text()}"
    if len(ops) == 1:
        return f"{short(first.name)}\n{first.kind}\n{where}"
    kinds = " > ".join(dict.fromkeys(graph.ops[i].kind for i in ops))
    common = os.path.commonprefix([first.name, last.name])
    common = common[: common.rfind(".") + 1]   # a shared module path ("Mixed_5b.") is said once
    return f"{short(first.name)} .. {short(last.name[len(common):])}\n{len(ops)} ops: {kinds}\n{where}"


def plot_plan(plan, path: str | None = None, max_label: int = 24):
    """Draw ``plan``'s graph with every op's configuration; returns the figure (saved if ``path``).

    The network runs top to bottom, one row per depth, branches side by side; chains of ops
    split alike share a box (:func:`plan_boxes`), so Inception-v3's 315 ops fit in about 120
    boxes and no row wraps.  The figure is a plain matplotlib ``Figure``: making it never
    touches pyplot or the backend, so in a notebook it shows once (as the cell's value) and
    later plots still show."""
    try:
        import matplotlib
        from matplotlib import cm, colors
        from matplotlib.figure import Figure
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install matplotlib") from None
    graph = plan.graph
    boxes = plan_boxes(plan)
    box_of = {i: b for b, ops in enumerate(boxes) for i in ops}
    level: list[int] = []
    for ops in boxes:
        inputs = {box_of[i] for k in ops for i in graph.ops[k].inputs} - {len(level)}
        level.append(1 + max((level[b] for b in inputs), default=-1))
    per_row: dict[int, int] = {}
    slot = []
    for d in level:
        slot.append(per_row.get(d, 0))
        per_row[d] = per_row.get(d, 0) + 1
    widest = max(per_row.values())
    pos = [(s - (per_row[d] - 1) / 2, d) for s, d in zip(slot, level)]
    rows = max(level) + 1
    title = (f"{plan.name} plan for {graph.name} on {plan.devices.name}\n"
             f"{plan.cost * 1e3:.2f} ms/iteration (Eq. 1)")
    # wide enough for the boxes and for the title's longer line (about 0.1 inch a character at 12 pt)
    width = max(min(3 + 2.4 * widest, 40), 1.0 + 0.1 * max(len(line) for line in title.splitlines()))
    fig = Figure(figsize=(width, 1.5 + 0.9 * rows))
    ax = fig.subplots()
    most = max(c.workers for c in plan.configs.values())
    norm = colors.LogNorm(vmin=1, vmax=max(most, 2))
    cmap = matplotlib.colormaps["viridis"]
    for b, ops in enumerate(boxes):
        x1, y1 = pos[b]
        for src in sorted({box_of[i] for k in ops for i in graph.ops[k].inputs} - {b}):
            x0, y0 = pos[src]
            ax.plot([x0, x1], [-y0, -y1], color="0.7", lw=0.8, zorder=1)
    for b, ops in enumerate(boxes):
        x, y = pos[b]
        color = cmap(norm(plan.configs[graph.ops[ops[0]].name].workers))
        ax.text(x, -y, _box_text(plan, ops, max_label), ha="center", va="center", fontsize=7, zorder=2,
                bbox=dict(boxstyle="round,pad=0.3", fc=color, ec="0.3", alpha=0.85))
    ax.set_xlim(-(widest - 1) / 2 - 0.7, (widest - 1) / 2 + 0.7)
    ax.set_ylim(-rows + 0.3, 0.7)
    ax.axis("off")
    bar = fig.colorbar(cm.ScalarMappable(norm=norm, cmap=cmap), ax=ax, fraction=0.02, pad=0.01, label="workers")
    counts = sorted({c.workers for c in plan.configs.values()})
    bar.ax.minorticks_off()
    bar.set_ticks(counts, labels=[str(c) for c in counts])
    ax.set_title(title)
    fig.tight_layout()
    if path is not None:
        save_figure(fig, path)
    return fig
