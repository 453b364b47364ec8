"""``reference: autograd``: the layer's own forward with its hand-written ``autograd.Function``\\ s
run as plain PyTorch, so that autograd differentiates what their forward computes (Note
[autograd of the same forward])."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import torch

# Note [autograd of the same forward]
#     A hand-written backward is meant to compute the derivative of its Function's forward.
#     Where that forward is differentiable PyTorch, autograd can compute that derivative too:
#     while the reference runs, Function.apply of every Function defined outside torch calls
#     the Function's forward directly (a stand-in ctx keeps what it saves), with gradients on,
#     so autograd records its operations instead of the hand-written backward. Not every
#     hand-written backward is meant to be that derivative: a straight-through estimator or a
#     spike's surrogate passes a gradient through a forward that is piecewise constant
#     (autograd's derivative of it is zero), a gradient reversal or a clipping layer changes
#     the gradient of an identity. Those are surrogates by design, recognised as they run here
#     (autograd's derivative of the forward is zero everywhere, or the forward returns an input
#     unchanged) or declared with a class attribute ``surrogate_backward = "why"``: they keep
#     their Function in the reference, so that the rest of the layer is still judged, and a
#     layer whose every Function is one is not judged at all. A forward autograd cannot follow
#     (a Triton or CUDA kernel, NumPy, ``torch.no_grad``) gives outputs that do not require grad:
#     the check says so and does not judge.
DECLARED = "surrogate_backward"


@dataclass
class Seen:
    """What the reference run saw: the Functions it unwrapped, those it kept as surrogates (with
    why), and those whose forward autograd could not follow."""

    unwrapped: dict[str, None] = field(default_factory=dict)
    surrogates: dict[str, str] = field(default_factory=dict)
    opaque: dict[str, None] = field(default_factory=dict)

    @property
    def any(self) -> bool:
        return bool(self.unwrapped or self.surrogates or self.opaque)


class _StandIn:
    """A ``ctx`` for a Function's forward called directly: it keeps what forward saves and sets."""

    def __init__(self, args: tuple[Any, ...]) -> None:
        self.needs_input_grad = tuple(isinstance(a, torch.Tensor) and a.requires_grad for a in args)
        self.saved_tensors: tuple[Any, ...] = ()
        self.materialize_grads = True

    def save_for_backward(self, *tensors: Any) -> None:
        self.saved_tensors = tensors

    def save_for_forward(self, *tensors: Any) -> None:
        pass

    def mark_dirty(self, *tensors: Any) -> None:
        pass

    def mark_non_differentiable(self, *tensors: Any) -> None:
        pass

    def set_materialize_grads(self, value: bool) -> None:
        self.materialize_grads = value


def _user_function(cls: type) -> bool:
    """A Function written outside torch, with its own backward."""
    return not cls.__module__.startswith("torch") and "backward" in {
        name for klass in cls.__mro__ if klass is not torch.autograd.Function for name in vars(klass)}


def _direct(cls: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    args = tuple(a.clone() if isinstance(a, torch.Tensor) and a.requires_grad else a for a in args)
    with torch.enable_grad():
        if cls.setup_context is not torch.autograd.Function.setup_context:  # forward without ctx
            return cls.forward(*args, **kwargs), args
        return cls.forward(_StandIn(args), *args, **kwargs), args


def _tensors(value: Any) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _tensors(v)]
    return []


def _surrogate(cls: Any, args: tuple[Any, ...], outputs: Any) -> str | None:
    """Why the Function's backward is a surrogate by design, or None (Note [autograd of the same forward])."""
    declared = getattr(cls, DECLARED, None)
    if declared:
        return declared if isinstance(declared, str) else "declared a surrogate (surrogate_backward)"
    inputs = [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]
    outs = [y for y in _tensors(outputs) if y.is_floating_point()]
    if any(any(y.shape == x.shape and torch.equal(y.detach(), x.detach()) for x in inputs) for y in outs):
        return "its forward returns an input unchanged (a gradient reversal, scaling or clipping)"
    differentiable = [y for y in outs if y.requires_grad]
    if inputs and differentiable:
        grads = torch.autograd.grad(differentiable, inputs, [torch.ones_like(y) for y in differentiable],
                                    retain_graph=True, allow_unused=True)
        if all(g is None or not bool(g.any()) for g in grads):
            return "its forward is piecewise constant (a straight-through estimator or a surrogate gradient)"
    return None


@contextlib.contextmanager
def unwrapped_functions(seen: Seen) -> Iterator[None]:
    """While inside: every Function defined outside torch runs its forward as plain PyTorch, except
    surrogates by design, which run as Functions; ``seen`` records which were which."""
    function = torch.autograd.Function
    original = function.__dict__["apply"]
    apply = original.__func__

    def patched(cls: Any, *args: Any, **kwargs: Any) -> Any:
        if not _user_function(cls):
            return apply(cls, *args, **kwargs)
        name = cls.__qualname__
        outputs, copies = _direct(cls, args, kwargs)
        why = _surrogate(cls, copies, outputs)
        if why is not None:
            seen.surrogates[name] = why
            return apply(cls, *args, **kwargs)
        if any(a.requires_grad for a in copies if isinstance(a, torch.Tensor)) and not any(
                y.requires_grad for y in _tensors(outputs) if y.is_floating_point()):
            seen.opaque[name] = None
        else:
            seen.unwrapped[name] = None
        return outputs

    function.apply = classmethod(patched)  # type: ignore[assignment,method-assign]
    try:
        yield
    finally:
        function.apply = original  # type: ignore[method-assign]
