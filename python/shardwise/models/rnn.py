"""A multi-layer LSTM unrolled over time, as the Tofu paper benchmarks (RNN-<layers>-<hidden>).

Every layer owns four gate weights, each a ``parameter`` of shape (input + hidden, hidden)
read by one ``matmul`` per timestep, so the weights are shared across timesteps:

    for t in steps, for l in layers:             # shapes for batch B, hidden H
        z = concat([x_t, h_{t-1}], axis=1)         # (B, E + H)   (E = H above layer 0)
        i, f, g, o = z @ W_i, z @ W_f, z @ W_g, z @ W_o     # (B, H) each
        c_t = lstm_cell(i, f, g, c_{t-1})          # (B, H)
        h_t = lstm_hidden(o, c_t)                  # (B, H), the next layer's x_t

Each step of each layer is built inside ``g.timestep(f"layer{l}")``, so Tofu's coarsening
gives the 7 ops of a layer's step one partition strategy across all steps.  The initial
states h_0 and c_0 are graph inputs (zeros), shared by the layers; the sequence arrives
as one (B, E) input per step.  A classifier (``linear`` + ``softmax``) reads the top
layer's last hidden state.  The CPU backend trains it: ``Trainer.step`` takes a dict
{"x0": (B, E), ..., "h0": (B, H), "c0": (B, H)} of every input op (docs/training.md).
"""
from __future__ import annotations

from shardwise.errors import ShapeError
from shardwise.graph import Graph, Tensor


def _positive(value: object, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ShapeError(f"rnn: {what} must be a positive int, got {value!r}")
    return value


def _lstm_step(g: Graph, x: Tensor, h: Tensor, c: Tensor, weights: dict[str, Tensor],
               prefix: str) -> tuple[Tensor, Tensor]:
    """One LSTM step: (x (B, E), h (B, H), c (B, H)) -> (h', c')."""
    z = g.concat([x, h], axis=1, name=f"{prefix}.concat")
    gates = {k: g.matmul(z, w, name=f"{prefix}.{k}") for k, w in weights.items()}
    c = g.lstm_cell(gates["i"], gates["f"], gates["g"], c, name=f"{prefix}.c")
    h = g.lstm_hidden(gates["o"], c, name=f"{prefix}.h")
    return h, c


def rnn(layers: int = 8, hidden: int = 4096, steps: int = 20, batch: int = 512,
        input_size: int | None = None, num_classes: int = 1000) -> Graph:
    """RNN-<layers>-<hidden> of the Tofu paper (Wang, Huang, Li, *Supporting Very Large Models
    using Automatic Dataflow Graph Partitioning*), section 6.1: a ``layers``-deep LSTM over ``steps``
    timesteps with ``hidden`` units, unrolled, weights shared across timesteps.

    Parameters: ``4 * hidden * (input_size + hidden)`` for layer 0 (``input_size``
    defaults to ``hidden``), ``8 * hidden**2`` per further layer, plus the classifier
    ``(hidden + 1) * num_classes``.  benchmarks/tofu_models.py prints the weight sizes
    beside Table 1 of that paper.
    """
    layers, hidden, steps = _positive(layers, "layers"), _positive(hidden, "hidden"), _positive(steps, "steps")
    batch, classes = _positive(batch, "batch"), _positive(num_classes, "num_classes")
    embed = hidden if input_size is None else _positive(input_size, "input_size")
    g = Graph(f"rnn{layers}_{hidden}")
    xs = [g.input(f"x{t}", (batch, embed)) for t in range(steps)]
    h0 = g.input("h0", (batch, hidden))
    c0 = g.input("c0", (batch, hidden))
    weights = []
    for layer in range(layers):
        fan_in = (embed if layer == 0 else hidden) + hidden
        weights.append({k: g.parameter((fan_in, hidden), name=f"layer{layer}.W_{k}") for k in "ifgo"})
    state = [(h0, c0)] * layers
    for t in range(steps):
        x = xs[t]
        for layer in range(layers):
            with g.timestep(f"layer{layer}"):
                h, c = _lstm_step(g, x, *state[layer], weights[layer], f"layer{layer}.t{t}")
            state[layer] = (h, c)
            x = h
    logits = g.linear(x, classes, name="fc")
    g.softmax(logits, name="softmax")
    return g
