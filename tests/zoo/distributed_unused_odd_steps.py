"""Broken under data parallelism (the opt-in ``distributed`` check): to save time, the
refinement runs on every other training step only, so ``refine``'s parameters get no gradient
on even steps and DDP raises "Expected to have finished reduction in the prior iteration" at
the step after. Each check of the default suite starts from a fresh layer (or rewinds its
step counter), so its first training call uses every parameter and the suite passes it."""

import torch
from torch import nn

LAYOUTS = ["6,4:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"state_valid": "kept in plain attributes"}


class AlternatingRefinement(nn.Module):
    def __init__(self, features: int = 4) -> None:
        super().__init__()
        self.base = nn.Linear(features, features)
        self.refine = nn.Linear(features, features)
        self.steps = 0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.base(x)
        if self.training:
            self.steps += 1
            if self.steps % 2 == 0:  # the bug: refine takes no part in even steps
                return y
        return y + self.refine(torch.tanh(y))


LAYER = AlternatingRefinement
