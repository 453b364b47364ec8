"""Broken: learned running statistics are registered with persistent=False, so a checkpoint
does not carry them: the reloaded layer predicts with its initial statistics."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"state_dict"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(channels), persistent=False)  # bug

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean = x.mean(dim=(0, 2))
            with torch.no_grad():
                self.running_mean.lerp_(mean, 0.1)
        else:
            mean = self.running_mean
        return x - mean.view(1, -1, 1)


LAYER = Layer
