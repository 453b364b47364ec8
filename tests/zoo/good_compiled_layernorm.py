"""Correct: torch.nn.LayerNorm must pass every default check, export and compile."""

from torch import nn

LAYER = nn.LayerNorm
ARGS = ([5],)
LAYOUTS = ["4,3,5:BUC"]
ENABLE = ("export", "compile")
EXPECT_FAIL: set[str] = set()
