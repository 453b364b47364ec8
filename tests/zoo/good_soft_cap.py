"""Correct: tests/zoo/gradients_one_element.py's soft cap fixed the simplest way, its
hand-written backward dropped for autograd's (clamped so that the branch not taken stays
finite: log1p of a negative number below -1 would give NaN gradients through where())."""

import torch
from torch import nn

LAYOUTS = ["2,3,8:BCT"]
EXPECT_FAIL: set[str] = set()


class SoftCap(nn.Module):
    def __init__(self, threshold: float = 2.0) -> None:
        super().__init__()
        self.threshold = threshold

    def forward(self, x):
        capped = self.threshold + torch.log1p((x - self.threshold).clamp(min=0))
        return torch.where(x > self.threshold, capped, x)


LAYER = SoftCap
