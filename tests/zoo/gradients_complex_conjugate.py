"""Broken: a spectral multiplication written as a Function whose backward forgets the complex
conjugate in the weight's gradient ((grad * z).sum(0) instead of (grad * z.conj()).sum(0)): the
classic complex-autograd bug. Only the weight's imaginary direction shows it; gradients must
catch it, differencing the complex weight as its real and imaginary parts."""

import torch
from torch import nn

LAYOUTS = ["3,4,8:BCT"]
EXPECT_FAIL = {"gradients"}


class SpectralScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, z, w):
        ctx.save_for_backward(z, w)
        return z * w

    @staticmethod
    def backward(ctx, grad):
        z, w = ctx.saved_tensors
        return grad * w.conj(), (grad * z).sum(0)  # bug: z.conj()


class FourierFilter(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        real = torch.linspace(-1, 1, 20).view(4, 5)
        self.weight = nn.Parameter(torch.complex(real, real.flip(-1)))

    def forward(self, x):
        spectrum = torch.fft.rfft(x)
        return torch.fft.irfft(SpectralScale.apply(spectrum, self.weight.to(spectrum.dtype)), n=x.shape[-1])


LAYER = FourierFilter
