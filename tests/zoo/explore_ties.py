"""Broken only where values tie: a min-max scaling of each row to [0, 1] divides by max - min,
which is zero when every value of a row ties with its maximum (a constant row: a padded or
saturated feature). Its outputs are then 0 / 0 = NaN. Standard-normal rows never tie;
``--explore``'s constant rows do."""

import torch
from torch import nn

LAYOUTS = ["3,5:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_FAIL_EXPLORED = {"finite"}


class MinMaxScale(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        low = x.amin(dim=-1, keepdim=True)
        high = x.amax(dim=-1, keepdim=True)
        return (x - low) / (high - low)


LAYER = MinMaxScale
