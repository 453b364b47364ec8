"""Calls as training and users make them: back-propagation into ``.grad`` as
``loss.backward()`` does it, and whether a signature takes a call's arguments."""

from __future__ import annotations

import inspect
from collections.abc import Sequence
from typing import Any

import torch

from layercheck.parent.errors import LayerRaised
from layercheck.target.frames import user_trace


def backpropagate(pairs: Sequence[tuple[torch.Tensor, torch.Tensor]],
                  leaves: Sequence[torch.Tensor]) -> list[torch.Tensor | None]:
    """Back-propagate as training does, ``loss.backward()``: the gradients of ``leaves`` (inputs
    and parameters) read from ``.grad``, set to None before and after. A hand-written backward
    that calls ``torch.autograd.backward`` itself, or reentrant checkpointing, deposit their
    gradients there, where an optimizer reads them. ``pairs``: (output, its cotangent). Raises
    LayerRaised("backward")."""
    for leaf in leaves:
        leaf.grad = None
    try:
        torch.autograd.backward([y for y, _ in pairs], [w for _, w in pairs])
    except Exception as exc:
        raise LayerRaised("backward", exc, user_trace(exc)) from exc
    grads = [None if leaf.grad is None else leaf.grad.detach() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None  # nothing left on the layer's parameters for a later call to add to
    return grads


def signature_accepts(fn: Any, count: int, *, skip_first: bool = False, keywords: Sequence[str] = ()) -> str | None:
    """None when ``fn`` can be called with ``count`` positional arguments and the ``keywords``,
    else why not."""
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):
        return None  # builtins without a signature: nothing to say
    params = list(sig.parameters.values())
    if skip_first and params:
        params = params[1:]
    sig = sig.replace(parameters=params)
    try:
        sig.bind(*([None] * count), **dict.fromkeys(keywords))
    except TypeError as exc:
        named = f" and the keyword argument(s) {', '.join(keywords)}" if keywords else ""
        return f"{getattr(fn, '__qualname__', fn)}{sig} cannot take {count} input(s){named}: {exc}"
    return None
