"""Broken: a memory-saving fused tanh whose backward computes the input's gradient in the memory
of the incoming gradient (``grad.mul_(1 - y * y)``) instead of a new tensor. The gradient it
returns is right and linear in grad_output, but autograd hands the same grad_output to every
use of an output: in ``f(x) + g(y)`` sharing it, the other use gets this backward's result.
backward_pure must fail naming grad_output; grad_output must not say that backward transforms or
ignores grad_output (given its own copy, it is linear), and must say that it writes into it."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"backward_pure"}


class _FusedTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad.mul_(1 - y * y)  # the bug: grad * (1 - y * y), a new tensor


class FusedTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _FusedTanh.apply(self.linear(x))


LAYER = FusedTanh
