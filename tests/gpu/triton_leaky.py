"""Correct: a leaky ReLU with a learnable slope whose forward and backward are Triton kernels
(a hand-written backward, the kind of layer whose backward most needs checking). It runs on
CUDA tensors (``--on cuda``), or on CPU tensors under Triton's interpreter (``--interpret``, on
by itself without a GPU); ``triton_leaky_bug.py`` is the same layer with a backward bug."""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl
from torch import nn

BLOCK = 1024
INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"  # Triton's interpreter runs the kernels on CPU tensors
BUG = 1.0  # the buggy twin scales the input gradient of the negative side


@triton.jit
def _leaky_forward(x_ptr, slope_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    slope = tl.load(slope_ptr)
    tl.store(y_ptr + offsets, tl.where(x > 0, x, slope * x), mask=inside)


@triton.jit
def _leaky_backward(x_ptr, slope_ptr, grad_ptr, dx_ptr, scale, n, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    inside = offsets < n
    x = tl.load(x_ptr + offsets, mask=inside)
    grad = tl.load(grad_ptr + offsets, mask=inside)
    slope = tl.load(slope_ptr)
    tl.store(dx_ptr + offsets, tl.where(x > 0, grad, slope * grad * scale), mask=inside)


class LeakyFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x: torch.Tensor, slope: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        if not x.is_cuda and not INTERPRETED:
            raise RuntimeError("LeakyFunction is a Triton kernel: it runs on CUDA tensors only "
                               "(or on CPU tensors under Triton's interpreter, TRITON_INTERPRET=1)")
        x = x.contiguous()
        slope = slope.to(x.dtype).contiguous()
        y = torch.empty_like(x)
        n = x.numel()
        _leaky_forward[(triton.cdiv(n, BLOCK),)](x, slope, y, n, BLOCK=BLOCK)
        ctx.save_for_backward(x, slope)
        return y

    @staticmethod
    def backward(ctx, grad: torch.Tensor):  # type: ignore[override]
        x, slope = ctx.saved_tensors
        grad = grad.contiguous()
        dx = torch.empty_like(x)
        n = x.numel()
        _leaky_backward[(triton.cdiv(n, BLOCK),)](x, slope, grad, dx, BUG, n, BLOCK=BLOCK)
        dslope = (grad * torch.clamp(x, max=0)).sum().reshape(slope.shape)
        return dx, dslope


class TritonLeaky(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.slope = nn.Parameter(torch.tensor([0.2]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return LeakyFunction.apply(x, self.slope)


LAYER = TritonLeaky
LAYOUTS = ["8,6,16:BCT"]
