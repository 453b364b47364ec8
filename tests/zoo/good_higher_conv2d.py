"""Correct: torch.nn.Conv2d passes every default check and both higher-derivative checks."""

from torch import nn

LAYER = nn.Conv2d
ARGS = (3, 4, 3)
KWARGS = {"padding": 1}
LAYOUTS = ["2,3,5,5:BCSS"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")
