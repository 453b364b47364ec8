"""Broken: an SReLU whose hand-written backward takes a "fast path" for large inputs and
returns the incoming gradient unchanged where x > 2.5, forgetting the right slope ``ar``.
Only 0.6% of standard-normal elements are affected; the forward is right. gradcheck's fast
mode passes this at 24,24,20,128 (benchmarks/gradients.py); the gradients check must not."""

import torch
from torch import nn

LAYOUTS = ["8,8,4,16:SSCB"]
EXPECT_FAIL = {"gradients"}


class RegionBugSReLUFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tl, al, tr, ar):
        ctx.save_for_backward(x, tl, al, tr, ar)
        return torch.where(x >= tr, tr + ar * (x - tr), torch.where(x <= tl, tl + al * (x - tl), x))

    @staticmethod
    def backward(ctx, grad):
        x, tl, al, tr, ar = ctx.saved_tensors
        right = x >= tr
        left = (x <= tl) & ~right
        grad_x = torch.where(right, grad * ar, torch.where(left, grad * al, grad))
        grad_x = torch.where(x > 2.5, grad, grad_x)  # the bug: "saturated" inputs pass the gradient through
        return (
            grad_x,
            torch.where(left, grad * (1 - al), 0.0).sum_to_size(tl.shape),
            torch.where(left, grad * (x - tl), 0.0).sum_to_size(al.shape),
            torch.where(right, grad * (1 - ar), 0.0).sum_to_size(tr.shape),
            torch.where(right, grad * (x - tr), 0.0).sum_to_size(ar.shape),
        )


class RegionBugSReLU(nn.Module):
    """Per-channel thresholds and slopes along the layout's C dimension."""

    def __init__(self, channels: int | None = None) -> None:
        super().__init__()
        self.channel_dim = 1
        self.params = nn.ParameterDict()
        if channels is not None:
            self._create(channels)

    def _create(self, channels: int) -> None:
        for name, value in (("tl", -1.0), ("al", 0.1), ("tr", 1.0), ("ar", 0.5)):
            self.params[name] = nn.Parameter(torch.full((channels,), value))

    def initialize(self, layout) -> None:
        self.channel_dim = layout.finddim("C")[0]
        if not self.params:
            self._create(layout.size[self.channel_dim])

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = [1] * x.ndim
        shape[self.channel_dim] = -1
        p = {name: value.view(shape) for name, value in self.params.items()}
        return RegionBugSReLUFunction.apply(x, p["tl"], p["al"], p["tr"], p["ar"])


LAYER = RegionBugSReLU
