"""Correct: torch.nn.Embedding, whose input is integer indices: declared as
``dtype=int64 values=0:10`` (integers in [0, 10)), never differenced or cast to float; the
gradient check judges the table's gradient."""

from torch import nn

LAYOUTS = ["3,5:BT dtype=int64 values=0:10"]
ARGS = (10, 4)
EXPECT_FAIL: set[str] = set()

LAYER = nn.Embedding
