"""Correct: patch dropout (FLIP, timm's PatchDropout). In training it keeps a random half of
the tokens, in eval all of them: the training output is shorter along the token dimension by
design, and a transformer after it takes either."""

import torch
from torch import nn

LAYOUTS = ["3,8,4:BTC"]
EXPECT_FAIL: set[str] = set()


class PatchDropout(nn.Module):
    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return x
        batch, tokens, _ = x.shape
        keep = max(1, int(tokens * (1 - self.p)))
        kept = torch.argsort(torch.randn(batch, tokens, device=x.device), dim=-1)[:, :keep]
        return x.gather(1, kept.unsqueeze(-1).expand(-1, -1, x.shape[-1]))


LAYER = PatchDropout
