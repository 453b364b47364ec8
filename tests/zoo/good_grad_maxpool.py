"""Correct: convolution, ReLU and max-pooling (torch.nn): the max-pool's gradient flows to one
element per window, and a step that changes which element wins is a kink."""

from torch import nn

LAYOUTS = ["2,3,8,8:BCSS"]
EXPECT_FAIL: set[str] = set()


class ConvPool(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x):
        return self.pool(nn.functional.relu(self.conv(x)))


LAYER = ConvPool
