"""Correct: several outputs in nested tuples — (y, (y², sum over channels), index of the
largest element). The integer index is not differentiable and is left out of the gradient
checks; every floating output takes part."""

import torch
from torch import nn

LAYOUTS = ["3,4,5:BCU"]
EXPECT_FAIL: set[str] = set()


class NestedOutputs(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.linspace(0.5, 1.5, 4).view(1, 4, 1))

    def forward(self, x: torch.Tensor):
        y = torch.sin(x) * self.weight
        return y, (y * y, y.sum(dim=1)), y.flatten(1).argmax(dim=1)


LAYER = NestedOutputs
