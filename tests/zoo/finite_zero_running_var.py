"""Broken: a normalisation initialises its running variance to zeros instead of ones and
divides without eps, so predict before any training step returns infinities. Training
(batch statistics) is fine."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"finite"}


class Layer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.register_buffer("running_mean", torch.zeros(channels))
        self.register_buffer("running_var", torch.zeros(channels))  # bug: should start at ones

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean, var = x.mean(dim=(0, 2)), x.var(dim=(0, 2), unbiased=False)
            with torch.no_grad():
                self.running_mean.lerp_(mean, 0.1)
                self.running_var.lerp_(var, 0.1)
            var = var + 1e-5
        else:
            mean, var = self.running_mean, self.running_var  # bug: no eps
        return (x - mean.view(1, -1, 1)) / var.sqrt().view(1, -1, 1)


LAYER = Layer
