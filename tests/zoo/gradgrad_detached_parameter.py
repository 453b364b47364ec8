"""Broken for second derivatives: Swish with a learnable per-channel beta whose backward
computes the sigmoid from ``beta.detach()``. The first gradients have the right values
(every default check passes), but the double backward misses how they change with beta, so
the second derivatives with respect to beta are wrong: gradgrad must name parameter 'beta'."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"gradgrad"}
ENABLE = ("gradgrad",)


class DetachedSwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad):
        x, beta = ctx.saved_tensors
        b = beta.detach()  # the bug: "the slope is a constant here"
        s = torch.sigmoid(b * x)
        ds = s * (1 - s)
        return grad * (s + x * b * ds), (grad * x * x * ds).sum_to_size(beta.shape)


class DetachedSwish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5]).view(1, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return DetachedSwishFunction.apply(x, self.beta)


LAYER = DetachedSwish
