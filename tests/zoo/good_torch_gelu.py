"""Correct: torch.nn.GELU must pass every default check."""

from torch import nn

LAYER = nn.GELU
ARGS = ()
LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()
