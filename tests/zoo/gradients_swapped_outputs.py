"""Broken: an SReLU operation (autograd.Function with inputs x, tl, al, tr, ar) whose backward
returns the parameter gradients in the order (tl, tr, al, ar): al and tr have the same shape,
so autograd accepts them, and each receives the other's gradient."""

import torch

LAYOUTS = ["6,5,4,3:SSCB", "1,1,4,1:UUCU", "1,1,4,1:UUCU", "1,1,4,1:UUCU", "1,1,4,1:UUCU"]
EXPECT_FAIL = {"gradients"}


class SwappedSReLU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, tl, al, tr, ar):
        right = x >= tr
        left = (x <= tl) & ~right
        ctx.save_for_backward(x, tl, tr, left, right)
        ctx.slopes = (al.detach(), ar.detach())
        return torch.where(right, tr + ar * (x - tr), torch.where(left, tl + al * (x - tl), x))

    @staticmethod
    def backward(ctx, g):
        x, tl, tr, left, right = ctx.saved_tensors
        al, ar = ctx.slopes
        dx = g * torch.where(right, ar, torch.where(left, al, torch.ones_like(x)))
        dtl = (g * (1 - al) * left).sum_to_size(tl.shape)
        dal = (g * (x - tl) * left).sum_to_size(al.shape)
        dtr = (g * (1 - ar) * right).sum_to_size(tr.shape)
        dar = (g * (x - tr) * right).sum_to_size(ar.shape)
        return dx, dtl, dtr, dal, dar  # the bug: (tl, tr, al, ar) for inputs (tl, al, tr, ar)


LAYER = SwappedSReLU
