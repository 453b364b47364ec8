"""Correct: an atrous spatial pyramid (MONAI's SimpleASPP): four dilated convolutions with a bias,
concatenated, then a 1x1 convolution and BatchNorm2d, so every one of their biases gets a
gradient that is zero by cancellation. At 14 observations of 24x24 the float32 channels-last
run leaves far more rounding in those zeros than the contiguous one: sixteen times the
contiguous run's, and up to twenty times what perturbing the contiguous run's inputs by one
unit in the last place measures (Note [rounding floor] in layercheck/support/calibration.py)."""

import torch
from torch import nn

LAYOUTS = ["16,8,24,24:BCSS"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "parameter 'branches.0.bias' has no effect on the output"}


class Layer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.branches = nn.ModuleList(
            nn.Conv2d(8, 2, kernel, padding=dilation * (kernel // 2), dilation=dilation)
            for kernel, dilation in ((1, 1), (3, 2), (3, 4), (3, 6)))
        self.mix = nn.Conv2d(8, 8, 1)
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        pyramid = torch.cat([branch(x) for branch in self.branches], dim=1)
        return nn.functional.leaky_relu(self.norm(self.mix(pyramid)))


LAYER = Layer
