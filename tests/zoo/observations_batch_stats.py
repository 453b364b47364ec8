"""Broken: a normalisation that uses the statistics of the current batch at prediction time
too, so an observation's result depends on the rest of the batch (and a batch of one
divides by a zero spread)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"observations"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        mean = x.mean(dim=0, keepdim=True)  # bug: batch statistics in eval mode as well
        return (x - mean) / (x.std(dim=0, keepdim=True, unbiased=False) + 1e-5)


LAYER = Layer
