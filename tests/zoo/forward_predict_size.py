"""Broken: forward returns a different size than predict (a training-only reshape)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"forward_predict_agree"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            return x.flatten(1)
        return x


LAYER = Layer
