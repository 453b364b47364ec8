"""Broken under data parallelism (the opt-in ``distributed`` check): batch normalisation meant
over the global batch. It averages the mean over the ranks (an all_reduce that gradients pass
through) but takes the variance of its own rank's part of the batch: per-rank statistics where
the global batch was meant, so outputs and gradients differ from one process's on the whole
batch. In one process (no process group) it is ordinary batch normalisation, which the
default suite passes."""

import torch
import torch.distributed as dist
from torch import nn

LAYOUTS = ["8,4:BC"]
EXPECT_FAIL: set[str] = set()


def _global_mean(t: torch.Tensor) -> torch.Tensor:
    if not (dist.is_available() and dist.is_initialized()):
        return t
    from torch.distributed.nn.functional import all_reduce

    return all_reduce(t) / dist.get_world_size()


class GlobalBatchNorm(nn.Module):
    def __init__(self, features: int = 4, eps: float = 1e-5, momentum: float = 0.1) -> None:
        super().__init__()
        self.eps, self.momentum = eps, momentum
        self.weight = nn.Parameter(torch.ones(features))
        self.bias = nn.Parameter(torch.zeros(features))
        self.register_buffer("running_mean", torch.zeros(features))
        self.register_buffer("running_var", torch.ones(features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.training:
            mean = _global_mean(x.mean(0))
            var = ((x - mean) ** 2).mean(0)  # the bug: this rank's variance, not the global batch's
            with torch.no_grad():
                self.running_mean.lerp_(mean, self.momentum)
                self.running_var.lerp_(var, self.momentum)
        else:
            mean, var = self.running_mean, self.running_var
        return (x - mean) / torch.sqrt(var + self.eps) * self.weight + self.bias


LAYER = GlobalBatchNorm
