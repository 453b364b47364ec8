"""Correct: a cross-entropy-like layer with integer class targets (``dtype=int64
values=0:5``) and per-observation losses (reduction none), a learnable temperature."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC", "4:B dtype=int64 values=0:5"]
EXPECT_FAIL: set[str] = set()


class TemperedCrossEntropy(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.temperature = nn.Parameter(torch.tensor(1.5))

    def forward(self, logits, targets):
        return nn.functional.cross_entropy(logits / self.temperature, targets, reduction="none")


LAYER = TemperedCrossEntropy
