"""Correct: torch.nn.BatchNorm2d must pass every default check."""

from torch import nn

LAYER = nn.BatchNorm2d
ARGS = (3,)
LAYOUTS = ["4,3,5,5:BCSS"]
EXPECT_FAIL: set[str] = set()
