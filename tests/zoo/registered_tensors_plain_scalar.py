"""Broken: a temperature kept as a plain tensor attribute: it works everywhere (a 0-dim CPU
tensor mixes with any device), but .to(), .double() and state_dict() never see it."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"registered_tensors"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.temperature = torch.tensor(0.5)  # bug: not a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x / self.temperature, dim=1)


LAYER = Layer
