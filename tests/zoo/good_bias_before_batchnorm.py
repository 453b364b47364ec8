"""Correct: the most common convolutional block, with PyTorch's defaults — a convolution with a
bias, BatchNorm2d, ReLU. In training mode BatchNorm subtracts each channel's batch mean, and the
bias with it: its exact gradient is zero, float64 returns ~1e-15 and float32 the rounding left
over from a sum of terms that cancel (~1e-6). Comparisons must judge those elements against the
layer's own rounding, and the gradient check says, as a note, that the bias does nothing."""

from torch import nn

LAYOUTS = ["4,4,8,8:BCSS"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "parameter 'conv.bias' has no effect on the output"}


class ConvBN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(4, 6, 3, padding=1)  # bias=True, the default
        self.bn = nn.BatchNorm2d(6)

    def forward(self, x):
        return self.bn(self.conv(x)).relu()


LAYER = ConvBN
