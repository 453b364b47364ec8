"""Correct: a layer that registers its parameters and also keeps them in a plain dict, as
ncps' LTC cell does (``self._params["w"]``). On a GPU ``.to()`` replaces each Parameter's
data in place, so the dict reads the moved ones; moving to meta makes new Parameter objects,
and meta_device must not blame the layer for a reference a GPU would have kept valid."""

import torch
from torch import nn

LAYOUTS = ["4,5:BC"]
EXPECT_FAIL: set[str] = set()


class DictParameters(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self._params: dict[str, nn.Parameter] = {}
        for name, value in (("w", torch.linspace(-1, 1, 25).view(5, 5)), ("b", torch.linspace(0, 0.5, 5))):
            self._params[name] = nn.Parameter(value)
            self.register_parameter(name, self._params[name])

    def forward(self, x):
        return torch.tanh(x @ self._params["w"] + self._params["b"])


LAYER = DictParameters
