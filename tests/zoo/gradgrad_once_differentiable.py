"""Broken for second derivatives: Swish with a learnable per-channel beta whose hand-written
backward is decorated with ``@once_differentiable``. First gradients are right (every default
check passes), but the double backward raises, so gradient penalties or Hessian-vector
products through the layer are impossible: the opt-in gradgrad check must fail and say why."""

import torch
from torch import nn
from torch.autograd.function import once_differentiable

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"gradgrad"}
ENABLE = ("gradgrad",)


class OnceSwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    @once_differentiable
    def backward(ctx, grad):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        return grad * (s + x * beta * ds), (grad * x * x * ds).sum_to_size(beta.shape)


class OnceSwish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5]).view(1, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return OnceSwishFunction.apply(x, self.beta)


LAYER = OnceSwish
