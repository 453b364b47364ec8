"""Broken: a dropout that drops whole observations by indexing them out (``x[keep]``) instead
of zeroing them: random, like token dropping, but the batch comes out shorter in training,
and every loss after it pairs outputs with the wrong targets."""

import torch
from torch import nn

LAYOUTS = ["6,5:BC"]
EXPECT_FAIL = {"forward_predict_agree"}


class RowDropout(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        keep = torch.randperm(x.shape[0], device=x.device)[: x.shape[0] // 2]
        return x[keep] * 2


LAYER = RowDropout
