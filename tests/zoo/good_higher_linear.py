"""Correct: torch.nn.Linear passes every default check and both higher-derivative checks
(double backward and forward mode are torch's own)."""

from torch import nn

LAYER = nn.Linear
ARGS = (5, 3)
LAYOUTS = ["4,5:BC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")
