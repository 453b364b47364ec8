"""Correct: the backward of gradients_float64_backward_float32_opaque_forward.py computed in the
dtype it is given, behind the same detached forward (no autograd derivative to compare with): its
float64 gradients agree with extrapolated finite differences to what they resolve, and it passes
gradients[float64] (Note [float64 backward precision])."""

import torch
from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL: set[str] = set()


class _SoftCube(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        x, w = x.detach(), w.detach()
        ctx.save_for_backward(x, w)
        return w * x ** 3 + torch.sin(x)

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g * (3 * w * x ** 2 + torch.cos(x)), (g * x ** 3).sum(0)


class SoftCube(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(0.5, 1.5, dim))

    def forward(self, x):
        return _SoftCube.apply(x, self.w)


LAYER = SoftCube
