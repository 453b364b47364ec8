"""Which floating precision a layer's float64 copy really computes in.

Note [float32 islands]
    A layer may compute part of its float64 path in a lower precision: a statistic taken from
    ``x.float()`` and cast back (filter-response normalisation, EvoNorm), a constant kept in
    float32, an autocast region. Its analytic float64 gradient is still right, but its output
    moves by float32 roundings of that part, which a 1e-8 step flips only here and there: the
    noise estimate (a median over chunks of the output) sees almost none, the step stays tiny
    and the differences are pure noise. So the precision is read from what runs: the forward
    and backward at the point are executed under a dispatch mode that follows every value
    computed from the inputs and parameters, and the lowest floating precision among them is
    the precision the differences are taken for (see FiniteDifferences.start_step). Values
    that do not depend on the inputs or parameters (a float32 mask from a comparison, positions
    made with ``arange``) are exact under perturbation and do not count.
"""

from __future__ import annotations

from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from layercheck.numerics.functions import LayerFunction


def lowest_precision(fn: LayerFunction) -> torch.dtype:
    """The lowest floating precision of any value the layer computes from its inputs and
    parameters at the point, forward and backward (float64 for a pure float64 layer)."""
    recorder = _Recorder()
    recorder.taint([*fn.point, *(p for _, p in fn.parameters)])  # the call copies from these
    try:
        with recorder:
            outputs, leaves = fn.call()
            differentiable = [y for y in outputs if y.requires_grad]
            if differentiable:
                torch.autograd.grad([y.sum() for y in differentiable], leaves, allow_unused=True)
    except Exception:  # the gradient run reports a layer that raises; here nothing more is known
        pass
    finally:
        fn.reset()
    return recorder.lowest


class _Recorder(TorchDispatchMode):
    """Follows values computed from the marked tensors (by storage) and keeps the lowest
    floating precision among them."""

    def __init__(self) -> None:
        super().__init__()
        self.tainted: set[int] = set()
        self.lowest = torch.float64

    def taint(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            self.tainted.add(_storage(t))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if any(t.is_floating_point() and _storage(t) in self.tainted for t in inputs):
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.tainted.add(_storage(t))
                    if torch.finfo(t.dtype).eps > torch.finfo(self.lowest).eps:
                        self.lowest = t.dtype
        return out


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return id(t)
