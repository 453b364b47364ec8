"""Broken: forward needs two inputs but the layer is checked with one layout (or the author
forgot a default): signatures must say so before anything runs."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"signatures"}  # the checks that call the layer are skipped naming it


class Layer(nn.Module):
    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        return x * mask


LAYER = Layer
