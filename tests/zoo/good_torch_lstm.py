"""Correct: torch.nn.LSTM must pass every default check."""

from torch import nn

LAYER = nn.LSTM
ARGS = (5, 4,)
LAYOUTS = ["6,3,5:TBC"]
EXPECT_FAIL: set[str] = set()
