"""Broken: a sharp softmax (temperature 0.05) written as exp(x / t) / sum(exp(x / t)) without
subtracting the maximum. On standard-normal inputs the largest logit stays below 88.7, where
float32's exp overflows; once an input passes 4.4 it does: inf / inf is NaN in float32, while
float64 computes a probability. gradients[float32] runs the draw into the tails in float32
too and fails, saying where and from what magnitude (Note [tails in float32])."""

import torch

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"gradients"}


class SharpSoftmax(torch.nn.Module):
    def __init__(self, temperature=0.05):
        super().__init__()
        self.temperature = temperature

    def forward(self, x):
        e = torch.exp(x / self.temperature)  # the bug: torch.softmax subtracts the maximum first
        return e / e.sum(dim=1, keepdim=True)


LAYER = SharpSoftmax
