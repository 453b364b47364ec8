"""Broken: an affine layer y = scale * x + shift with a hand-written backward whose shift
gradient has the wrong sign: the shift walks uphill while everything else trains."""

import torch
from torch import nn

LAYOUTS = ["5,4:BC"]
EXPECT_FAIL = {"gradients"}


class Affine(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, scale, shift):
        ctx.save_for_backward(x, scale)
        return scale * x + shift

    @staticmethod
    def backward(ctx, grad):
        x, scale = ctx.saved_tensors
        return grad * scale, (grad * x).sum(0), -grad.sum(0)  # the bug: minus


class AffineLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.linspace(0.5, 2.0, 4))
        self.shift = nn.Parameter(torch.linspace(-1.0, 1.0, 4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return Affine.apply(x, self.scale, self.shift)


LAYER = AffineLayer
