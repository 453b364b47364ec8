"""Correct: torch.nn.Dropout must pass every default check."""

from torch import nn

LAYER = nn.Dropout
ARGS = ()
LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
