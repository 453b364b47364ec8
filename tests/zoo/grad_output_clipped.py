"""Broken for training: a hand-written backward that clips the incoming gradient to ±3 "to keep
exploding gradients in check". For the grad_output the other checks use (standard normal, all
below 3 here) the gradient is exact, so gradients passes; but backward is no longer linear in
grad_output, and loss scaling (GradScaler multiplies every grad_output by 2**16), gradient
accumulation and every loss of another size get gradients that are not the gradient. grad_output
must fail and say that backward transforms grad_output."""

import torch
from torch import nn

LAYOUTS = ["8,16:BC"]
EXPECT_FAIL = {"grad_output"}


class ClippedTanhFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.tanh(x)
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad.clamp(-3.0, 3.0) * (1 - y * y)  # the bug: clipping belongs to the optimizer step


class ClippedTanh(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16)

    def forward(self, x):
        return ClippedTanhFunction.apply(self.linear(x))


LAYER = ClippedTanh
