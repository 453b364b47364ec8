"""Correct: an RMS norm over the channel dimension (the last one) with a learnable weight per
channel, forward and backward in Triton: one program per row forward; backward in programs of
ROWS rows each, whose partial weight gradients are accumulated across programs with an atomic
add. The kernels take a Python float ``eps`` and use ``libdevice.rsqrt``. They run on CUDA
tensors, or on CPU tensors under Triton's interpreter (``--interpret``, on by itself without a
GPU); ``triton_rmsnorm_bug.py`` is the same layer with a weight-gradient bug."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import nn
from triton.language.extra import libdevice

ROWS = 8  # rows per backward program: the weight gradient sums over programs
ACCUMULATE = True  # the buggy twin stores each program's partial weight gradient instead of adding it
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter runs the kernels on CPU tensors


@triton.jit
def _rms_forward(x_ptr, w_ptr, y_ptr, rstd_ptr, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=0.0)
    w = tl.load(w_ptr + cols, mask=inside, other=0.0)
    rstd = libdevice.rsqrt(tl.sum(x * x, axis=0) / n_cols + eps.to(tl.float32))
    tl.store(rstd_ptr + row, rstd)
    tl.store(y_ptr + row * n_cols + cols, x * rstd * w, mask=inside)


@triton.jit
def _rms_backward(x_ptr, w_ptr, rstd_ptr, dy_ptr, dx_ptr, dw_ptr, n_rows, n_cols,
                  BLOCK: tl.constexpr, ROWS: tl.constexpr, ACCUMULATE: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    w = tl.load(w_ptr + cols, mask=inside, other=0.0)
    dw = tl.zeros((BLOCK,), dtype=w.dtype)
    for k in range(ROWS):
        row = tl.program_id(0) * ROWS + k
        if row < n_rows:
            x = tl.load(x_ptr + row * n_cols + cols, mask=inside, other=0.0)
            dy = tl.load(dy_ptr + row * n_cols + cols, mask=inside, other=0.0)
            rstd = tl.load(rstd_ptr + row)
            x_hat = x * rstd
            wdy = w * dy
            dx = rstd * (wdy - x_hat * (tl.sum(wdy * x_hat, axis=0) / n_cols))
            tl.store(dx_ptr + row * n_cols + cols, dx, mask=inside)
            dw += dy * x_hat
    if ACCUMULATE:
        tl.atomic_add(dw_ptr + cols, dw, mask=inside)
    else:
        tl.store(dw_ptr + cols, dw, mask=inside)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:  # type: ignore[override]
        if not x.is_cuda and not INTERPRETED:
            raise RuntimeError("RMSNormFunction is a Triton kernel: it runs on CUDA tensors only "
                               "(or on CPU tensors under Triton's interpreter, TRITON_INTERPRET=1)")
        shape = x.shape
        x = x.reshape(-1, shape[-1]).contiguous()
        weight = weight.to(x.dtype).contiguous()
        rows, cols = x.shape
        y = torch.empty_like(x)
        rstd = torch.empty(rows, dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(cols)
        _rms_forward[(rows,)](x, weight, y, rstd, cols, eps, BLOCK=block)
        ctx.save_for_backward(x, weight, rstd)
        ctx.saved_shape = shape
        return y.reshape(shape)

    @staticmethod
    def backward(ctx, dy: torch.Tensor):  # type: ignore[override]
        x, weight, rstd = ctx.saved_tensors
        rows, cols = x.shape
        dy = dy.reshape(rows, cols).contiguous()
        dx = torch.empty_like(x)
        dw = torch.zeros(cols, dtype=x.dtype, device=x.device)
        block = triton.next_power_of_2(cols)
        _rms_backward[(triton.cdiv(rows, ROWS),)](x, weight, rstd, dy, dx, dw, rows, cols, BLOCK=block, ROWS=ROWS,
                                                  ACCUMULATE=ACCUMULATE)
        return dx.reshape(ctx.saved_shape), dw, None


class TritonRMSNorm(nn.Module):
    def __init__(self, channels: int = 32, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(1 + 0.1 * torch.randn(channels))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return RMSNormFunction.apply(x, self.weight, self.eps)


LAYER = TritonRMSNorm
LAYOUTS = ["4,8,32:BTC"]
