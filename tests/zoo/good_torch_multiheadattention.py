"""Correct: torch.nn.MultiheadAttention, three inputs (query, key, value) and two outputs
(attention output, averaged weights), must pass every default check."""

from torch import nn

LAYER = nn.MultiheadAttention
ARGS = (8, 2)
LAYOUTS = ["5,3,8:TBC", "6,3,8:TBC", "6,3,8:TBC"]
EXPECT_FAIL: set[str] = set()
