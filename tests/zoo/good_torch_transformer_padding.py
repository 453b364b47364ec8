"""Correct: torch.nn.TransformerEncoderLayer (batch_first, dropout 0) with a boolean
``src_key_padding_mask`` passed by keyword."""

from torch import nn

LAYOUTS = ["2,5,8:BTC"]
CALL_KWARGS = {"src_key_padding_mask": "2,5:BT dtype=bool values=0.2"}
ARGS = (8, 2)
KWARGS = {"dim_feedforward": 16, "dropout": 0.0, "batch_first": True}
EXPECT_FAIL: set[str] = set()

LAYER = nn.TransformerEncoderLayer
