"""CPU kernels of the ops of Tofu's recurrent models: ``matmul`` and the LSTM cell ops.

A mixin of :class:`~shardwise.backend_cpu.CpuExecutor`: these ops need all their data
inputs to compute the gradient of any one of them, so their backward tasks read the
regions their forward task gathered (``forward_reads``).
"""
from __future__ import annotations

import numpy as np

from . import _core
from .graph import Op
from .boxes import Box, lo_of, shape_of
from .lower import Task
from .opdesc import DATA


class RecurrentOpKernels:
    """matmul (through the OpenBLAS linear kernels) and lstm_cell / lstm_hidden (csrc/cpu/lstm.c)."""

    def data_regions(self, op: Op, worker: int) -> list[tuple[np.ndarray, tuple[int, ...]]]:
        """(array, lo) of the region of every data input its forward task read, in slot order.
        Only for ops that read all their data inputs on every worker (matmul, the LSTM ops)."""
        ndata = sum(1 for i in op.desc.inputs if i.role == DATA)
        reads = self.forward_reads[(op.name, worker)]
        if len(reads) < ndata:
            raise RuntimeError(f"{op.kind} op {op.name!r}, worker {worker}: its forward read {len(reads)} of "
                               f"{ndata} data inputs")
        return [self.view(r) for r in reads[:ndata]]

    def matmul_forward(self, op: Op, t: Task, ybox: Box, shift: tuple[int, int] | None) -> np.ndarray:
        """y (M_b, N_b) = a (M_b, K) @ b (K, N_b) as the linear kernel's x w^T with w = b^T
        (N_b, K), a contiguous copy; with k split, K is this worker's part, rebased to 0."""
        (a, alo), (b, blo) = self.data_regions(op, t.worker)
        alo, blo = self.rebased(op, 0, alo, shift), self.rebased(op, 1, blo, shift)
        wt = np.ascontiguousarray(b.T)                     # (N_b, K)
        return _core.linear_forward(a, alo, wt, (blo[1], blo[0]), None, None, lo_of(ybox), shape_of(ybox), False)

    def matmul_backward(self, op: Op, t: Task, dy: np.ndarray, dylo: tuple[int, ...], dxbox: Box,
                        shift: tuple[int, int] | None) -> np.ndarray:
        """The gradient of input ``t.slot`` over its region ``dxbox`` (k rebased under a split):
        slot 0: da (M_b, K) = dy (M_b, N_b) @ b^T, the linear kernel's dy w with w = b^T;
        slot 1: db (K, N_b) = a^T @ dy, the linear weight gradient dy^T a (N_b, K), transposed."""
        (a, alo), (b, blo) = self.data_regions(op, t.worker)
        alo, blo = self.rebased(op, 0, alo, shift), self.rebased(op, 1, blo, shift)
        dxlo = self.rebased(op, t.slot, lo_of(dxbox), shift)
        dxshape = shape_of(dxbox)
        dy = np.ascontiguousarray(dy)
        if t.slot == 0:
            wt = np.ascontiguousarray(b.T)                 # (N_b, K)
            return _core.linear_backward_data(wt, (blo[1], blo[0]), dy, dylo, dxlo, dxshape)
        # dw (N_b, K) for dy's column range; K must be all of this worker's part of k
        dbt, _ = _core.linear_backward_weight(a, alo, dy, dylo, (op.shape[1], dxshape[0]), False)
        if dbt.shape != (dxshape[1], dxshape[0]) or dylo[1] != dxlo[1]:
            raise RuntimeError(f"matmul {op.name!r}: b's gradient region {dxbox} does not match dy's columns")
        return np.ascontiguousarray(dbt.T)                 # (K, N_b)

    def lstm_forward(self, op: Op, t: Task, ybox: Box) -> np.ndarray:
        """lstm_cell (inputs i, f, g, c_prev) or lstm_hidden (o, c) over the output box (C kernels)."""
        flat = [v for arr_lo in self.data_regions(op, t.worker) for v in arr_lo]
        kernel = _core.lstm_cell_forward if op.kind == "lstm_cell" else _core.lstm_hidden_forward
        return kernel(*flat, lo_of(ybox), shape_of(ybox))

    def lstm_backward(self, op: Op, t: Task, dy: np.ndarray, dylo: tuple[int, ...], dxbox: Box) -> np.ndarray:
        """The gradient of input ``t.slot`` of an LSTM op, recomputed from all its inputs and dy."""
        flat = [v for arr_lo in self.data_regions(op, t.worker) for v in arr_lo]
        kernel = _core.lstm_cell_backward if op.kind == "lstm_cell" else _core.lstm_hidden_backward
        return kernel(*flat, np.ascontiguousarray(dy), dylo, t.slot, lo_of(dxbox), shape_of(dxbox))
