"""Broken: an embedding that clamps its integer indices in place (``ids.clamp_(max=...)``): the
caller's index tensor is changed (another layer that reads the same ids gets other ones)."""

from torch import nn

LAYOUTS = ["3,5:BT dtype=int64 values=0:12"]
EXPECT_FAIL = {"input_unchanged"}


class ClampedEmbedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.table = nn.Embedding(8, 4)

    def forward(self, ids):
        return self.table(ids.clamp_(max=7))  # the bug: ids.clamp(max=7)


LAYER = ClampedEmbedding
