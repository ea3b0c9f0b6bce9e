"""Small graphs several test rooms train, plan and lower: every op kind in one graph, and dropout
at three places."""
from __future__ import annotations

import shardwise as sw


def mixed_graph(batch: int = 8) -> sw.Graph:
    """Every op kind: conv (fused ReLU, no bias), avg/max pool, concat, batchnorm, relu,
    a residual add, flatten, two linears and the softmax."""
    g = sw.Graph("mixed")
    x = g.input("x", (batch, 3, 8, 8))
    x = g.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="c1")
    a = g.conv2d(x, 4, kernel=1, name="a")
    b = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name="b")
    x = g.concat([a, b], axis=1, name="cat")
    x = g.batchnorm2d(x, name="bn")
    x = g.relu(x, name="r")
    y = g.conv2d(x, 8, kernel=3, padding=1, bias=False, name="c2")
    x = g.add(y, x, name="res")
    x = g.pool2d(x, kernel=2, kind="max", name="mp")
    x = g.flatten(x, name="fl")
    x = g.linear(x, 6, activation="relu", name="fc1")
    x = g.linear(x, 5, name="fc2")
    g.softmax(x, name="prob")
    return g


def dropout_graph(batch: int = 8, p: float = 0.4) -> sw.Graph:
    """Dropout on the input itself (its output is then a function of x and the mask alone: bit
    for bit the same under any plan), and after a conv and a linear layer."""
    g = sw.Graph("dropout")
    x = g.input("x", (batch, 3, 6, 6))
    x = g.dropout(x, p, seed=11, name="d0")
    x = g.conv2d(x, 4, kernel=3, padding=1, activation="relu", name="c")
    x = g.dropout(x, p, name="d1")
    x = g.flatten(x, name="fl")
    x = g.dropout(g.linear(x, 16, activation="relu", name="fc1"), 0.5, name="d2")
    g.softmax(g.linear(x, 5, name="fc2"), name="prob")
    return g
