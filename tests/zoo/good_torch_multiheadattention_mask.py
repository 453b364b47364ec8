"""Correct: torch.nn.MultiheadAttention (batch_first) with a boolean ``key_padding_mask`` passed
by keyword and ``need_weights=False``: the mask is drawn as booleans (True = padding, p=0.25),
never differenced, and follows its observation when the batch is split."""

from torch import nn

LAYOUTS = ["3,4,8:BTC", "3,4,8:BTC", "3,4,8:BTC"]
CALL_KWARGS = {"key_padding_mask": "3,4:BT dtype=bool values=0.25", "need_weights": False}
ARGS = (8, 2)
KWARGS = {"batch_first": True}
EXPECT_FAIL: set[str] = set()

LAYER = nn.MultiheadAttention
