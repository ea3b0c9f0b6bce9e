"""Inception-v3 (Szegedy et al., 2015) in torchvision's layout.

Every convolution is torchvision's ``BasicConv2d``: a convolution without bias,
batch normalization and ReLU, here three ops named ``<module>.conv``,
``<module>.bn`` and ``<module>.relu`` after the torchvision module
(``Conv2d_1a_3x3``, ``Mixed_6b.branch7x7dbl_3``, ``AuxLogits.conv0``, ...).
The pooling branches are ``<block>.avgpool`` / ``<block>.maxpool`` and each block
ends in a channel concat named ``<block>.concat``.
"""
from __future__ import annotations

from typing import Sequence

from shardwise.errors import GraphError
from shardwise.models._common import check_args
from shardwise.graph import Graph, Tensor


def _basic_conv(g: Graph, x: Tensor, out_channels: int, name: str, kernel: int | Sequence[int] = 1,
                stride: int | Sequence[int] = 1, padding: int | Sequence[int] = 0) -> Tensor:
    """torchvision's BasicConv2d: conv (no bias) -> batchnorm -> ReLU."""
    x = g.conv2d(x, out_channels, kernel=kernel, stride=stride, padding=padding, bias=False,
                 name=f"{name}.conv")
    x = g.batchnorm2d(x, name=f"{name}.bn")
    return g.relu(x, name=f"{name}.relu")


def _inception_a(g: Graph, x: Tensor, pool_features: int, name: str) -> Tensor:
    """35x35 block: 1x1 | 1x1 -> 5x5 | 1x1 -> 3x3 -> 3x3 | avgpool -> 1x1."""
    b1 = _basic_conv(g, x, 64, f"{name}.branch1x1")
    b5 = _basic_conv(g, x, 48, f"{name}.branch5x5_1")
    b5 = _basic_conv(g, b5, 64, f"{name}.branch5x5_2", kernel=5, padding=2)
    b3 = _basic_conv(g, x, 64, f"{name}.branch3x3dbl_1")
    b3 = _basic_conv(g, b3, 96, f"{name}.branch3x3dbl_2", kernel=3, padding=1)
    b3 = _basic_conv(g, b3, 96, f"{name}.branch3x3dbl_3", kernel=3, padding=1)
    bp = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name=f"{name}.avgpool")
    bp = _basic_conv(g, bp, pool_features, f"{name}.branch_pool")
    return g.concat([b1, b5, b3, bp], axis=1, name=f"{name}.concat")


def _inception_b(g: Graph, x: Tensor, name: str) -> Tensor:
    """35x35 -> 17x17 reduction: 3x3 s2 | 1x1 -> 3x3 -> 3x3 s2 | maxpool 3 s2."""
    b3 = _basic_conv(g, x, 384, f"{name}.branch3x3", kernel=3, stride=2)
    bd = _basic_conv(g, x, 64, f"{name}.branch3x3dbl_1")
    bd = _basic_conv(g, bd, 96, f"{name}.branch3x3dbl_2", kernel=3, padding=1)
    bd = _basic_conv(g, bd, 96, f"{name}.branch3x3dbl_3", kernel=3, stride=2)
    bp = g.pool2d(x, kernel=3, stride=2, kind="max", name=f"{name}.maxpool")
    return g.concat([b3, bd, bp], axis=1, name=f"{name}.concat")


def _inception_c(g: Graph, x: Tensor, c7: int, name: str) -> Tensor:
    """17x17 block with factorized 7x7 convolutions (1x7 and 7x1)."""
    b1 = _basic_conv(g, x, 192, f"{name}.branch1x1")
    b7 = _basic_conv(g, x, c7, f"{name}.branch7x7_1")
    b7 = _basic_conv(g, b7, c7, f"{name}.branch7x7_2", kernel=(1, 7), padding=(0, 3))
    b7 = _basic_conv(g, b7, 192, f"{name}.branch7x7_3", kernel=(7, 1), padding=(3, 0))
    bd = _basic_conv(g, x, c7, f"{name}.branch7x7dbl_1")
    bd = _basic_conv(g, bd, c7, f"{name}.branch7x7dbl_2", kernel=(7, 1), padding=(3, 0))
    bd = _basic_conv(g, bd, c7, f"{name}.branch7x7dbl_3", kernel=(1, 7), padding=(0, 3))
    bd = _basic_conv(g, bd, c7, f"{name}.branch7x7dbl_4", kernel=(7, 1), padding=(3, 0))
    bd = _basic_conv(g, bd, 192, f"{name}.branch7x7dbl_5", kernel=(1, 7), padding=(0, 3))
    bp = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name=f"{name}.avgpool")
    bp = _basic_conv(g, bp, 192, f"{name}.branch_pool")
    return g.concat([b1, b7, bd, bp], axis=1, name=f"{name}.concat")


def _inception_d(g: Graph, x: Tensor, name: str) -> Tensor:
    """17x17 -> 8x8 reduction: 1x1 -> 3x3 s2 | 1x1 -> 1x7 -> 7x1 -> 3x3 s2 | maxpool 3 s2."""
    b3 = _basic_conv(g, x, 192, f"{name}.branch3x3_1")
    b3 = _basic_conv(g, b3, 320, f"{name}.branch3x3_2", kernel=3, stride=2)
    b7 = _basic_conv(g, x, 192, f"{name}.branch7x7x3_1")
    b7 = _basic_conv(g, b7, 192, f"{name}.branch7x7x3_2", kernel=(1, 7), padding=(0, 3))
    b7 = _basic_conv(g, b7, 192, f"{name}.branch7x7x3_3", kernel=(7, 1), padding=(3, 0))
    b7 = _basic_conv(g, b7, 192, f"{name}.branch7x7x3_4", kernel=3, stride=2)
    bp = g.pool2d(x, kernel=3, stride=2, kind="max", name=f"{name}.maxpool")
    return g.concat([b3, b7, bp], axis=1, name=f"{name}.concat")


def _inception_e(g: Graph, x: Tensor, name: str) -> Tensor:
    """8x8 block with expanded filter banks: 3x3 split into parallel 1x3 and 3x1."""
    b1 = _basic_conv(g, x, 320, f"{name}.branch1x1")
    b3 = _basic_conv(g, x, 384, f"{name}.branch3x3_1")
    b3a = _basic_conv(g, b3, 384, f"{name}.branch3x3_2a", kernel=(1, 3), padding=(0, 1))
    b3b = _basic_conv(g, b3, 384, f"{name}.branch3x3_2b", kernel=(3, 1), padding=(1, 0))
    b3 = g.concat([b3a, b3b], axis=1, name=f"{name}.branch3x3.concat")
    bd = _basic_conv(g, x, 448, f"{name}.branch3x3dbl_1")
    bd = _basic_conv(g, bd, 384, f"{name}.branch3x3dbl_2", kernel=3, padding=1)
    bda = _basic_conv(g, bd, 384, f"{name}.branch3x3dbl_3a", kernel=(1, 3), padding=(0, 1))
    bdb = _basic_conv(g, bd, 384, f"{name}.branch3x3dbl_3b", kernel=(3, 1), padding=(1, 0))
    bd = g.concat([bda, bdb], axis=1, name=f"{name}.branch3x3dbl.concat")
    bp = g.pool2d(x, kernel=3, stride=1, padding=1, kind="avg", name=f"{name}.avgpool")
    bp = _basic_conv(g, bp, 192, f"{name}.branch_pool")
    return g.concat([b1, b3, bd, bp], axis=1, name=f"{name}.concat")


def _aux_logits(g: Graph, x: Tensor, num_classes: int) -> Tensor:
    """The auxiliary classifier on Mixed_6e's 17x17x768 output."""
    x = g.pool2d(x, kernel=5, stride=3, kind="avg", name="AuxLogits.avgpool")
    x = _basic_conv(g, x, 128, "AuxLogits.conv0")
    x = _basic_conv(g, x, 768, "AuxLogits.conv1", kernel=5)
    x = g.flatten(x, name="AuxLogits.flatten")
    x = g.linear(x, num_classes, name="AuxLogits.fc")
    return g.softmax(x, name="AuxLogits.softmax")


def inception_v3(batch: int = 512, num_classes: int = 1000, aux: bool = False) -> Graph:
    """Inception-v3 on (N, 3, 299, 299) images, following ``torchvision.models.inception_v3``.

    Layout: stem Conv2d_1a_3x3 32@3x3 s2, Conv2d_2a_3x3 32@3x3, Conv2d_2b_3x3
    64@3x3 p1, maxpool1 3 s2, Conv2d_3b_1x1 80@1x1, Conv2d_4a_3x3 192@3x3,
    maxpool2 3 s2 (-> 192x35x35); Mixed_5b/5c/5d (InceptionA, pool features
    32/64/64), Mixed_6a (InceptionB reduction -> 768x17x17), Mixed_6b..6e
    (InceptionC with 1x7/7x1 convs, c7 = 128/160/160/192), Mixed_7a
    (InceptionD reduction -> 1280x8x8), Mixed_7b/7c (InceptionE -> 2048x8x8);
    avgpool 8x8, flatten, fc ``num_classes``, softmax.  Every convolution is a
    BasicConv2d (conv without bias, batchnorm, ReLU).  torchvision's adaptive
    average pool is an 8x8 average pool at 299x299; dropout is omitted.

    With ``aux=True`` the AuxLogits head is built on Mixed_6e (avgpool 5 s3,
    BasicConv2d 128@1x1, BasicConv2d 768@5x5, flatten, fc ``num_classes``)
    and ends in its own softmax, "AuxLogits.softmax", a second sink; the main
    softmax stays the graph's last op.

    Parameters for 1000 classes: 23,834,568 without the auxiliary head,
    27,161,264 with it (torchvision's ``aux_logits=True`` count).
    """
    check_args("inception_v3", batch, num_classes)
    if not isinstance(aux, bool):
        raise GraphError(f"inception_v3: aux must be a bool, got {aux!r}")
    g = Graph("inception_v3_aux" if aux else "inception_v3")
    x = g.input("data", (batch, 3, 299, 299))
    x = _basic_conv(g, x, 32, "Conv2d_1a_3x3", kernel=3, stride=2)
    x = _basic_conv(g, x, 32, "Conv2d_2a_3x3", kernel=3)
    x = _basic_conv(g, x, 64, "Conv2d_2b_3x3", kernel=3, padding=1)
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="maxpool1")
    x = _basic_conv(g, x, 80, "Conv2d_3b_1x1")
    x = _basic_conv(g, x, 192, "Conv2d_4a_3x3", kernel=3)
    x = g.pool2d(x, kernel=3, stride=2, kind="max", name="maxpool2")
    x = _inception_a(g, x, 32, "Mixed_5b")
    x = _inception_a(g, x, 64, "Mixed_5c")
    x = _inception_a(g, x, 64, "Mixed_5d")
    x = _inception_b(g, x, "Mixed_6a")
    x = _inception_c(g, x, 128, "Mixed_6b")
    x = _inception_c(g, x, 160, "Mixed_6c")
    x = _inception_c(g, x, 160, "Mixed_6d")
    x = _inception_c(g, x, 192, "Mixed_6e")
    if aux:
        _aux_logits(g, x, num_classes)
    x = _inception_d(g, x, "Mixed_7a")
    x = _inception_e(g, x, "Mixed_7b")
    x = _inception_e(g, x, "Mixed_7c")
    x = g.pool2d(x, kernel=8, stride=1, kind="avg", name="avgpool")
    x = g.flatten(x, name="flatten")
    x = g.linear(x, num_classes, name="fc")
    g.softmax(x, name="softmax")
    return g
