"""Correct: linear attention with positive random-feature-like maps, written as Performer
writes its softmax kernel: exp(q − max(q)) with the maximum detached for stability, plus a
small eps; the keys' maximum is taken over each observation's own tokens and features
(Performer's amax over dims (-1, -2)), never over the batch. The normalisation cancels the
maximum exactly but for the eps, so autograd's
gradient (the maximum held constant) differs from the true derivative by about 1e-5 relative:
an approximation made on purpose, accepted with a note (Note [approximate detaches]).
(With k.amax() over the whole tensor, as this file had it, the eps does not cancel against
another observation's maximum: ten times larger inputs showed the batch leak under
--explore, and the observations check was right.)"""

import torch
from torch import nn

LAYOUTS = ["2,5,6:BTC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "the layer detaches smooth values"}


class StabilisedKernelAttention(nn.Module):
    def __init__(self, dim: int = 6, eps: float = 1e-4) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.eps = eps

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        qf = torch.exp(q - q.amax(-1, keepdim=True).detach()) + self.eps
        kf = torch.exp(k - k.amax(dim=(-1, -2), keepdim=True).detach()) + self.eps
        kv = torch.einsum("btc,btd->bcd", kf, x)
        normaliser = torch.einsum("btc,bc->bt", qf, kf.sum(1))
        return torch.einsum("btc,bcd->btd", qf, kv) / normaliser.unsqueeze(-1)


LAYER = StabilisedKernelAttention
