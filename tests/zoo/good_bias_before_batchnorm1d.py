"""Correct: Linear (with its default bias) followed by BatchNorm1d: the bias is subtracted with
the batch mean in training, so its exact gradient is zero (see good_bias_before_batchnorm.py)."""

from torch import nn

LAYOUTS = ["4,8:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "parameter 'linear.bias' has no effect on the output"}


class LinearBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(8, 6)
        self.bn = nn.BatchNorm1d(6)

    def forward(self, x):
        return self.bn(self.linear(x))


LAYER = LinearBN
