"""Correct: a Fourier neural operator's spectral convolution (Li et al., as neuraloperator
writes it): rfft, the lowest modes multiplied by learned complex weights, irfft. Its weights
are complex: layer.double() leaves them complex64 (the layer casts them to the spectrum's
dtype), a cast with .to(dtype) would have dropped their imaginary parts, and the gradient check
makes them complex128 in its float64 copy and differences them as their real and imaginary
parts (and gradgrad and forward_ad, run here too, differentiate them the same way)."""

import torch
from torch import nn

LAYOUTS = ["3,4,16:BCT"]
EXPECT_FAIL: set[str] = set()
ENABLE = ["gradgrad", "forward_ad"]
EXPECT_NOTES = {"gradients": "stay(s) complex64 under layer.double()"}


class SpectralConv1d(nn.Module):
    def __init__(self, channels: int = 4, modes: int = 5) -> None:
        super().__init__()
        self.modes = modes
        real = torch.linspace(-1, 1, channels * channels * modes).view(channels, channels, modes)
        self.weight = nn.Parameter(torch.complex(real, real.flip(-1)) / channels)

    def forward(self, x):
        spectrum = torch.fft.rfft(x)
        out = torch.zeros(x.shape[0], self.weight.shape[1], spectrum.shape[-1], dtype=spectrum.dtype,
                          device=x.device)
        weight = self.weight.to(spectrum.dtype)
        out[..., :self.modes] = torch.einsum("bix,iox->box", spectrum[..., :self.modes], weight)
        return torch.fft.irfft(out, n=x.shape[-1])


LAYER = SpectralConv1d
