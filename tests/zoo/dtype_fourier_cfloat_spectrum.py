"""Bug (of dtype only): a Fourier neural operator's spectral convolution as Li et al.'s reference
code writes it, copied into many projects: complex64 weights and an output spectrum allocated
as torch.cfloat. layer.double() leaves complex tensors alone, so in float64 the einsum mixes a
complex128 spectrum with complex64 weights and raises: dtype[float64] fails, rightly. Its
gradients are right: the gradient checks make its weights complex128 in their float64 copy,
where it runs with the cfloat spectrum as a float32 island (followed through the FFT), and must
pass it, with gradgrad and forward_ad."""

import torch
from torch import nn

LAYOUTS = ["2,4,8,8:BCSS"]
EXPECT_FAIL = {"dtype"}
ENABLE = ["gradgrad", "forward_ad"]
EXPECT_NOTES = {"gradients": "stay(s) complex64 under layer.double()"}


class SpectralConv2d(nn.Module):
    def __init__(self, in_channels: int = 4, out_channels: int = 4, modes1: int = 3, modes2: int = 3) -> None:
        super().__init__()
        self.out_channels, self.modes1, self.modes2 = out_channels, modes1, modes2
        scale = 1 / (in_channels * out_channels)
        shape = (in_channels, out_channels, modes1, modes2)
        self.weights1 = nn.Parameter(scale * torch.rand(*shape, dtype=torch.cfloat))
        self.weights2 = nn.Parameter(scale * torch.rand(*shape, dtype=torch.cfloat))

    def forward(self, x):
        x_ft = torch.fft.rfft2(x)
        out_ft = torch.zeros(x.shape[0], self.out_channels, x.size(-2), x.size(-1) // 2 + 1, dtype=torch.cfloat,
                             device=x.device)
        m1, m2 = self.modes1, self.modes2
        out_ft[:, :, :m1, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, :m1, :m2], self.weights1)
        out_ft[:, :, -m1:, :m2] = torch.einsum("bixy,ioxy->boxy", x_ft[:, :, -m1:, :m2], self.weights2)
        return torch.fft.irfft2(out_ft, s=(x.size(-2), x.size(-1)))


LAYER = SpectralConv2d
