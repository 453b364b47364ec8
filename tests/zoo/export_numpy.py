"""Broken for torch.export: an operation ported from NumPy code, an autograd.Function whose
forward computes with NumPy (``x.detach().cpu().numpy()``) and whose hand-written backward
is right. Eager and every default check pass; torch.export traces with fake tensors, which
have no values to hand to NumPy, so the layer cannot be exported. Fix: torch operations."""

import numpy as np
import torch

LAYOUTS = ["4,3,5:BCU"]
ENABLE = ("export",)
EXPECT_FAIL = {"export"}


class NumpyTanh(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        y = torch.from_numpy(np.tanh(x.detach().cpu().numpy())).to(x.device)  # the bug for export
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx, grad):
        (y,) = ctx.saved_tensors
        return grad * (1 - y * y)


LAYER = NumpyTanh
