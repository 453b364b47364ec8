"""What a layer's float64 copy really computes: in which precision, and what it holds constant.

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
    made with ``arange``) are exact under perturbation and do not count. A step that large
    crosses kinks; when the differences then disagree, the reference is taken again with the
    layer's lower-precision casts kept in float64 (Note [widened islands] in functions.py).

Note [stop-gradients]
    A layer may compute part of its training forward under ``torch.no_grad`` and use the result
    (a power iteration for spectral normalisation, an adaptive step, an exponential moving
    average of its own weights): autograd then treats that part as a constant by the layer's own
    choice, while finite differences see it move with the weights, so the two disagree in
    training mode and agree in eval mode. The same trace records where a value computed from
    the inputs or parameters inside an explicit ``torch.no_grad`` region (entered from Python;
    an ``autograd.Function``'s forward, which autograd itself runs without grad, does not count)
    is used by an operation that records gradients. Running statistics updated under no_grad
    and not read by the training forward (BatchNorm) are no such use.

Note [straight-through estimators]
    A quantiser (``x + (x.round() - x).detach()``), a vector quantiser
    (``x + (codebook[index] - x).detach()``) or a hard Gumbel-softmax
    (``y_hard - y_soft.detach() + y_soft``) gives its forward a piecewise-constant value and its
    backward the gradient of a smooth stand-in, by design: finite differences of the forward
    (zero, or a jump) disagree with that gradient however right it is. What autograd computes
    is the derivative with every detached value held at its value; so the trace counts a
    ``.detach()`` (with gradients on) of a value made by a step — a rounding, a sign, or an
    integer or boolean result such as an argmax or a comparison, and what is computed from
    those — or one used beside such a value, as a straight-through estimator; and so a
    detached difference added back to one of its terms (``(y - y * g).detach() + y * g``: the
    value of y, the gradient of y * g — LSQ's gradient scaling). When the
    differences disagree and the layer has one, the reference is taken again with the values
    the layer detaches held at the point (``LayerFunction.hold``): the differences then see
    what autograd differentiates, and a backward wrong anywhere else (a hand-written one, a
    parameter's path) still disagrees. A ``.detach()`` of a smooth value used beside smooth
    values (a batch statistic detached by mistake) is no straight-through estimator: the
    first verdict stands.
"""

from __future__ import annotations

import contextlib
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from layercheck.numerics.functions import LayerFunction


@dataclass(frozen=True)
class Trace:
    """What one forward and backward of a layer computed from its inputs and parameters."""

    lowest: torch.dtype = torch.float64  # the lowest floating precision among those values
    stop_gradients: tuple[str, ...] = ()  # operations that used a value computed under torch.no_grad
    # Note [straight-through estimators]: what the layer's straight-through detaches were seen
    # by — the steps whose values it detaches (round, argmin), or "a detached difference added back"
    straight_through: tuple[str, ...] = ()


def trace(fn: LayerFunction) -> Trace:
    """Run the layer's forward and backward at the point under a recorder (Note [float32
    islands], Note [stop-gradients]); a layer that raises gives what was seen before."""
    tracing = Tracing()
    try:
        outputs, leaves = fn.call(around=tracing.forward)
        differentiable = [y for y in outputs if y.requires_grad]
        if differentiable:
            with tracing.backward(differentiable):
                torch.autograd.grad([y.sum() for y in differentiable], leaves, allow_unused=True)
    except Exception:  # the gradient run reports a layer that raises; here nothing more is known
        pass
    finally:
        fn.reset()
    return tracing.result()


class Tracing:
    """A recorder to run a forward (``around=``) and backward (``watch=``) under, as
    :func:`trace` does, when the run is one the caller needs anyway: the gradient check's
    float64 analytic run records what the layer computes without a run of its own."""

    def __init__(self) -> None:
        self._recorder = _Recorder()

    @contextlib.contextmanager
    def forward(self, slots: list[torch.Tensor]) -> Iterator[None]:
        # inputs and parameters are in place when the layer is called: follow them from there
        self._recorder.taint(slots)
        with self._recorder, _explicit_no_grad(self._recorder):
            yield

    @contextlib.contextmanager
    def backward(self, outputs: list[torch.Tensor]) -> Iterator[None]:
        with self._recorder:
            yield

    def result(self) -> Trace:
        """What was seen; the tensors the recorder held to follow them are let go."""
        recorder = self._recorder
        self._recorder = _Recorder()
        return Trace(recorder.lowest, tuple(dict.fromkeys(recorder.stopped_uses)),
                     tuple(dict.fromkeys(recorder.straight_through)))


@contextlib.contextmanager
def _explicit_no_grad(recorder: _Recorder) -> Iterator[None]:
    """Tell the recorder when Python code switches gradients off (``torch.no_grad``,
    ``set_grad_enabled(False)``): autograd switches them off for a Function's forward in C++,
    without passing here."""
    original = torch._C._set_grad_enabled

    def switch(enabled: bool) -> None:
        recorder.explicit_no_grad = not enabled
        original(enabled)

    torch._C._set_grad_enabled = switch
    try:
        yield
    finally:
        torch._C._set_grad_enabled = original


# Note [straight-through estimators]: operations whose floating result is piecewise constant
_STEPS = {"round", "floor", "ceil", "trunc", "sign", "sgn", "heaviside"}
_SUMS = {"add", "sub", "rsub"}


class _Recorder(TorchDispatchMode):
    """Follows values computed from the marked tensors (by storage) and keeps the lowest
    floating precision among them."""

    def __init__(self) -> None:
        super().__init__()
        self.tainted: set[int] = set()
        self.lowest = torch.float64
        self.explicit_no_grad = False
        self.stopped: set[int] = set()  # computed from the inputs under an explicit no_grad
        self.held: list[torch.Tensor] = []  # those tensors, kept alive so no other reuses their memory
        self.stopped_uses: list[str] = []
        # storage -> (the step it was computed from, the tensor): a storage freed and reused by
        # another tensor is not taken for it (no full-size mask is kept alive for this)
        self.stepped: dict[int, tuple[str, weakref.ref[torch.Tensor]]] = {}
        # id -> a detached value of the inputs (kept alive), and the storages of the terms of the
        # sum or difference it was detached from
        self.detached: dict[int, tuple[torch.Tensor, frozenset[int]]] = {}
        self.sums: dict[int, tuple[frozenset[int], weakref.ref[torch.Tensor]]] = {}  # storage -> its terms
        self.straight_through: list[str] = []

    def taint(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            self.tainted.add(_storage(t))

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        grad = torch.is_grad_enabled()
        if grad and any(_storage(t) in self.stopped for t in inputs):
            self.stopped_uses.append(str(func.__name__ if hasattr(func, "__name__") else func))
        self._follow_steps(func, inputs, out, grad)
        if any(t.is_floating_point() and _storage(t) in self.tainted for t in inputs):
            stopped = not grad and self.explicit_no_grad
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and t.is_floating_point():
                    self.tainted.add(_storage(t))
                    if stopped:
                        self.stopped.add(_storage(t))
                        self.held.append(t)
                    if torch.finfo(t.dtype).eps > torch.finfo(self.lowest).eps:
                        self.lowest = t.dtype
        return out

    def _follow_steps(self, func: Any, inputs: list[torch.Tensor], out: Any, grad: bool) -> None:
        """Note [straight-through estimators]: mark what a step computes from the inputs, and
        record a detach of such a value, one used beside such a value, and a detached
        difference added back to one of its terms."""
        step = next((found for t in inputs if (found := self._step_of(t)) is not None), None)
        name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
        used = [self.detached[id(t)][1] for t in inputs if id(t) in self.detached] if self.detached else []
        if grad and used:
            if step is not None:
                self.straight_through.append(step)  # y_hard - y_soft.detach(): a detached value beside a step
            elif name in _SUMS and any(_storage(t) in terms for t in inputs for terms in used):
                self.straight_through.append("a detached difference added back")  # x + (f(x) - x).detach()
        tainted = any(t.is_floating_point() and _storage(t) in self.tainted for t in inputs)
        if not tainted and step is None:
            return
        if name == "detach" and grad and tainted:
            if step is not None:
                self.straight_through.append(step)  # (x.round() - x).detach()
            made = self.sums.get(_storage(inputs[0]))
            terms = made[0] if made is not None and made[1]() is not None else frozenset()
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.detached[id(t)] = (t, terms)
            return
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            if name in _SUMS:
                self.sums[_storage(t)] = (frozenset(_storage(x) for x in inputs), weakref.ref(t))
            if step is not None:
                self.stepped[_storage(t)] = (step, weakref.ref(t))
            elif name in _STEPS or not (t.is_floating_point() or t.is_complex()):
                self.stepped[_storage(t)] = (name, weakref.ref(t))  # a rounding; an argmax, a comparison

    def _step_of(self, t: torch.Tensor) -> str | None:
        found = self.stepped.get(_storage(t))
        return found[0] if found is not None and found[1]() is not None else None


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return id(t)
