"""Correct: torch.nn.EmbeddingBag with a 2-D input of indices (one bag per row, mean mode)."""

from torch import nn

LAYOUTS = ["4,3:BT dtype=int64 values=0:12"]
ARGS = (12, 5)
KWARGS = {"mode": "mean"}
EXPECT_FAIL: set[str] = set()

LAYER = nn.EmbeddingBag
