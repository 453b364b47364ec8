"""Correct: an output gate initialised wide open, sigmoid(W·x + b) with W zero and b = 13.5
(lucidrains' En-transformer initialises its output gates so, with b = 10). The gate is the
constant 1 - 1.37e-6, 23 float32 spacings below 1: its derivative s·(1 - s) is 4% off in
float32, the same in every element, and every gradient through it carries that error. No
one-ulp move of the inputs and parameters changes the constant's rounding, so the perturbed
runs' spread misses it; the rounding floor has to see the rounding of the constant itself
(Note [emulated rounding] in layercheck/support/calibration.py)."""

import torch
from torch import nn

LAYOUTS = ["4,6,8:BTC"]
EXPECT_FAIL: set[str] = set()


class SaturatedGate(nn.Module):
    def __init__(self, dim: int = 8) -> None:
        super().__init__()
        self.value = nn.Linear(dim, dim)
        self.gate = nn.Linear(dim, dim)
        nn.init.zeros_(self.gate.weight)
        nn.init.constant_(self.gate.bias, 13.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.value(x) * torch.sigmoid(self.gate(x))


LAYER = SaturatedGate
