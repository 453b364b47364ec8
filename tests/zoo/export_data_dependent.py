"""Broken for torch.export: forward guards against large inputs with a Python ``if`` on a
tensor's value. Eager runs it (the guard never fires on ordinary inputs) and every default
check passes; torch.export cannot capture a branch that depends on values, so the layer
cannot be exported. Fix: branch-free code (``x * torch.clamp(1e4 / peak, max=1.0)``) or
``torch.cond``."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
ENABLE = ("export",)
EXPECT_FAIL = {"export"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        peak = x.abs().amax()
        if peak > 1e4:  # the bug for export: Python control flow on a tensor's value
            x = x * (1e4 / peak)
        return torch.tanh(x) * 2.0


LAYER = Layer
