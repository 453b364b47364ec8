"""Correct: a row sum over the channel dimension (the last one) in Triton, one program per row
walking the row in blocks of BLOCK columns, its running total in float32 (float64 for float64
inputs) and rounded to the input's dtype once; the backward spreads the gradient back over the
row. ``triton_rowsum_bug.py`` keeps the running total in the input's dtype: the most common
low-precision kernel bug, which only the `reference` check (against ``references.RowSumRef``)
sees. Run on CUDA tensors, or on CPU tensors under Triton's interpreter."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import nn

BLOCK = 8
WIDE = True  # the buggy twin accumulates in the input's dtype
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter runs the kernels on CPU tensors


@triton.jit
def _row_sum(x_ptr, y_ptr, n_cols, BLOCK: tl.constexpr, WIDE: tl.constexpr):
    row = tl.program_id(0)
    first = tl.load(x_ptr + row * n_cols)
    if WIDE:
        total = tl.zeros((1,), dtype=tl.float64 if first.dtype == tl.float64 else tl.float32)
    else:
        total = tl.zeros((1,), dtype=first.dtype)
    for start in range(0, n_cols, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * n_cols + cols, mask=cols < n_cols, other=0.0)
        total += tl.sum(x.to(total.dtype), axis=0)
    tl.store(y_ptr + row + tl.arange(0, 1), total.to(first.dtype))


class RowSumFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if not x.is_cuda and not INTERPRETED:
            raise RuntimeError("RowSumFunction is a Triton kernel: it runs on CUDA tensors only "
                               "(or on CPU tensors under Triton's interpreter, TRITON_INTERPRET=1)")
        shape = x.shape
        x = x.reshape(-1, shape[-1]).contiguous()
        y = torch.empty(x.shape[0], dtype=x.dtype, device=x.device)
        _row_sum[(x.shape[0],)](x, y, x.shape[1], BLOCK=BLOCK, WIDE=WIDE)
        ctx.n = shape[-1]
        return y.reshape(shape[:-1])

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        return dy.unsqueeze(-1).expand(*dy.shape, ctx.n).contiguous()


class TritonRowSum(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RowSumFunction.apply(x)


LAYER = TritonRowSum
LAYOUTS = ["4,1024:BC"]
