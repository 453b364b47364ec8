"""Torch's guards against what a worker never does, kept from importing torch._dynamo and sympy.

Note [torch internals a check does not need]
    Three of torch's conveniences import ``torch._dynamo`` (1 s of CPU, half an ``import torch``
    more) or ``torch.fx.experimental.symbolic_shapes`` and sympy (0.3 s) the first time they run,
    though no check that runs by default compiles anything or has a symbolic size:

    - ``torch._disable_dynamo(fn)`` (the Python meta kernels' and references' elementwise wrapper,
      every TorchDispatchMode subclass's ``__torch_dispatch__``, the optimizers' ``step``) imports
      ``torch._dynamo`` on the first call, to keep ``fn`` from being compiled. Where
      ``torch._dynamo`` is not imported nothing can be compiling it: the wrapper calls ``fn`` as
      is then, and hands it to ``torch._dynamo.disable`` once something has imported
      ``torch._dynamo`` (the opt-in ``compile_matches_eager``, a layer that compiles).
    - ``torch._check(cond, ...)`` (meta kernels, references such as ``randn`` on ``meta``) imports
      symbolic_shapes to ask whether a possibly symbolic ``cond`` holds; a plain ``True`` holds.
    - ``torch.autograd.backward`` and ``grad`` given gradient tensors import symbolic_shapes to
      compare sizes that may be symbolic; plain sizes compare as tuples of ints.

    :func:`install` (the fork server's, once, before any worker is forked) makes each of them
    take the short way in exactly the cases where torch's own way ends the same without the
    import, and leaves every other case to torch. The imports then happen only where they are
    needed, as before. torch's Python meta kernels themselves ask symbolic_shapes about nearly
    every size (``guard_or_false``, ``sym_eq``) and import sympy for type promotion: the
    meta_device check runs them for nearly every layer, so the fork server imports symbolic_shapes
    before any check's clock starts (workers.PRELOAD). What no default check needs any more is
    ``torch._dynamo``: a run imports it only where it compiles.
"""

from __future__ import annotations

import functools
import gc
import sys
import types
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch._compile
import torch.autograd

_installed = False


def install() -> None:
    """Take the short ways of Note [torch internals a check does not need] (idempotent)."""
    global _installed
    if _installed:
        return
    _installed = True
    _defer_dynamo_disables()
    torch._check_with = _plain_check(torch._check_with)
    torch.autograd._make_grads = _plain_grads(torch.autograd._make_grads)


# -- torch._disable_dynamo ---------------------------------------------------------------------


def _defer_dynamo_disables() -> None:
    """Every ``torch._disable_dynamo`` wrapper made so far, and every one made from now on,
    calls its function as is while torch._dynamo is not imported."""
    original = torch._compile._disable_dynamo
    code = original(_defer_dynamo_disables).__code__  # torch's wrapper's code, one for all of them
    for obj in gc.get_objects():
        if type(obj) is types.FunctionType and obj.__code__ is code:
            _defer(obj)

    @functools.wraps(original)
    def disable_dynamo(fn: Any = None, recursive: bool = True) -> Any:
        if fn is None:  # the decorator with arguments: @torch._disable_dynamo(recursive=False)
            return functools.partial(disable_dynamo, recursive=recursive)
        wrapper = original(fn, recursive)
        _defer(wrapper)
        return wrapper

    torch._compile._disable_dynamo = disable_dynamo
    torch._disable_dynamo = disable_dynamo


def _defer(wrapper: Any) -> None:
    """Fill the cache ``wrapper`` keeps on its function (``fn.__dynamo_disable``, read before it
    imports torch._dynamo) with a call that needs no torch._dynamo until it is imported."""
    cells = dict(zip(wrapper.__code__.co_freevars, wrapper.__closure__ or ()))
    if "fn" not in cells or "recursive" not in cells:  # not the wrapper this torch makes
        return
    fn, recursive = cells["fn"].cell_contents, cells["recursive"].cell_contents
    if getattr(fn, "__dynamo_disable", None) is not None:
        return

    def unless_compiling(*args: Any, **kwargs: Any) -> Any:
        disable = getattr(sys.modules.get("torch._dynamo"), "disable", None)
        if disable is None:
            return fn(*args, **kwargs)
        disabled = disable(fn, recursive, wrapping=False)  # what torch's wrapper does, from now on
        fn.__dynamo_disable = disabled
        return disabled(*args, **kwargs)

    try:
        fn.__dynamo_disable = unless_compiling
    except (AttributeError, TypeError):  # a function that takes no attributes: torch's way
        pass


# -- torch._check ------------------------------------------------------------------------------


def _plain_check(original: Callable[..., None]) -> Callable[..., None]:
    @functools.wraps(original)
    def check_with(error_type: type[Exception], cond: Any, message: Any) -> None:
        if cond is True:  # what torch's expect_true(cond) answers for a plain True
            return
        original(error_type, cond, message)

    return check_with


# -- torch.autograd's gradient tensors ---------------------------------------------------------


def _plain_grads(original: Callable[..., tuple[Any, ...]]) -> Callable[..., tuple[Any, ...]]:
    @functools.wraps(original)
    def make_grads(outputs: Sequence[Any], grads: Sequence[Any], is_grads_batched: bool) -> tuple[Any, ...]:
        pairs = list(zip(outputs, grads))
        if is_grads_batched or not all(grad is None or _same_plain_size(out, grad) for out, grad in pairs):
            return original(outputs, grads, is_grads_batched)
        # torch hands a gradient tensor on as is where the sizes match; the rest (None: a
        # scalar output's ones, or nothing) is torch's, which imports nothing for them.
        implicit = iter(original([out for out, grad in pairs if grad is None],
                                 [None] * sum(grad is None for _, grad in pairs), is_grads_batched))
        return tuple(next(implicit) if grad is None else grad for _, grad in pairs)

    return make_grads


def _same_plain_size(out: Any, grad: Any) -> bool:
    """Whether torch's check of ``grad`` against ``out`` comes down to equal tuples of ints:
    dense tensors (no subclass, not nested), plain sizes, both complex or neither."""
    if type(out) is not torch.Tensor or type(grad) is not torch.Tensor or out.is_nested or grad.is_nested:
        return False
    size = out.shape
    return (all(type(s) is int for s in size) and size == grad.shape
            and out.dtype.is_complex == grad.dtype.is_complex)
