"""Correct: Swish (x * sigmoid(beta * x)) with a learnable per-channel beta and a hand-written
backward: smooth, curved everywhere, so only a central difference is accurate.
First-order only: backward uses the sigmoid saved from forward, which carries no graph,
so its double backward is wrong (the opt-in gradgrad check says so; it is not enabled here)."""

import torch
from torch import nn

LAYOUTS = ["4,5,6,6:BCSS"]
EXPECT_FAIL: set[str] = set()


class SwishFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, beta):
        s = torch.sigmoid(beta * x)
        ctx.save_for_backward(x, beta, s)
        return x * s

    @staticmethod
    def backward(ctx, grad):
        x, beta, s = ctx.saved_tensors
        ds = s * (1 - s)
        grad_x = grad * (s + x * beta * ds) if ctx.needs_input_grad[0] else None
        grad_beta = (grad * x * x * ds).sum_to_size(beta.shape) if ctx.needs_input_grad[1] else None
        return grad_x, grad_beta


class Swish(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.beta = nn.Parameter(torch.tensor([0.5, 1.0, 1.5, 2.0, 1.2]).view(1, 5, 1, 1))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return SwishFunction.apply(x, self.beta)


LAYER = Swish
