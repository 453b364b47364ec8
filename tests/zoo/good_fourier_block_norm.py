"""Correct: a Fourier neural operator block (neuraloperator's FNOBlocks with instance norm): a
spectral convolution with complex64 weights, a pointwise skip, InstanceNorm and GELU. The
norm's rounding makes the float32 comparisons of grad_output and others ask for the rounding
floor measured on the layer, which moves every parameter by one unit in the last place: the
complex weights' real and imaginary parts too (that raised "nextafter not implemented for
ComplexFloat" and errored grad_output)."""

import torch
from torch import nn

LAYOUTS = ["2,4,8,8:BCSS"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "stay(s) complex64 under layer.double()"}


class FourierBlock(nn.Module):
    def __init__(self, channels: int = 4, modes: int = 3) -> None:
        super().__init__()
        self.modes = modes
        real = torch.linspace(-1, 1, channels * channels * modes * modes).view(channels, channels, modes, modes)
        self.weight = nn.Parameter(torch.complex(real, real.flip(-1)) / channels)
        self.skip = nn.Conv2d(channels, channels, 1)
        self.norm = nn.InstanceNorm2d(channels, affine=True)

    def forward(self, x):
        spectrum = torch.fft.rfft2(x)
        out = torch.zeros_like(spectrum[:, :self.weight.shape[1]])
        m = self.modes
        out[..., :m, :m] = torch.einsum("bixy,ioxy->boxy", spectrum[..., :m, :m], self.weight.to(spectrum.dtype))
        y = torch.fft.irfft2(out, s=x.shape[-2:]) + self.skip(x)
        return nn.functional.gelu(self.norm(y))


LAYER = FourierBlock
