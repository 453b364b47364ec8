"""SystemExit(0) raised by the constructor."""

from torch import nn

CHECK = None
CAUSE = "SystemExit(0)"


class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        raise SystemExit(0)

    def forward(self, x):
        return x
