"""Correct: a block traced with ``torch.fx.symbolic_trace``, whose tensor constant
(``torch.tensor([...])`` in the traced forward) becomes a buffer of the GraphModule. A fresh
instance and a deep copy must agree on what the state dict holds."""

import torch
from torch import nn

LAYOUTS = ["4,4:BC"]
EXPECT_FAIL: set[str] = set()


class _Scaled(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return torch.tanh(self.linear(x)) * torch.tensor([1.0, 0.5, 2.0, -1.0])


class Traced(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = torch.fx.symbolic_trace(_Scaled())

    def forward(self, x):
        return self.net(x)


LAYER = Traced
