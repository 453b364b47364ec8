"""Broken for copies: a gated layer whose forward hook closes over ``self`` (``lambda module,
args, out: out * self.gain``). A deep copy copies the hook's registration but not the closure:
the copy keeps multiplying by the original's gain. An EMA or SWA copy then follows the live
model as it trains. Every other check uses one layer at a time and passes; copy must fail and
name the hook. (The lambda cannot be pickled either: torch.save fails too.)"""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"copy"}


class Gated(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.gain = nn.Parameter(torch.linspace(0.5, 1.5, 6))
        self.register_forward_hook(lambda module, args, out: out * self.gain)  # the bug: self, not module

    def forward(self, x):
        return torch.tanh(self.linear(x))


LAYER = Gated
