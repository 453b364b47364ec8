"""Broken for whole-model saving: a layer that keeps its activation as a lambda attribute. A deep
copy works (functions are copied by reference), but ``torch.save(model)`` and anything else that
pickles the model (multiprocessing, Ray) raise "Can't pickle local object". copy must fail and
name the attribute; every other check passes."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"copy"}


class Activated(nn.Module):
    def __init__(self, slope: float = 0.1) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.activation = lambda x: torch.where(x > 0, x, slope * x)  # the bug: a lambda cannot be pickled

    def forward(self, x):
        return self.activation(self.linear(x))


LAYER = Activated
