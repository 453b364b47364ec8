"""Correct: a hand-written batch normalisation that normalises with the batch statistics in
training, updates running statistics as it goes, and has a learnable scale and shift. The
running statistics change on every training forward; the gradient does not depend on them."""

import torch
from torch import nn

LAYOUTS = ["6,3:BC"]
EXPECT_FAIL: set[str] = set()


class MiniBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.scale = nn.Parameter(torch.tensor([1.0, 0.5, 2.0]))
        self.shift = nn.Parameter(torch.tensor([0.0, 0.1, -0.2]))
        self.register_buffer("running_mean", torch.zeros(3))
        self.register_buffer("running_var", torch.ones(3))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean, var = x.mean(0), x.var(0, unbiased=False)
            with torch.no_grad():
                self.running_mean.mul_(0.9).add_(0.1 * mean)
                self.running_var.mul_(0.9).add_(0.1 * var)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + 1e-5) * self.scale + self.shift


LAYER = MiniBatchNorm
