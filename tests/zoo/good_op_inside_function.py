"""Correct: custom operators without a backward of their own, called only inside an
``autograd.Function``'s forward, which gives the gradient (bitsandbytes' int8 matmul calls its
quantisation operators so). One is defined through ``torch.library.Library`` with a CPU kernel,
the other with ``custom_op`` and no ``register_autograd``: autograd never records their calls, so
neither needs one, and ``op_autograd_registration`` must not ask for it."""

import torch
from torch import nn

LAYOUTS = ["3,8:BC"]
EXPECT_FAIL: set[str] = set()


def _scale(x: torch.Tensor, s: float) -> torch.Tensor:
    return x * s


def _scale_fake(x: torch.Tensor, s: float) -> torch.Tensor:
    return torch.empty_like(x)


if not hasattr(torch.ops.layercheck_zoo_inside, "scale"):  # once per process (the tests load this file often)
    torch.library.define("layercheck_zoo_inside::scale", "(Tensor x, float s) -> Tensor")
    torch.library.impl("layercheck_zoo_inside::scale", "cpu", _scale)
    torch.library.register_fake("layercheck_zoo_inside::scale", _scale_fake)


@torch.library.custom_op("layercheck_zoo_inside::shift", mutates_args=())
def shift(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return x + w


@shift.register_fake
def _(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(x + w)


class _ScaleShift(torch.autograd.Function):
    """y = 2 x + w, computed by the two operators; the gradient written here."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return shift(torch.ops.layercheck_zoo_inside.scale(x, 2.0), w)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return 2.0 * grad, grad.sum_to_size(8)


class ScaleShift(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.linspace(-1.0, 1.0, 8))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ScaleShift.apply(x, self.w)


LAYER = ScaleShift
