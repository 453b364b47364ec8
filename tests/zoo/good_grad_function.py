"""Correct: a custom operation (autograd.Function subject) with three inputs — a leaky clamp
of x between lower and upper bounds given as inputs — whose backward honours
needs_input_grad and reduces each gradient to its input's size."""

import torch

LAYOUTS = ["5,3,4:BCU", "1,3,1:UCU", "1,3,1:UCU"]
EXPECT_FAIL: set[str] = set()


class LeakyClamp(torch.autograd.Function):
    """y = x between the bounds; beyond them 0.1 slope away from the bound. The bounds are
    sorted elementwise, so any two inputs make a valid interval."""

    @staticmethod
    def forward(ctx, x, a, b):
        low, high = torch.minimum(a, b), torch.maximum(a, b)
        below, above = x < low, x > high
        ctx.save_for_backward(below, above, a <= b)
        inside = torch.clamp(torch.maximum(x, low), max=high)
        return inside + 0.1 * (x - inside)

    @staticmethod
    def backward(ctx, grad):
        below, above, ordered = ctx.saved_tensors
        need_x, need_a, need_b = ctx.needs_input_grad
        grad_x = torch.where(below | above, 0.1 * grad, grad) if need_x else None
        grad_low = (0.9 * grad * below).sum(dim=(0, 2), keepdim=True)
        grad_high = (0.9 * grad * above).sum(dim=(0, 2), keepdim=True)
        grad_a = torch.where(ordered, grad_low, grad_high) if need_a else None
        grad_b = torch.where(ordered, grad_high, grad_low) if need_b else None
        return grad_x, grad_a, grad_b


LAYER = LeakyClamp
