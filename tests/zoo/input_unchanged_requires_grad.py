"""Broken: marginals as the gradient of a log-partition function, taken by switching on the
gradient of the caller's tensor itself (torch-struct's CRFs do this): after predict the
caller's input requires grad, so its own in-place writes to it raise."""

import torch
from torch import nn

LAYOUTS = ["4,3,5:BCU"]
EXPECT_FAIL = {"input_unchanged"}


class Layer(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        differentiable = torch.is_grad_enabled()
        with torch.enable_grad():
            if not x.requires_grad:
                x.requires_grad_(True)  # bug: the caller's tensor (x.detach().requires_grad_() is a copy)
            partition = torch.logsumexp(x, dim=1).sum()
            (marginals,) = torch.autograd.grad(partition, x, create_graph=differentiable)
        return marginals


LAYER = Layer
