"""Correct: marginals as the gradient of a log-partition function, taken inside forward on a
copy of an input given without grad (and on the input itself when it requires grad, so that
the marginals stay differentiable)."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL: set[str] = set()


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        differentiable = torch.is_grad_enabled()
        with torch.enable_grad():
            if not x.requires_grad:
                x = x.detach().requires_grad_(True)
            partition = torch.logsumexp(x, dim=1).sum()
            (marginals,) = torch.autograd.grad(partition, x, create_graph=differentiable)
        return marginals


LAYER = Layer
