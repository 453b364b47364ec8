"""Broken only at odd batch sizes of 3 and more: a per-channel scale whose hand-written backward
sums the weight's gradient two observations at a time, as its unrolled kernel does, and pairs the
odd one out with its neighbour's input. At the declared batch of 4 it is right; at 3 the weight's
gradient is wrong (at 1 the backward raises: a batch size it refuses). ``--explore`` finds it."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"gradients"}


class PairedScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight):
        ctx.save_for_backward(x, weight)
        return x * weight.view(1, -1, 1)

    @staticmethod
    def backward(ctx, grad):
        x, weight = ctx.saved_tensors
        batch = x.shape[0]
        grad_weight = torch.zeros_like(weight)
        for b in range(0, batch - 1, 2):  # two observations at a time
            grad_weight += (grad[b] * x[b] + grad[b + 1] * x[b + 1]).sum(-1)
        if batch % 2:  # the odd one out
            grad_weight += (grad[-1] * x[-2]).sum(-1)
        return grad * weight.view(1, -1, 1), grad_weight


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.tensor([0.5, -1.0, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return PairedScale.apply(x, self.weight)


LAYER = Scale
