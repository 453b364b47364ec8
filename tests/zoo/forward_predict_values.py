"""Broken: the training forward uses a different formula than predict, and nothing about
the layer (no dropout, no batch statistics, no separate predict, no self.training) says why."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"forward_predict_agree"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if torch.is_grad_enabled():  # predict runs without grad: a mode test by the back door
            return torch.tanh(x)
        return torch.tanh(x) * 1.01


LAYER = Layer
