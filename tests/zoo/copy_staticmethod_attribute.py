"""Broken for copies only: a layer that keeps a ``staticmethod`` object on the instance (a
pattern from configurable activations). Such an instance cannot be deep-copied or pickled
("cannot pickle 'staticmethod' object"), so EMA, SWA (``AveragedModel``) and whole-model
checkpoints raise on it; ``copy`` must fail and name the attribute. Every other check must
pass: a checker builds its layers the way users do — by calling the constructor — not by
copying one. Fix: keep the plain function (``self.activation = _gelu_tanh``)."""

import torch
from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL = {"copy"}


def _gelu_tanh(x):
    return 0.5 * x * (1 + torch.tanh(0.7978845608 * (x + 0.044715 * x**3)))


class Configurable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(6, 6)
        self.activation = staticmethod(_gelu_tanh)

    def forward(self, x):
        return self.activation(self.linear(x))


LAYER = Configurable
