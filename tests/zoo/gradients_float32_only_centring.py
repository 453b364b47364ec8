"""Broken in float32 only: a bias followed by a hand-written centring whose backward, when it
runs in float32, rounds the incoming gradient's mean to bfloat16 before subtracting it (a
"fast path" for low precision). The bias's gradient, zero by cancellation, then carries an
error a hundred times the float32 rounding; float64 is exact, so among the gradient checks
only gradients[float32] can see it. Rounding grad_output is not linear in it, so grad_output
catches it too (on input 0, whose gradient it rounds by ~1e-3)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCS"]
EXPECT_FAIL = {"gradients", "grad_output"}
EXPECT_NOTES = {"gradients": "parameter 'bias' has no effect on the output"}  # float64 is right: the bias is dead


class Centre(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x - x.mean(dim=-1, keepdim=True)

    @staticmethod
    def backward(ctx, grad):
        mean = grad.mean(dim=-1, keepdim=True)
        if grad.dtype == torch.float32:
            mean = mean.to(torch.bfloat16).to(torch.float32)  # the bug
        return grad - mean


class BiasThenCentre(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-0.5, 0.5, 3).view(3, 1))  # one per channel

    def forward(self, x):
        return torch.tanh(Centre.apply(x + self.bias))


LAYER = BiasThenCentre
