"""Correct: a layer that keeps its configuration in a tuple subclass of its own whose len()
raises, as e3nn's Irreps does (a tuple of (multiplicity, irrep) pairs whose length would be
ambiguous). Comparing the layer's attributes before and after a call must not trip on it."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL: set[str] = set()


class Irreps(tuple):
    def __len__(self) -> int:
        raise NotImplementedError  # the number of irreps or of dimensions? e3nn refuses to say


class IrrepsLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.irreps_in = Irreps(((2, "0e"), (1, "1o")))
        self.weight = nn.Parameter(torch.linspace(-1, 1, 25).view(5, 5))

    def forward(self, x):
        return x @ self.weight


LAYER = IrrepsLinear
