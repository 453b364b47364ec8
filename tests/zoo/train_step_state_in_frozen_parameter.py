"""Broken for training: a centring layer that keeps its running mean in a frozen parameter
(``nn.Parameter(..., requires_grad=False)``, "so that it is saved and moved") and updates it in
the training forward. Every call computes the right thing and every default check passes; but
the optimizer owns what ``parameters()`` lists: the running mean is handed to it, averaged by
``AveragedModel``, counted as a weight, and trained as soon as the model is unfrozen for
fine-tuning (``model.requires_grad_(True)``). train_step must fail: a frozen parameter changed in
a training step. Fix: ``self.register_buffer("running_mean", ...)``."""

import torch
from torch import nn

LAYOUTS = ["8,3:BC"]
EXPECT_FAIL = {"train_step"}
ENABLE = ("train_step",)


class RunningCentre(nn.Module):
    def __init__(self, channels: int = 3, momentum: float = 0.1) -> None:
        super().__init__()
        self.momentum = momentum
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, channels))
        self.running_mean = nn.Parameter(torch.zeros(channels), requires_grad=False)  # the bug: state as a parameter

    def forward(self, x):
        if self.training:
            mean = x.mean(dim=0)
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
        else:
            mean = self.running_mean
        return (x - mean) * self.scale


LAYER = RunningCentre
