"""VGG-16 (Simonyan & Zisserman, 2014), configuration D, without batch normalization."""
from __future__ import annotations

from shardwise.models._common import check_args
from shardwise.graph import Graph


# Configuration D: output channels of the convolutions of each of the five stages.
_VGG16_STAGES = ((64, 64), (128, 128), (256, 256, 256), (512, 512, 512), (512, 512, 512))


def vgg16(batch: int = 512, num_classes: int = 1000) -> Graph:
    """VGG-16 on (N, 3, 224, 224) images, following ``torchvision.models.vgg16``.

    Layout: five stages of 3x3 p1 convolutions with ReLU (conv1_1..conv5_3:
    64, 64 | 128, 128 | 256 x3 | 512 x3 | 512 x3), each stage closed by a 2x2
    s2 max pool (pool1..pool5, -> 512x7x7), flatten, fc6 4096 + ReLU,
    fc7 4096 + ReLU, fc8 ``num_classes``, softmax "prob".  torchvision's
    adaptive average pool to 7x7 is the identity at 224x224 and is omitted,
    as is dropout (no parameters).

    Parameters: 138,357,544 for 1000 classes.
    """
    check_args("vgg16", batch, num_classes)
    g = Graph("vgg16")
    x = g.input("data", (batch, 3, 224, 224))
    for stage, widths in enumerate(_VGG16_STAGES, start=1):
        for k, width in enumerate(widths, start=1):
            x = g.conv2d(x, width, kernel=3, padding=1, activation="relu", name=f"conv{stage}_{k}")
        x = g.pool2d(x, kernel=2, stride=2, kind="max", name=f"pool{stage}")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 4096, activation="relu", name="fc6")
    x = g.linear(x, 4096, activation="relu", name="fc7")
    x = g.linear(x, num_classes, name="fc8")
    g.softmax(x, name="prob")
    return g
