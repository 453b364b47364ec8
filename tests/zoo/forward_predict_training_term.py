"""Broken: a layer with a training-only auxiliary loss (allowed to differ) whose main output
also gets a term in training only: the loss must not excuse the output."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"forward_predict_agree"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor):
        y = torch.tanh(x)
        loss = x.new_zeros(())
        if self.training:
            loss = (y ** 2).mean()
            y = y + 0.01 * x  # bug: a term in training only
        return y, loss


LAYER = Layer
