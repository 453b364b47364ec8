"""KeyboardInterrupt raised by the layer (not the user's Ctrl-C)."""

from torch import nn

CHECK = "predict_runs"
CAUSE = "KeyboardInterrupt"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            raise KeyboardInterrupt
        return x
