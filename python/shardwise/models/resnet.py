"""Residual networks (He et al., 2015) in torchvision's layouts.

Bottleneck blocks put the stride on the 3x3 convolution ("ResNet v1.5"), as
torchvision does.  Op names follow torchvision's module names
(``layer2.0.conv1``, ``layer2.0.downsample.0``, ...); the ops torchvision runs
as functions are named ``<block>.relu1``, ``<block>.relu2``, ``<block>.add`` and
``<block>.relu`` (the ReLU after the residual sum).
"""
from __future__ import annotations

from shardwise.models._common import check_args
from shardwise.errors import ShapeError
from shardwise.graph import Graph, Tensor


def _conv_bn(g: Graph, x: Tensor, out_channels: int, kernel: int, stride: int, padding: int,
             prefix: str, index: int | str, relu: bool) -> Tensor:
    """conv (no bias) -> batchnorm [-> relu], named prefix.conv{i}, prefix.bn{i}, prefix.relu{i}."""
    x = g.conv2d(x, out_channels, kernel=kernel, stride=stride, padding=padding, bias=False,
                 name=f"{prefix}.conv{index}")
    x = g.batchnorm2d(x, name=f"{prefix}.bn{index}")
    if relu:
        x = g.relu(x, name=f"{prefix}.relu{index}")
    return x


def _shortcut(g: Graph, x: Tensor, out_channels: int, stride: int, prefix: str) -> Tensor:
    """Identity, or a 1x1 strided conv + batchnorm when the shape changes (torchvision's downsample)."""
    if stride == 1 and x.shape[1] == out_channels:
        return x
    x = g.conv2d(x, out_channels, kernel=1, stride=stride, bias=False, name=f"{prefix}.downsample.0")
    return g.batchnorm2d(x, name=f"{prefix}.downsample.1")


def _basic_block(g: Graph, x: Tensor, planes: int, stride: int, prefix: str) -> Tensor:
    """Two 3x3 convolutions; expansion 1."""
    identity = _shortcut(g, x, planes, stride, prefix)
    y = _conv_bn(g, x, planes, 3, stride, 1, prefix, 1, relu=True)
    y = _conv_bn(g, y, planes, 3, 1, 1, prefix, 2, relu=False)
    y = g.add(y, identity, name=f"{prefix}.add")
    return g.relu(y, name=f"{prefix}.relu")


def _bottleneck(g: Graph, x: Tensor, planes: int, stride: int, prefix: str) -> Tensor:
    """1x1 reduce, 3x3 (strided), 1x1 expand to 4 * planes."""
    out_channels = planes * 4
    identity = _shortcut(g, x, out_channels, stride, prefix)
    y = _conv_bn(g, x, planes, 1, 1, 0, prefix, 1, relu=True)
    y = _conv_bn(g, y, planes, 3, stride, 1, prefix, 2, relu=True)
    y = _conv_bn(g, y, out_channels, 1, 1, 0, prefix, 3, relu=False)
    y = g.add(y, identity, name=f"{prefix}.add")
    return g.relu(y, name=f"{prefix}.relu")


def _resnet(model: str, bottleneck: bool, layers: tuple[int, int, int, int], batch: int,
            num_classes: int, width: int = 1) -> Graph:
    """``width`` multiplies every convolution's channels (Wide ResNets as the Tofu paper uses them)."""
    check_args(model, batch, num_classes)
    block = _bottleneck if bottleneck else _basic_block
    g = Graph(model)
    x = g.input("data", (batch, 3, 224, 224))
    x = g.conv2d(x, 64 * width, kernel=7, stride=2, padding=3, bias=False, name="conv1")
    x = g.batchnorm2d(x, name="bn1")
    x = g.relu(x, name="relu")
    x = g.pool2d(x, kernel=3, stride=2, padding=1, kind="max", name="maxpool")
    for stage, (planes, blocks) in enumerate(zip((64 * width, 128 * width, 256 * width, 512 * width), layers),
                                             start=1):
        for b in range(blocks):
            stride = 2 if stage > 1 and b == 0 else 1
            x = block(g, x, planes, stride, f"layer{stage}.{b}")
    x = g.pool2d(x, kernel=7, stride=1, kind="avg", name="avgpool")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, num_classes, name="fc")
    g.softmax(x, name="softmax")
    return g


def resnet18(batch: int = 512, num_classes: int = 1000) -> Graph:
    """ResNet-18, following ``torchvision.models.resnet18``.

    Layout (torchvision): conv1 64@7x7 s2 p3 (no bias), bn1, relu, maxpool 3 s2 p1;
    layer1..layer4 of BasicBlocks (2, 2, 2, 2) (two 3x3 convs + batchnorm) at 64, 128,
    256, 512 channels, layers 2-4 starting with stride 2 and a 1x1 strided
    conv + batchnorm downsample shortcut; residual add then ReLU; avgpool 7x7,
    flatten, fc ``num_classes``, softmax.  Input (N, 3, 224, 224).

    Parameters: 11,689,512 for 1000 classes.
    """
    return _resnet("resnet18", False, (2, 2, 2, 2), batch, num_classes)


def resnet34(batch: int = 512, num_classes: int = 1000) -> Graph:
    """ResNet-34, following ``torchvision.models.resnet34``.

    Layout (torchvision): conv1 64@7x7 s2 p3 (no bias), bn1, relu, maxpool 3 s2 p1;
    layer1..layer4 of BasicBlocks (3, 4, 6, 3) (two 3x3 convs + batchnorm) at 64, 128,
    256, 512 channels, layers 2-4 starting with stride 2 and a 1x1 strided
    conv + batchnorm downsample shortcut; residual add then ReLU; avgpool 7x7,
    flatten, fc ``num_classes``, softmax.  Input (N, 3, 224, 224).

    Parameters: 21,797,672 for 1000 classes.
    """
    return _resnet("resnet34", False, (3, 4, 6, 3), batch, num_classes)


def resnet50(batch: int = 512, num_classes: int = 1000) -> Graph:
    """ResNet-50, following ``torchvision.models.resnet50``.

    Layout (torchvision, v1.5): conv1 64@7x7 s2 p3 (no bias), bn1, relu, maxpool
    3 s2 p1; layer1..layer4 of Bottlenecks (3, 4, 6, 3) (1x1, 3x3, 1x1 convs +
    batchnorm, expansion 4) at 64, 128, 256, 512 planes, layers 2-4 starting
    with stride 2 on the 3x3 conv and a 1x1 strided conv + batchnorm downsample
    shortcut (layer1 too, to widen 64 -> 256); residual add then ReLU; avgpool
    7x7, flatten, fc ``num_classes``, softmax.  Input (N, 3, 224, 224).

    Parameters: 25,557,032 for 1000 classes.
    """
    return _resnet("resnet50", True, (3, 4, 6, 3), batch, num_classes)


def resnet101(batch: int = 512, num_classes: int = 1000) -> Graph:
    """ResNet-101, following ``torchvision.models.resnet101``.

    Layout (torchvision, v1.5): conv1 64@7x7 s2 p3 (no bias), bn1, relu, maxpool
    3 s2 p1; layer1..layer4 of Bottlenecks (3, 4, 23, 3) (1x1, 3x3, 1x1 convs +
    batchnorm, expansion 4) at 64, 128, 256, 512 planes, layers 2-4 starting
    with stride 2 on the 3x3 conv and a 1x1 strided conv + batchnorm downsample
    shortcut (layer1 too, to widen 64 -> 256); residual add then ReLU; avgpool
    7x7, flatten, fc ``num_classes``, softmax.  Input (N, 3, 224, 224).

    Parameters: 44,549,160 for 1000 classes.
    """
    return _resnet("resnet101", True, (3, 4, 23, 3), batch, num_classes)


def resnet152(batch: int = 512, num_classes: int = 1000) -> Graph:
    """ResNet-152, following ``torchvision.models.resnet152``.

    Layout (torchvision, v1.5): conv1 64@7x7 s2 p3 (no bias), bn1, relu, maxpool
    3 s2 p1; layer1..layer4 of Bottlenecks (3, 8, 36, 3) (1x1, 3x3, 1x1 convs +
    batchnorm, expansion 4) at 64, 128, 256, 512 planes, layers 2-4 starting
    with stride 2 on the 3x3 conv and a 1x1 strided conv + batchnorm downsample
    shortcut (layer1 too, to widen 64 -> 256); residual add then ReLU; avgpool
    7x7, flatten, fc ``num_classes``, softmax.  Input (N, 3, 224, 224).

    Parameters: 60,192,808 for 1000 classes.
    """
    return _resnet("resnet152", True, (3, 8, 36, 3), batch, num_classes)


WIDE_DEPTHS = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3)}


def wide_resnet(depth: int = 50, width: int = 4, batch: int = 32, num_classes: int = 1000) -> Graph:
    """Wide ResNet as the Tofu paper (Wang, Huang, Li, *Supporting Very Large Models using Automatic
    Dataflow Graph Partitioning*) uses it (WResNet-<depth>-<width>): the Bottleneck ResNet of
    ``depth`` layers with every convolution's input and output channels multiplied by
    ``width``, so each weight tensor grows by about width^2 (section 6.1).  On 224x224 images.
    Parameters (float32 bytes) are printed beside Table 1 of that paper by benchmarks/tofu_models.py."""
    if depth not in WIDE_DEPTHS:
        raise ShapeError(f"wide_resnet: depth must be one of {sorted(WIDE_DEPTHS)}, got {depth!r}")
    if isinstance(width, bool) or not isinstance(width, int) or width < 1:
        raise ShapeError(f"wide_resnet: width must be a positive int, got {width!r}")
    return _resnet(f"wresnet{depth}_{width}", True, WIDE_DEPTHS[depth], batch, num_classes, width)
