"""Broken, or an approximation the user must accept: the random-feature attention of
``good_approximate_stabiliser`` (Performer's softmax kernel, exp(q − max(q)) with the maximum
detached for stability) with an eps of 0.05 beside it. The normalisation no longer nearly
cancels the maximum, so autograd's gradient (the maximum held constant) is off the true
derivative by about a percent: gradients fails, says that the detached value is a maximum
subtracted for stability, and names the tolerance that would accept it."""

import torch
from torch import nn

LAYOUTS = ["2,5,6:BTC"]
EXPECT_FAIL = {"gradients"}


class StabilisedKernelAttention(nn.Module):
    def __init__(self, dim: int = 6, eps: float = 0.05) -> None:
        super().__init__()
        self.q = nn.Linear(dim, dim)
        self.k = nn.Linear(dim, dim)
        self.eps = eps

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        qf = torch.exp(q - q.amax(-1, keepdim=True).detach()) + self.eps
        kf = torch.exp(k - k.amax(dim=(-1, -2), keepdim=True).detach()) + self.eps  # per observation, as Performer
        kv = torch.einsum("btc,btd->bcd", kf, x)
        normaliser = torch.einsum("btc,bc->bt", qf, kf.sum(1))
        return torch.einsum("btc,bcd->btd", qf, kv) / normaliser.unsqueeze(-1)


LAYER = StabilisedKernelAttention
