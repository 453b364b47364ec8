"""Correct: a top-1 mixture of experts (Switch Transformer's routing, without a capacity
limit). On the generated inputs its router sends no token to one expert, which then gets no
gradient: on other inputs it does. backward_runs notes it instead of calling the expert unused."""

import torch
from torch import nn

LAYOUTS = ["2,3,6:BTC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"backward_runs": "only on other draws"}


class SwitchMoE(nn.Module):
    def __init__(self, features: int = 6, experts: int = 4) -> None:
        super().__init__()
        self.router = nn.Linear(features, experts, bias=False)
        self.experts = nn.ModuleList(nn.Linear(features, features) for _ in range(experts))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.reshape(-1, x.shape[-1])
        probs = torch.softmax(self.router(tokens), dim=-1)
        weight, chosen = probs.max(dim=-1)
        out = torch.zeros_like(tokens)
        for e, expert in enumerate(self.experts):
            routed = torch.where(chosen == e)[0]
            if routed.numel():
                out = out.index_add(0, routed, expert(tokens[routed]) * weight[routed, None])
        return out.reshape(x.shape)


LAYER = SwitchMoE
