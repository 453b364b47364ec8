"""Correct: Conv1d with a bias followed by InstanceNorm1d(affine=True): each observation's
channel mean is subtracted, and the bias with it, in training and in eval (no running
statistics), so the bias's exact gradient is zero in both modes."""

from torch import nn

LAYOUTS = ["2,4,16:BCS"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "parameter 'conv.bias' has no effect on the output"}


class ConvIN(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv1d(4, 6, 3, padding=1)
        self.norm = nn.InstanceNorm1d(6, affine=True)

    def forward(self, x):
        return self.norm(self.conv(x))


LAYER = ConvIN
