"""Correct: torch.nn.LayerNorm (learnable weight and bias) passes every default check and both
higher-derivative checks; its second derivatives are curved in every direction."""

from torch import nn

LAYER = nn.LayerNorm
ARGS = (6,)
LAYOUTS = ["3,4,6:BTC"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")
