"""SReLU: S-shaped ReLU with four per-channel learnable parameters and a hand-written backward.

``tl``/``al`` are the left threshold and slope, ``tr``/``ar`` the right ones; the math and
its backward live in ``srelu_function.py`` (``SReLUFunction``), which this module calls.
Give ``num_channels`` up front, or leave it out and let ``initialize(layout)`` size the
parameters from the layout's C dimension. Only torch is imported, so the file works
without layercheck installed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Protocol

import torch
from torch import Tensor, nn

__all__ = ["SReLU"]


def _load_srelu_function() -> type[torch.autograd.Function]:
    """Load the sibling ``srelu_function.py`` by path: this file may be loaded by path too."""
    name = f"{__name__}_srelu_function"
    if name not in sys.modules:
        path = Path(__file__).with_name("srelu_function.py")
        spec = importlib.util.spec_from_file_location(name, path)
        if spec is None or spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # torch.compile looks the Function's module up by name
        spec.loader.exec_module(module)
    return sys.modules[name].SReLUFunction


try:
    from .srelu_function import SReLUFunction as _SReLUFunction
except ImportError:
    _SReLUFunction = _load_srelu_function()

# Standard-normal inputs reach all three branches, and ar != 1 keeps the right branch
# distinguishable from the identity (and its gradient from the middle branch's).
_INIT = {"tl": -1.0, "al": 0.1, "tr": 1.0, "ar": 0.5}


class _Layout(Protocol):
    size: tuple[int, ...]
    format: str

    def finddim(self, label: str) -> tuple[int, ...]: ...


def _broadcastable(param: Tensor, ndim: int, channel_dim: int | None) -> Tensor:
    """View a per-channel parameter so that it broadcasts along ``channel_dim`` of an ``ndim`` input."""
    shape = [1] * ndim
    if channel_dim is not None:
        shape[channel_dim] = -1
    return param.view(shape)


class SReLU(nn.Module):
    """S-shaped ReLU with a left threshold/slope ``tl``/``al`` and right ``tr``/``ar`` per channel.

    ``channel_dim`` is the input dimension the parameters run along: given explicitly,
    taken from the layout's C dimension in ``initialize``, or else 1 (PyTorch's NCHW).
    """

    tl: nn.Parameter | None
    al: nn.Parameter | None
    tr: nn.Parameter | None
    ar: nn.Parameter | None

    def __init__(self, num_channels: int | None = None, channel_dim: int | None = None) -> None:
        super().__init__()
        self._channel_dim_given = channel_dim is not None
        self.channel_dim: int | None = channel_dim
        for name in _INIT:
            self.register_parameter(name, None)
        if num_channels is not None:
            if channel_dim is None:
                self.channel_dim = 1
            self._create(num_channels)

    def _create(self, channels: int) -> None:
        for name, value in _INIT.items():
            setattr(self, name, nn.Parameter(torch.full((channels,), value)))

    def initialize(self, layout: _Layout) -> None:
        """Create the parameters from the layout's C dimension; existing ones are kept as they are."""
        if not self._channel_dim_given:
            found = layout.finddim("C")
            if found:
                self.channel_dim = found[0]
            elif self.tl is None:
                self.channel_dim = None  # no C: one set of parameters shared by every element
        channels = 1 if self.channel_dim is None else layout.size[self.channel_dim]
        if self.tl is None:
            self._create(channels)
        elif self.tl.numel() not in (1, channels):
            raise ValueError(f"SReLU has {self.tl.numel()} channels, the layout {layout} has {channels}")

    def forward(self, x: Tensor) -> Tensor:
        params = [getattr(self, name) for name in _INIT]
        if any(p is None for p in params):
            raise RuntimeError("SReLU: the parameters do not exist yet; pass num_channels or call initialize(layout)")
        return _SReLUFunction.apply(x, *(_broadcastable(p, x.ndim, self.channel_dim) for p in params))

    def extra_repr(self) -> str:
        channels = None if self.tl is None else self.tl.numel()
        return f"num_channels={channels}, channel_dim={self.channel_dim}"
