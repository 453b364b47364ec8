"""The layer's own BaseException subclass, raised in predict."""

from torch import nn

CHECK = "predict_runs"
CAUSE = "LayerQuit: stop here"


class LayerQuit(BaseException):
    pass


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            raise LayerQuit("stop here")
        return x
