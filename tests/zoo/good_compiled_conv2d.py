"""Correct: torch.nn.Conv2d must pass every default check, export and compile."""

from torch import nn

LAYER = nn.Conv2d
ARGS = (3, 4, 3)
LAYOUTS = ["2,3,6,6:BCSS"]
ENABLE = ("export", "compile")
EXPECT_FAIL: set[str] = set()
