"""LeNet-5 (LeCun et al., 1998), the classic small convolutional network on 32x32 images."""
from __future__ import annotations

from shardwise.models._common import check_args
from shardwise.graph import Graph


def lenet5(batch: int = 64, num_classes: int = 10) -> Graph:
    """LeNet-5 on (N, 1, 32, 32) images.

    Layout: conv1 6@5x5 + ReLU, pool1 max 2x2, conv2 16@5x5 + ReLU, pool2 max 2x2,
    flatten (400 features), fc1 120 + ReLU, fc2 84 + ReLU, fc3 ``num_classes``,
    softmax.  ReLU and max pooling replace the original tanh and subsampling
    layers, as in the usual modern rendition; the parameter count is the same.

    Parameters: 61,706 for 10 classes.
    """
    check_args("lenet5", batch, num_classes)
    g = Graph("lenet5")
    x = g.input("data", (batch, 1, 32, 32))
    x = g.conv2d(x, 6, kernel=5, activation="relu", name="conv1")
    x = g.pool2d(x, kernel=2, stride=2, kind="max", name="pool1")
    x = g.conv2d(x, 16, kernel=5, activation="relu", name="conv2")
    x = g.pool2d(x, kernel=2, stride=2, kind="max", name="pool2")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 120, activation="relu", name="fc1")
    x = g.linear(x, 84, activation="relu", name="fc2")
    x = g.linear(x, num_classes, name="fc3")
    g.softmax(x, name="softmax")
    return g
