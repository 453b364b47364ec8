"""Correct: SReLU (per-channel learnable thresholds and slopes, kinks at both thresholds) with a
hand-written backward made of differentiable torch operations on the saved tensors, and a
hand-written ``jvp``. Its first gradient jumps at the thresholds: gradgrad must not report a
difference step that crosses one, and the jvp must agree with the differences and with
reverse mode. Passes every default check and both higher-derivative checks."""

import torch
from torch import nn

LAYOUTS = ["4,5,3,2:SSCB"]
EXPECT_FAIL: set[str] = set()
ENABLE = ("gradgrad", "forward_ad")


class SReLUWithJvp(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tl, al, tr, ar):
        ctx.save_for_backward(x, tl, al, tr, ar)
        ctx.save_for_forward(x, tl, al, tr, ar)
        return torch.where(x >= tr, tr + ar * (x - tr), torch.where(x <= tl, tl + al * (x - tl), x))

    @staticmethod
    def backward(ctx, grad):
        x, tl, al, tr, ar = ctx.saved_tensors
        right = x >= tr
        left = (x <= tl) & ~right
        return (
            torch.where(right, grad * ar, torch.where(left, grad * al, grad)),
            torch.where(left, grad * (1 - al), 0.0).sum_to_size(tl.shape),
            torch.where(left, grad * (x - tl), 0.0).sum_to_size(al.shape),
            torch.where(right, grad * (1 - ar), 0.0).sum_to_size(tr.shape),
            torch.where(right, grad * (x - tr), 0.0).sum_to_size(ar.shape),
        )

    @staticmethod
    def jvp(ctx, dx, dtl, dal, dtr, dar):
        x, tl, al, tr, ar = ctx.saved_tensors
        right = x >= tr
        left = (x <= tl) & ~right
        on_right = (1 - ar) * dtr + ar * dx + (x - tr) * dar
        on_left = (1 - al) * dtl + al * dx + (x - tl) * dal
        return torch.where(right, on_right, torch.where(left, on_left, dx))


class SReLU(nn.Module):
    """Parameters along the layout's C dimension, created in initialize."""

    def __init__(self) -> None:
        super().__init__()
        self.channel_dim = 1
        self.params = nn.ParameterDict()

    def initialize(self, layout) -> None:
        self.channel_dim = layout.finddim("C")[0]
        if not self.params:
            channels = layout.size[self.channel_dim]
            for name, value in (("tl", -1.0), ("al", 0.1), ("tr", 1.0), ("ar", 0.5)):
                self.params[name] = nn.Parameter(torch.full((channels,), value))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        shape = [1] * x.ndim
        shape[self.channel_dim] = -1
        p = {name: value.view(shape) for name, value in self.params.items()}
        return SReLUWithJvp.apply(x, p["tl"], p["al"], p["tr"], p["ar"])


LAYER = SReLU
