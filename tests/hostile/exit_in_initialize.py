"""SystemExit(0) raised by the initialize hook."""

from torch import nn

CHECK = None
CAUSE = "SystemExit(0)"


class Layer(nn.Module):
    def initialize(self, layout):
        raise SystemExit(0)

    def forward(self, x):
        return x
