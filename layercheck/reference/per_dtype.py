"""What a lower precision's gradients are judged against where the float64 gradient is not the
yardstick: the float32 layer's own function where it computes another than the float64 one (Note
[a function per dtype]), and autograd of the same forward in float16 and bfloat16 (Note [autograd
in the same dtype])."""

from __future__ import annotations

import copy
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NoReturn

import torch

from layercheck.parent.errors import CheckError, CheckFailed, CheckSkipped, LayerRaised
from layercheck.parent.registry import GRADIENTS
from layercheck.reference.rule import Judged, judge, times
from layercheck.reference.unwrapped import Seen, unwrapped_functions
from layercheck.support.compare import dtype_name
from layercheck.support.runs import forward_is_random, gradients
from layercheck.target.subject import Subject
from layercheck.target.tensors import Outputs

if TYPE_CHECKING:
    from layercheck.support.context import Context

# Note [a function per dtype]
#     gradients[float32] compares the float32 gradients with the float64 ones, which finite
#     differences vouch for: right where the float32 layer computes the float64 layer's function
#     up to rounding. A layer that draws random numbers in its input's dtype from a fixed seed
#     (torch.randn(..., generator=g, dtype=x.dtype): float64 takes twice the random bits per draw,
#     so the numbers differ), or that takes a dtype-dependent branch or constant, computes another
#     function in float32, and its float32 gradient has no float64 counterpart. So where the
#     float32 gradient differs from the float64 one, the float32 and float64 layers' training
#     outputs are compared at one point (the float32 inputs and parameters, widened exactly): where
#     they are further apart than FUNCTION_GAP relative (float32 rounding moves a layer's output by
#     some 1e-7, and 1e-4 where a layer amplifies it a thousandfold; the gradient check's float32
#     tolerance is 1e-2), the float32 gradients are judged against float32 finite differences of
#     the float32 layer itself (Note [float32 reference] in numerics/reference.py), and the result
#     says why in its message and a note. Only the failing path asks: a float32 layer that agrees
#     with float64 is never judged by the weaker float32 differences.
FUNCTION_GAP = 1e-3


def other_function(ctx: Context, dtype: torch.dtype = torch.float32) -> str | None:
    """Why the layer in ``dtype`` computes another function than the float64 one (Note [a function
    per dtype]), or None where their outputs at one point agree to FUNCTION_GAP (float32) or to the
    fixed tolerance of the gradient check in ``dtype``."""
    found: str | None = ctx.shared(("layercheck.gradients.other_function", dtype), lambda: _other(ctx, dtype))
    return found


def _other(ctx: Context, dtype: torch.dtype) -> str | None:
    gap = FUNCTION_GAP if dtype is torch.float32 else ctx.tolerance_of(GRADIENTS, dtype_name(dtype))
    try:
        low = ctx.fresh(dtype)
        inputs = low.inputs()
        high = _widened(ctx, low)
        ours = Outputs.of(low.forward(inputs)).tensors
        theirs = Outputs.of(high.forward([_wide(x) for x in inputs])).tensors
    except (LayerRaised, RuntimeError, TypeError, ValueError):
        return None  # the comparison cannot be made: the float64 gradient stays the yardstick
    worst: tuple[float, int] | None = None
    for k, (a, b) in enumerate(zip(ours, theirs)):
        if not a.is_floating_point() or a.shape != b.shape or a.numel() == 0:
            continue
        expected = b.detach().to(torch.float64)
        norm = float(torch.linalg.vector_norm(expected))
        difference = float(torch.linalg.vector_norm(a.detach().to(torch.float64) - expected))
        if not (norm > 0 and difference == difference):  # all zero, or not finite: not this comparison's
            continue
        if worst is None or difference / norm > worst[0]:
            worst = (difference / norm, k)
    if worst is None or worst[0] <= gap:
        return None
    name = dtype_name(dtype)
    return (f"the {name} layer computes another function than the float64 one: at the same inputs and parameters "
            f"its training output {worst[1]} is {worst[0]:.2g} (relative, of norms) from the float64 output, "
            f"where {name} rounding moves it by far less than {gap:g} (random numbers drawn in the input's "
            "dtype, or a dtype-dependent branch or constant?)")


def not_judged(why: str, dtype: torch.dtype) -> NoReturn:
    """The skip of a low precision whose function is not the float64 one: nothing can judge it."""
    raise CheckSkipped(f"{why}; finite differences cannot judge {dtype_name(dtype)}, so its gradients have no "
                       "yardstick here (gradients[float32] judges the layer's own float32 function)", applies=True)


def _widened(ctx: Context, low: Subject) -> Subject:
    """A float64 layer with ``low``'s parameter and buffer values, widened exactly."""
    if low.module is None:
        return ctx.fresh(torch.float64)
    return Subject(ctx.target, copy.deepcopy(low.module).to(torch.float64), dtype=torch.float64)


def _wide(x: torch.Tensor) -> torch.Tensor:
    return x.detach().to(torch.float64) if x.is_floating_point() else x


# Note [autograd in the same dtype]
#     Finite differences cannot judge float16 or bfloat16: gradients[float16|bfloat16] compare the
#     layer's gradients with its float64 ones under fixed tolerances (0.1 and 0.2 relative), and a
#     hand-written backward that accumulates in float16 where it should accumulate in float32,
#     the most common low-precision kernel bug, passes them while it is many times worse than it
#     need be. Where the backward belongs to autograd.Functions whose forward is differentiable
#     PyTorch, autograd's derivative of that same forward (Note [autograd of the same forward] in
#     unwrapped.py), run in the same dtype on the same inputs and output gradients, measures what
#     the dtype costs this computation: the hand-written gradients are held to flash-attention's
#     rule against it (Note [flash-attention's rule] in rule.py; k the reference check's for the
#     dtype, 2 by default), both measured from the layer's float64 gradients at the rounded point.
#     Where there is no such yardstick (autograd computes the layer's gradients already, a forward
#     autograd cannot follow, a forward that draws random numbers), the fixed tolerance stays, and
#     the message says which yardstick judged.
#     autograd's own error is one sample of what rounding costs: on a small tensor (three gradients
#     of a per-channel input, each a sum of twenty products) it can by luck be a tenth of a unit
#     in the last place, and a correct backward written in another order then stands at 3-9x it
#     on one draw in a few (zoo: good_higher_function in bfloat16, good_backward_own_table in
#     float16, at seed 2). A backward that accumulates in the low dtype is past the rule at every
#     draw (4 seeds of 4 in each dtype, 3.9-43x). So a failure is confirmed on a second draw of
#     the inputs (target/seeding.second_draw_seed, the float64 second look's) before it is
#     reported: past the rule on both, it fails with the first draw's numbers; within it on the
#     second, it passes, with a note that says so.


@dataclass(frozen=True)
class Yardstick:
    """Autograd of the same forward in a low dtype: each tensor judged by the rule against it."""

    functions: list[str]
    judged: list[Judged]
    k: float

    @property
    def failed(self) -> list[Judged]:
        return [j for j in self.judged if j.failing is not None]

    def verdict(self, dtype: torch.dtype, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """The gradient check's result in ``dtype``: its message and details, or CheckFailed."""
        details = {**details, "yardstick": "autograd", "k": self.k, "functions": self.functions,
                   "tensors": [{"tensor": j.name, "max_abs": j.layer.max_abs, "rel_norm": j.layer.rel_norm,
                                "autograd_max_abs": j.own.max_abs, "autograd_rel_norm": j.own.rel_norm,
                                "passed": j.failing is None} for j in self.judged]}
        failed = self.failed
        if failed:
            more = [j.name for j in failed][1:]
            also = f" (also: {', '.join(more[:4])}{', ...' if len(more) > 4 else ''})" if more else ""
            raise CheckFailed(f"{self.said(dtype)}{also}: the hand-written backward loses precision autograd's "
                              "keeps (a sum or a product accumulated in the low dtype where it should be in "
                              "float32?)", tensor=max(failed, key=lambda j: j.ratio).name, **details)
        return (f"{dtype_name(dtype)} gradients of {len(self.judged)} tensor(s) {self.said(dtype)}: within the rule",
                details)

    def said(self, dtype: torch.dtype) -> str:
        """What judged the gradients, and how the worst tensor fared."""
        name = dtype_name(dtype)
        worst = (max(self.failed, key=lambda j: j.ratio) if self.failed else
                 max(self.judged, key=lambda j: (j.layer.rel_norm, j.ratio)))
        measure = worst.failing or "rel_norm"
        mine, theirs = getattr(worst.layer, measure), getattr(worst.own, measure)
        what = "largest difference" if measure == "max_abs" else "relative, of norms"
        return (f"judged against autograd's derivative of the same forward in {name} (the forward of "
                f"{', '.join(self.functions)} run as plain PyTorch): the gradient of {worst.name} is {mine:.2g} "
                f"({what}) from the float64 gradient, where autograd's own in {name} is {theirs:.2g} off: "
                f"{times(worst.ratio)} (allowed {self.k:g}x, and a floor of "
                f"{getattr(worst.allowed, measure) - self.k * theirs:.2g})")


def autograd_yardstick(ctx: Context, subject: Subject, names: Sequence[str], low: Sequence[torch.Tensor | None],
                       high: Sequence[torch.Tensor | None],
                       point: Sequence[torch.Tensor] | None = None) -> Yardstick | str:
    """The layer's ``low`` gradients (of ``names``, in ``subject``'s dtype) and autograd's derivative
    of the same forward in that dtype, on a fresh ``subject`` with the same inputs (the target's,
    or ``point``: another draw) and output gradients, each judged against the float64 gradients
    ``high``; where there is no such yardstick, why (Note [autograd in the same dtype])."""
    dtype = subject.dtype
    seen = Seen()
    other = other_function(ctx, dtype)
    if other is not None:
        return other  # the float64 gradients are not this function's: nothing measures autograd's error
    try:
        if forward_is_random(ctx):
            return "the training forward draws random numbers, which autograd's run of it would draw anew"
        inputs = subject.inputs(requires_grad=True)
        if point is not None:
            inputs = [y.detach().clone().requires_grad_(x.requires_grad) for x, y in zip(inputs, point)]
        with unwrapped_functions(seen):
            outputs = Outputs.of(subject.forward(inputs)).tensors
        theirs = dict(gradients(ctx, subject, inputs, outputs))
    except (LayerRaised, RuntimeError, TypeError, ValueError) as exc:
        return f"autograd's derivative of the same forward could not be taken ({type(exc).__name__})"
    if seen.opaque:
        return (f"the forward of {', '.join(seen.opaque)} is not differentiable PyTorch, so autograd cannot redo its "
                "derivative")
    if not seen.unwrapped:
        return ("autograd computes these gradients already (no hand-written backward autograd could redo)"
                if not seen.surrogates else "every hand-written backward is a surrogate by design")
    k = _k(ctx, dtype)
    judged = []
    for name, mine, expected in zip(names, low, high):
        own = theirs.get(name)
        if mine is None or expected is None or own is None or own.shape != mine.shape:
            continue
        judged.append(judge(name, mine, own, expected, dtype=dtype, k=k))
    if not judged:
        return "no gradient of the layer's has a counterpart in autograd's"
    return Yardstick(list(seen.unwrapped), judged, k)


def _k(ctx: Context, dtype: torch.dtype) -> float:
    """The reference check's k for ``dtype`` (a user's override included), 2 where it declares none."""
    try:
        return ctx.tolerance_of("reference", dtype_name(dtype))
    except (CheckError, KeyError):
        return 2.0
