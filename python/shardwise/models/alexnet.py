"""AlexNet in torchvision's single-tower layout (Krizhevsky, 2014, "One weird trick")."""
from __future__ import annotations

from shardwise.models._common import check_args
from shardwise.graph import Graph


def alexnet(batch: int = 512, num_classes: int = 1000) -> Graph:
    """AlexNet on (N, 3, 224, 224) images, following ``torchvision.models.alexnet``.

    Layout: conv1 64@11x11 s4 p2, pool1 max 3 s2, conv2 192@5x5 p2, pool2,
    conv3 384@3x3 p1, conv4 256@3x3 p1, conv5 256@3x3 p1, pool5 max 3 s2
    (-> 256x6x6), flatten, fc6 4096, fc7 4096, fc8 ``num_classes``, softmax;
    every conv and fc6/fc7 with ReLU.  torchvision's adaptive average pool to
    6x6 is the identity at 224x224 and is omitted, as is dropout (no parameters).

    Parameters: 61,100,840 for 1000 classes.
    """
    check_args("alexnet", batch, num_classes)
    g = Graph("alexnet")
    x = g.input("data", (batch, 3, 224, 224))
    x = g.conv2d(x, 64, kernel=11, stride=4, padding=2, activation="relu", name="conv1")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool1")
    x = g.conv2d(x, 192, kernel=5, padding=2, activation="relu", name="conv2")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool2")
    x = g.conv2d(x, 384, kernel=3, padding=1, activation="relu", name="conv3")
    x = g.conv2d(x, 256, kernel=3, padding=1, activation="relu", name="conv4")
    x = g.conv2d(x, 256, kernel=3, padding=1, activation="relu", name="conv5")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool5")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 4096, activation="relu", name="fc6")
    x = g.linear(x, 4096, activation="relu", name="fc7")
    x = g.linear(x, num_classes, name="fc8")
    g.softmax(x, name="softmax")
    return g
