"""Broken for training: a gated layer that keeps its gate in [0, 1] by creating the parameter
anew in every training forward (``self.gate = nn.Parameter(self.gate.clamp(0, 1))``). The
optimizer holds the parameter created at construction, which the layer no longer uses: the step
moves nothing the layer reads, and training silently leaves the gate where it was. train_step
must fail and say that the parameter did not move. backward_runs sees it too (the parameter the
layer had before the call receives no gradient), and so does backward_pure (two uses of the
layer in one graph feed two different gate tensors). Fix: ``gate = self.gate.clamp(0, 1)``."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"backward_runs", "backward_pure", "train_step"}
ENABLE = ("train_step",)


class ClampedGate(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.gate = nn.Parameter(torch.linspace(0.2, 0.8, 6))

    def forward(self, x):
        if self.training:
            self.gate = nn.Parameter(self.gate.detach().clamp(0.0, 1.0))  # the bug: a new tensor each call
        return self.linear(x) * self.gate


LAYER = ClampedGate
