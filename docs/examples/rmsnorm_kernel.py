"""An RMS norm written as a fused kernel (an autograd.Function with a hand-written backward),
and the plain PyTorch module it replaces: docs/howto/reference.md checks one against the other.

RMSNormKernel keeps the running sum of squares in the input's dtype, 8 columns at a time, where
it should accumulate in float32: right in float32 and float64, several times worse than the
reference in bfloat16 and float16. RMSNormFixed accumulates in float32 and passes."""

import torch
from torch import nn


class RMSNormRef(nn.Module):
    """The reference: PyTorch ops, statistics in float32 for low-precision inputs."""

    def __init__(self, dim: int = 1024, eps: float = 1e-6) -> None:
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        wide = x.float() if x.dtype in (torch.float16, torch.bfloat16) else x
        normed = wide * torch.rsqrt(wide.pow(2).mean(-1, keepdim=True) + self.eps)
        return normed.to(x.dtype) * self.weight


def _mean_square(x: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    total = torch.zeros(x.shape[:-1], dtype=acc, device=x.device)
    for start in range(0, x.shape[-1], 8):  # a kernel's loop over blocks of the row
        total = total + x[..., start:start + 8].to(acc).pow(2).sum(-1)
    return (total / x.shape[-1]).unsqueeze(-1)


class _RMSNorm(torch.autograd.Function):
    ACCUMULATE_IN_INPUT_DTYPE = True

    @classmethod
    def forward(cls, ctx, x, weight, eps):
        wide = torch.float64 if x.dtype == torch.float64 else torch.float32
        acc = x.dtype if cls.ACCUMULATE_IN_INPUT_DTYPE else wide
        r = torch.rsqrt(_mean_square(x, acc).to(wide) + eps)
        ctx.save_for_backward(x, weight, r)
        return (x.to(wide) * r).to(x.dtype) * weight

    @staticmethod
    def backward(ctx, g):
        x, weight, r = ctx.saved_tensors
        wide = r.dtype
        xw, gw = x.to(wide), g.to(wide) * weight.to(wide)
        n = x.shape[-1]
        dx = r * gw - xw * r.pow(3) * (gw * xw).sum(-1, keepdim=True) / n
        dweight = (g.to(wide) * xw * r).reshape(-1, n).sum(0)
        return dx.to(x.dtype), dweight.to(weight.dtype), None


class _RMSNormFixed(_RMSNorm):
    ACCUMULATE_IN_INPUT_DTYPE = False


class RMSNormKernel(RMSNormRef):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNorm.apply(x, self.weight, self.eps)


class RMSNormFixed(RMSNormRef):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _RMSNormFixed.apply(x, self.weight, self.eps)
