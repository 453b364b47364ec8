"""Correct: a layer with a method named ``initialize`` that is its own, not layercheck's
``initialize(*layouts)`` hook: segmentation_models_pytorch's models have an ``initialize()``
that initialises their decoder and head, and call it in their constructor. It takes no layout,
so layercheck must not call it with one (it raised, failing signatures and initialize), and a
second method with only options (``reinitialize(gain=...)``-like) is left alone too."""

import torch
from torch import nn

LAYOUTS = ["2,4,6,6:BCSS"]
EXPECT_FAIL: set[str] = set()


class Head(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 3, 3, padding=1)
        self.initialize()

    def initialize(self) -> None:
        nn.init.kaiming_uniform_(self.conv.weight, mode="fan_in", nonlinearity="relu")
        nn.init.zeros_(self.conv.bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.conv(x))


class OptionsOnly(Head):
    def initialize(self, gain: float = 1.0) -> None:  # type: ignore[override]
        nn.init.xavier_uniform_(self.conv.weight, gain=gain)
        nn.init.zeros_(self.conv.bias)


LAYER = Head
