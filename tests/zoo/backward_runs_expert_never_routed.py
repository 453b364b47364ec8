"""Broken: a top-1 mixture of experts whose loop stops one expert short (``range(len(...) - 1)``):
tokens routed to the last expert get a zero output, and the last expert never gets a gradient,
on any input. backward_runs must still call it unused (other draws of the inputs do not help)."""

import torch
from torch import nn

LAYOUTS = ["2,3,6:BTC"]
EXPECT_FAIL = {"backward_runs"}


class SwitchMoE(nn.Module):
    def __init__(self, features: int = 6, experts: int = 3) -> None:
        super().__init__()
        self.router = nn.Linear(features, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(features, features) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(tokens), dim=-1)
        weight, chosen = probs.max(dim=-1)
        out = torch.zeros_like(tokens)
        for e in range(len(self.experts) - 1):  # the bug: the last expert is never run
            routed = torch.where(chosen == e)[0]
            if routed.numel():
                out = out.index_add(0, routed, self.experts[e](tokens[routed]) * weight[routed, None])
        return out.reshape(x.shape)


LAYER = SwitchMoE
