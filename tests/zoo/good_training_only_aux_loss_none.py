"""Correct: a mixture of two experts that returns its output and a load-balancing loss in
training, and None in place of the loss in eval (``return y, aux if self.training else None``):
predict has one tensor fewer, in the same structure."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()


class TwoExperts(nn.Module):
    def __init__(self, features: int = 6) -> None:
        super().__init__()
        self.router = nn.Linear(features, 2)
        self.experts = nn.ModuleList(nn.Linear(features, features) for _ in range(2))

    def forward(self, x: torch.Tensor):
        gates = torch.softmax(self.router(x), dim=-1)
        y = sum(gates[:, i:i + 1] * expert(x) for i, expert in enumerate(self.experts))
        balance = (gates.mean(0) ** 2).sum() * 2 if self.training else None
        return y, balance


LAYER = TwoExperts
