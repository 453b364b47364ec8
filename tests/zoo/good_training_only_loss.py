"""Correct: a soft quantiser that returns its output and a commitment loss, computed in
training only and zero in eval (as vector-quantize-pytorch's quantisers do). The zero it
starts from is a buffer the training forward marks ``requires_grad_()``: no graph is held,
but autograd accumulates a ``.grad`` into it, which state_valid notes."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"state_valid": "requires grad after forward"}


class SoftQuantizer(nn.Module):
    def __init__(self, channels: int = 3) -> None:
        super().__init__()
        self.centres = nn.Parameter(torch.linspace(-1.0, 1.0, channels))
        self.register_buffer("zero", torch.tensor(0.0), persistent=False)

    def forward(self, x: torch.Tensor):
        y = torch.tanh(x) + 0.1 * torch.sin(x - self.centres.view(1, -1, 1))
        loss = self.zero
        if self.training:
            loss.requires_grad_()
            loss = loss + ((y - x) ** 2).mean()
        return y, loss


LAYER = SoftQuantizer
