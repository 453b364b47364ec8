"""Correct: torch.nn.Linear must pass every default check, export and compile."""

from torch import nn

LAYER = nn.Linear
ARGS = (5, 2)
LAYOUTS = ["4,3,5:BUC"]
ENABLE = ("export", "compile")
EXPECT_FAIL: set[str] = set()
