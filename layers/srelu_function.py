"""SReLU as a custom operation: a ``torch.autograd.Function`` with a hand-written backward.

Call it as ``SReLUFunction.apply(x, tl, al, tr, ar)``. The left threshold ``tl``, left
slope ``al``, right threshold ``tr`` and right slope ``ar`` broadcast against ``x``
(e.g. shape ``1,1,20,1`` for ``x`` of ``24,24,20,128:SSCB``)::

    y = tr + ar * (x - tr)   where x >= tr
    y = x                    where tl < x < tr
    y = tl + al * (x - tl)   where x <= tl

Only torch is imported, so the file works without layercheck installed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

__all__ = ["SReLUFunction"]


def _sum_to(grad: Tensor, shape: torch.Size) -> Tensor:
    """Sum ``grad`` over the dimensions its input was broadcast along."""
    return grad.sum_to_size(shape)


class SReLUFunction(torch.autograd.Function):
    """S-shaped ReLU with learnable thresholds and slopes; honours ``needs_input_grad``.

    Written for every transform: ``forward`` takes no ``ctx`` and ``setup_context`` saves what
    the derivatives need, so torch.func (``vmap``, ``grad``, per-sample gradients) can run it,
    with the vmap rule generated from these methods (``generate_vmap_rule``); ``jvp`` gives
    forward-mode derivatives (``torch.func.jvp``, ``jacfwd``). Only elementwise operations, so
    autocast leaves it in its inputs' dtype and it needs no ``custom_fwd``/``custom_bwd``.
    """

    generate_vmap_rule = True

    @staticmethod
    def forward(x: Tensor, tl: Tensor, al: Tensor, tr: Tensor, ar: Tensor) -> Tensor:
        # The right branch wins where x >= tr, as in the definition (matters only if tl >= tr).
        return torch.where(x >= tr, tr + ar * (x - tr), torch.where(x <= tl, tl + al * (x - tl), x))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Tensor, ...], output: Tensor) -> None:
        ctx.save_for_backward(*inputs)
        ctx.save_for_forward(*inputs)

    @staticmethod
    def backward(ctx: Any, grad: Tensor) -> tuple[Tensor | None, ...]:
        x, tl, al, tr, ar = ctx.saved_tensors
        need_x, need_tl, need_al, need_tr, need_ar = ctx.needs_input_grad
        right = x >= tr
        left = (x <= tl) & ~right
        grad_x = grad_tl = grad_al = grad_tr = grad_ar = None
        if need_x:
            grad_x = _sum_to(torch.where(right, grad * ar, torch.where(left, grad * al, grad)), x.shape)
        if need_tl:
            grad_tl = _sum_to(torch.where(left, grad * (1 - al), 0.0), tl.shape)
        if need_al:
            grad_al = _sum_to(torch.where(left, grad * (x - tl), 0.0), al.shape)
        if need_tr:
            grad_tr = _sum_to(torch.where(right, grad * (1 - ar), 0.0), tr.shape)
        if need_ar:
            grad_ar = _sum_to(torch.where(right, grad * (x - tr), 0.0), ar.shape)
        return grad_x, grad_tl, grad_al, grad_tr, grad_ar

    @staticmethod
    def jvp(ctx: Any, x_t: Tensor | None, tl_t: Tensor | None, al_t: Tensor | None, tr_t: Tensor | None,
            ar_t: Tensor | None) -> Tensor:
        """The output's tangent for the inputs' tangents (None: that input has none)."""
        x, tl, al, tr, ar = ctx.saved_tensors
        x_t, tl_t, al_t, tr_t, ar_t = (_zero_if_none(t, p) for t, p in zip((x_t, tl_t, al_t, tr_t, ar_t),
                                                                            (x, tl, al, tr, ar)))
        right = x >= tr
        left = (x <= tl) & ~right
        right_t = ar * x_t + (1 - ar) * tr_t + (x - tr) * ar_t
        left_t = al * x_t + (1 - al) * tl_t + (x - tl) * al_t
        return torch.where(right, right_t, torch.where(left, left_t, x_t))


def _zero_if_none(tangent: Tensor | None, primal: Tensor) -> Tensor:
    return torch.zeros_like(primal) if tangent is None else tangent
