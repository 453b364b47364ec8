"""PReLU with a per-channel learnable slope and a hand-written backward.

``y = x`` where ``x > 0``, else ``slope * x``. Give ``num_channels`` up front, or leave it
out and let ``initialize(layout)`` size the slope from the layout's C dimension (one
shared slope when the layout has no C). Only torch is imported, so the file works
without layercheck installed.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch
from torch import Tensor, nn

__all__ = ["PReLU"]


class _Layout(Protocol):
    size: tuple[int, ...]
    format: str

    def finddim(self, label: str) -> tuple[int, ...]: ...


def _sum_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``grad`` over the dimensions its input was broadcast along."""
    return grad.sum_to_size(shape)


def _broadcastable(param: Tensor, ndim: int, channel_dim: int | None) -> Tensor:
    """View a per-channel parameter so that it broadcasts along ``channel_dim`` of an ``ndim`` input."""
    shape = [1] * ndim
    if channel_dim is not None:
        shape[channel_dim] = -1
    return param.view(shape)


class _PReLUFunction(torch.autograd.Function):
    """``where(x > 0, x, slope * x)``; the slope broadcasts against ``x``.

    ``forward`` takes no ``ctx`` and ``setup_context`` saves what the derivatives need, so
    torch.func (``vmap``, ``grad``) can run it with a generated vmap rule; ``jvp`` gives
    forward-mode derivatives.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, slope: Tensor) -> Tensor:
        return torch.where(x > 0, x, x * slope)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, Tensor], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, Tensor | None]:
        x, slope = ctx.saved_tensors
        positive = x > 0
        grad_x = grad_slope = None
        if ctx.needs_input_grad[0]:
            grad_x = _sum_to(torch.where(positive, grad, grad * slope), x.shape)
        if ctx.needs_input_grad[1]:
            grad_slope = _sum_to(torch.where(positive, 0.0, grad * x), slope.shape)
        return grad_x, grad_slope

    @staticmethod
    def jvp(ctx: Any, x_t: Tensor | None, slope_t: Tensor | None) -> Tensor:
        """The output's tangent for the inputs' tangents (None: that input has none)."""
        x, slope = ctx.saved_tensors
        x_t = torch.zeros_like(x) if x_t is None else x_t
        slope_t = torch.zeros_like(slope) if slope_t is None else slope_t
        return torch.where(x > 0, x_t, slope * x_t + x * slope_t)


class PReLU(nn.Module):
    """Parametric ReLU with one learnable slope per channel.

    ``channel_dim`` is the input dimension the slope runs along: given explicitly, taken
    from the layout's C dimension in ``initialize``, or else 1 (PyTorch's NCHW).
    """

    slope: nn.Parameter | None

    def __init__(self, num_channels: int | None = None, init: float = 0.25, channel_dim: int | None = None) -> None:
        super().__init__()
        self.init = init
        self._channel_dim_given = channel_dim is not None
        self.channel_dim: int | None = channel_dim
        self.register_parameter("slope", None)
        if num_channels is not None:
            if channel_dim is None:
                self.channel_dim = 1
            self.slope = nn.Parameter(torch.full((num_channels,), float(init)))

    def initialize(self, layout: _Layout) -> None:
        """Create the slope from the layout's C dimension; an existing slope is kept as it is."""
        if not self._channel_dim_given:
            found = layout.finddim("C")
            if found:
                self.channel_dim = found[0]
            elif self.slope is None:
                self.channel_dim = None  # no C: one slope shared by every element
        channels = 1 if self.channel_dim is None else layout.size[self.channel_dim]
        if self.slope is None:
            self.slope = nn.Parameter(torch.full((channels,), float(self.init)))
        elif self.slope.numel() not in (1, channels):
            raise ValueError(f"PReLU has {self.slope.numel()} channels, the layout {layout} has {channels}")

    def forward(self, x: Tensor) -> Tensor:
        if self.slope is None:
            raise RuntimeError("PReLU: the slope does not exist yet; pass num_channels or call initialize(layout)")
        return _PReLUFunction.apply(x, _broadcastable(self.slope, x.ndim, self.channel_dim))

    def extra_repr(self) -> str:
        channels = None if self.slope is None else self.slope.numel()
        return f"num_channels={channels}, channel_dim={self.channel_dim}"
