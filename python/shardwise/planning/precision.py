"""The number format a plan is costed in: ``precision="fp32" | "bf16" | "fp16"``.

``bf16`` and ``fp16`` mean mixed-precision training as frameworks run it ("Mixed Precision
Training", Micikevicius et al.): activations, their gradients, messages and the weights'
gradients take 2 bytes an element; each weight keeps a float32 master copy beside the 2-byte
copy the ops read (6 bytes an element); optimizer state (momentum, Adam's two moments) and
batchnorm's running statistics stay float32.  The byte rule lives once, in the C core
(csrc/core/precision.c), which the memory model, the memory plan and the simulator all read.

Matrix products and convolutions (:data:`DENSE_OP_KINDS`) run at the device's dense peak in
that format (its tensor cores: :meth:`shardwise.machine.devices.Device.peak_flops`); every other
op keeps the float32 peak (elementwise and normalization ops are bound by memory, whose bytes
the format halves).  Execution stays float32: a plan costed in bf16 trains in float32 on the
CPU runtime (docs/cost-model.md).
"""
from __future__ import annotations

from typing import Any

from shardwise.errors import ConfigError

# name -> the C core's code (sw_precision, csrc/internal.h)
PRECISIONS: dict[str, int] = {"fp32": 0, "bf16": 1, "fp16": 2}

# Bytes of one value (an activation, a gradient, a message element) in each format: the
# default of CostOptions.bytes_per_element, the roofline's and the messages' element size.
VALUE_BYTES: dict[str, float] = {"fp32": 4.0, "bf16": 2.0, "fp16": 2.0}

# Op kinds whose FLOPs run on the tensor cores in bf16 / fp16: matrix products and convolutions
# (an LSTM cell's gate products too).  Attention is composed of matmul ops, so it counts.
DENSE_OP_KINDS: frozenset[str] = frozenset({"conv2d", "linear", "matmul", "lstm_cell"})


def check_precision(value: Any) -> str:
    """``value`` if it names a precision, else a ConfigError (a ValueError) listing them."""
    if not isinstance(value, str) or value not in PRECISIONS:
        raise ConfigError(f"unknown precision {value!r}; expected one of {', '.join(repr(p) for p in PRECISIONS)}")
    return value
