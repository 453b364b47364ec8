"""GeneratorExit raised in predict: a BaseException that `except Exception` lets through."""

from torch import nn

CHECK = "predict_runs"
CAUSE = "GeneratorExit"


class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            raise GeneratorExit
        return x
