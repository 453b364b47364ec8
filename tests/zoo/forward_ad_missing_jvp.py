"""Broken for forward mode: a correct Swish with a learnable per-channel beta and a
hand-written backward, but no ``jvp``. Every default check passes; ``torch.func.jvp``,
``jacfwd`` and forward-mode AD raise on it, so the opt-in forward_ad check must fail and say
that the Function needs a jvp (the bundled SReLU and PReLU define one)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"forward_ad"}
ENABLE = ("forward_ad",)


class NoJvpSwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        ctx.save_for_backward(x, beta)
        return x * torch.sigmoid(beta * x)

    @staticmethod
    def backward(ctx, grad):
        x, beta = ctx.saved_tensors
        s = torch.sigmoid(beta * x)
        ds = s * (1 - s)
        return grad * (s + x * beta * ds), (grad * x * x * ds).sum_to_size(beta.shape)


class NoJvpSwish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5]).view(1, 3, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return NoJvpSwishFunction.apply(x, self.beta)


LAYER = NoJvpSwish
