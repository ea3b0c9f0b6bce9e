"""Scaled-down AlexNet, VGG, ResNet-18 and Inception for training on CPU workers.

They keep the structure of the full models (the op kinds, branches, residual
additions and batchnorms the planner and the executor must handle) at sizes
that train in seconds: 32x32 or 64x64 inputs, 10 classes, a fraction of the
channels.  Used by the numerics tests and benchmarks/train_throughput.py.
"""
from __future__ import annotations

from shardwise.models._common import check_args
from shardwise.graph import Graph, Tensor


def alexnet_small(batch: int = 64, num_classes: int = 10) -> Graph:
    """AlexNet's shape on 64x64 images: 5x5/2 conv, max pools 3/2, three 3x3 convs, two fc
    (9.4 GFLOP forward for 64 images: compute-bound, as the throughput benchmark wants)."""
    check_args("alexnet_small", batch, num_classes)
    g = Graph("alexnet_small")
    x = g.input("data", (batch, 3, 64, 64))
    x = g.conv2d(x, 64, kernel=5, stride=2, padding=2, activation="relu", name="conv1")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool1")
    x = g.conv2d(x, 128, kernel=5, padding=2, activation="relu", name="conv2")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool2")
    x = g.conv2d(x, 192, kernel=3, padding=1, activation="relu", name="conv3")
    x = g.conv2d(x, 128, kernel=3, padding=1, activation="relu", name="conv4")
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="pool5")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 512, activation="relu", name="fc6")
    x = g.linear(x, num_classes, name="fc8")
    g.softmax(x, name="prob")
    return g


def vgg_small(batch: int = 64, num_classes: int = 10) -> Graph:
    """VGG's pattern on 32x32 images: stages of 3x3 convs (16, 32, 64, 64 channels) and 2x2 max pools."""
    check_args("vgg_small", batch, num_classes)
    g = Graph("vgg_small")
    x = g.input("data", (batch, 3, 32, 32))
    for stage, (width, convs) in enumerate([(16, 2), (32, 2), (64, 2), (64, 2)], start=1):
        for k in range(1, convs + 1):
            x = g.conv2d(x, width, kernel=3, padding=1, activation="relu", name=f"conv{stage}_{k}")
        x = g.pool2d(x, kernel=2, stride=2, kind="max", name=f"pool{stage}")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, 128, activation="relu", name="fc6")
    x = g.linear(x, num_classes, name="fc8")
    g.softmax(x, name="prob")
    return g


def _basic_block(g: Graph, x: Tensor, planes: int, stride: int, name: str) -> Tensor:
    out = g.conv2d(x, planes, kernel=3, stride=stride, padding=1, bias=False, name=f"{name}.conv1")
    out = g.relu(g.batchnorm2d(out, name=f"{name}.bn1"), name=f"{name}.relu1")
    out = g.conv2d(out, planes, kernel=3, padding=1, bias=False, name=f"{name}.conv2")
    out = g.batchnorm2d(out, name=f"{name}.bn2")
    if stride != 1 or x.shape[1] != planes:
        x = g.conv2d(x, planes, kernel=1, stride=stride, bias=False, name=f"{name}.downsample.0")
        x = g.batchnorm2d(x, name=f"{name}.downsample.1")
    return g.relu(g.add(out, x, name=f"{name}.add"), name=f"{name}.relu")


def resnet18_small(batch: int = 64, num_classes: int = 10, width: int = 16) -> Graph:
    """ResNet-18's BasicBlocks (2, 2, 2, 2) at ``width`` .. 8x``width`` channels on 32x32 images
    (CIFAR-style 3x3 stem, no max pool), global average pool, fc."""
    check_args("resnet18_small", batch, num_classes)
    g = Graph("resnet18_small")
    x = g.input("data", (batch, 3, 32, 32))
    x = g.conv2d(x, width, kernel=3, padding=1, bias=False, name="conv1")
    x = g.relu(g.batchnorm2d(x, name="bn1"), name="relu")
    for stage, blocks in enumerate([2, 2, 2, 2], start=1):
        planes = width * 2 ** (stage - 1)
        for b in range(blocks):
            stride = 2 if stage > 1 and b == 0 else 1
            x = _basic_block(g, x, planes, stride, f"layer{stage}.{b}")
    x = g.pool2d(x, kernel=x.shape[2], kind="avg", name="avgpool")
    x = g.linear(g.flatten(x, name="flatten"), num_classes, name="fc")
    g.softmax(x, name="prob")
    return g


def _conv_bn(g: Graph, x: Tensor, out: int, name: str, kernel=1, padding=0, stride=1) -> Tensor:
    x = g.conv2d(x, out, kernel=kernel, padding=padding, stride=stride, bias=False, name=f"{name}.conv")
    return g.relu(g.batchnorm2d(x, name=f"{name}.bn"), name=f"{name}.relu")


def _inception_block(g: Graph, x: Tensor, name: str, width: int) -> Tensor:
    b1 = _conv_bn(g, x, width, f"{name}.branch1x1")
    b5 = _conv_bn(g, _conv_bn(g, x, width // 2, f"{name}.branch5x5_1"), width, f"{name}.branch5x5_2", 5, 2)
    b3 = _conv_bn(g, x, width // 2, f"{name}.branch3x3dbl_1")
    b3 = _conv_bn(g, b3, width, f"{name}.branch3x3dbl_2", 3, 1)
    b3 = _conv_bn(g, b3, width, f"{name}.branch3x3dbl_3", 3, 1)
    bp = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name=f"{name}.avgpool")
    bp = _conv_bn(g, bp, width // 2, f"{name}.branch_pool")
    return g.concat([b1, b5, b3, bp], axis=1, name=f"{name}.concat")


def inception_small(batch: int = 32, num_classes: int = 10, width: int = 16) -> Graph:
    """Inception-v3's module A twice, a strided reduction, and module A again, on 32x32 images."""
    check_args("inception_small", batch, num_classes)
    g = Graph("inception_small")
    x = g.input("data", (batch, 3, 32, 32))
    x = _conv_bn(g, x, width, "stem", 3, 1)
    x = _inception_block(g, x, "Mixed_a", width)
    x = _inception_block(g, x, "Mixed_b", width)
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="reduce")
    x = _inception_block(g, x, "Mixed_c", width)
    x = g.pool2d(x, kernel=x.shape[2], kind="avg", name="avgpool")
    x = g.linear(g.flatten(x, name="flatten"), num_classes, name="fc")
    g.softmax(x, name="prob")
    return g
