"""Correct: PyTorch's own spectral normalisation (``torch.nn.utils.parametrizations.spectral_norm``).
In training mode each call runs a power iteration under ``torch.no_grad`` and divides the weight
by the estimate: autograd treats the estimate as a constant, as the layer intends, while finite
differences see it move with the weight. The gradients disagree in training mode only; in eval
mode (no power iteration) they agree. The gradient check must tell this design from a wrong
backward, and say so in a note."""

from torch import nn

LAYOUTS = ["4,6:BC"]
EXPECT_FAIL: set[str] = set()
EXPECT_NOTES = {"gradients": "computes part of its forward under torch.no_grad"}


class SpectralLinear(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.utils.parametrizations.spectral_norm(nn.Linear(6, 5))

    def forward(self, x):
        return self.linear(x)


LAYER = SpectralLinear
