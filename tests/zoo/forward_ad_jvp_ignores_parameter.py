"""Broken for forward mode: an affine layer y = scale·x + shift with a hand-written backward
(right: every default check passes) whose ``jvp`` ignores the tangent of ``scale``, as if
parameters had no tangents. forward_ad must fail and name parameter 'scale'."""

import torch
from torch import nn

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL = {"forward_ad"}
ENABLE = ("forward_ad",)


class AffineFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, shift):
        ctx.save_for_backward(x, scale)
        ctx.save_for_forward(x, scale)
        return scale * x + shift

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, (grad * x).sum(0), grad.sum(0)

    @staticmethod
    def jvp(ctx, dx, dscale, dshift):
        _x, scale = ctx.saved_tensors
        return scale * dx + dshift  # the bug: + dscale * x is missing


class Affine(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, 4))
        self.shift = nn.Parameter(torch.linspace(-1.0, 1.0, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return AffineFunction.apply(x, self.scale, self.shift)


LAYER = Affine
