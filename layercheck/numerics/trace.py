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
import re
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
    # Note [surrogate gradients] in reference.py: the autograd.Functions whose outputs are
    # piecewise constant in the inputs and parameters yet require grad
    surrogates: tuple[type, ...] = ()
    # Note [approximate detaches] in reference.py: how many smooth values the layer detaches,
    # and for each of them that is an extremum (a maximum subtracted for stability) its operation
    detached: int = 0
    detached_extrema: tuple[str, ...] = ()
    # fake quantisation (quantisation-aware training): operations whose output is piecewise constant
    # in their input and whose backward is a straight-through estimate by definition
    quantizers: tuple[str, ...] = ()
    forward_lowest: torch.dtype = torch.float64  # the lowest among those the forward computed


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
        self._recorder.forward = True
        try:
            with self._recorder, _explicit_no_grad(self._recorder):
                yield
        finally:
            self._recorder.forward = False

    @contextlib.contextmanager
    def backward(self, outputs: list[torch.Tensor]) -> Iterator[None]:
        for y in outputs:  # a Function's output returned as is (a spiking neuron's spikes)
            self._recorder.surrogate(y)
        with self._recorder:
            yield

    def result(self) -> Trace:
        """What was seen; the tensors the recorder held to follow them are let go."""
        recorder = self._recorder
        self._recorder = _Recorder()
        return Trace(recorder.lowest, tuple(dict.fromkeys(recorder.stopped_uses)),
                     tuple(dict.fromkeys(recorder.straight_through)), tuple(recorder.surrogates),
                     recorder.smooth_detaches, tuple(recorder.detached_extrema), tuple(recorder.quantizers),
                     recorder.forward_lowest)


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
# Note [approximate detaches] in reference.py: the extrema a layer subtracts for stability
# (a view of one is the same storage; a copy keeps the name)
_EXTREMA = {"amax", "amin", "max", "min", "aminmax", "logsumexp"}
_COPIES = {"clone", "_to_copy"}
# fake quantisation: fake_quantize_per_tensor_affine(_cachemask), fused_moving_avg_obs_fake_quant's
# _fused_moving_avg_obs_fq_helper, _fake_quantize_learnable_per_channel_affine, ...
_QUANTIZING = re.compile(r"fake_quantize|fq_helper")


class _Recorder(TorchDispatchMode):
    """Follows values computed from the marked tensors (by storage) and keeps the lowest
    floating precision among them."""

    def __init__(self) -> None:
        super().__init__()
        self.tainted = _Storages()  # value: True
        self.forward = False  # in the layer's forward (else its backward)
        self.lowest = torch.float64
        self.forward_lowest = torch.float64
        self.explicit_no_grad = False
        self.stopped: set[int] = set()  # computed from the inputs under an explicit no_grad
        self.held: list[torch.Tensor] = []  # those tensors, kept alive so no other reuses their memory
        self.stopped_uses: list[str] = []
        self.stepped = _Storages()  # value: the step it was computed from
        self.detached: dict[int, _Detached] = {}  # id -> a detached value of the inputs
        self.sums = _Storages()  # value: the storages of its terms
        self.straight_through: list[str] = []
        self.smooth_detaches = 0
        self.extrema = _Storages()  # value: the extremum operation that computed it
        self.detached_extrema: list[str] = []
        # Note [surrogate gradients] in reference.py: values piecewise constant in the inputs
        # and parameters (computed from them through steps only), and the Functions that returned
        # such a value requiring grad
        self.constant = _Storages()  # value: True
        self.surrogates: dict[type, None] = {}
        self.quantizers: dict[str, None] = {}  # fake-quantising operations the forward ran

    def taint(self, tensors: list[torch.Tensor]) -> None:
        for t in tensors:
            self.tainted.set(t)

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        inputs = [t for t in tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        grad = torch.is_grad_enabled()
        if grad and any(_storage(t) in self.stopped for t in inputs):
            self.stopped_uses.append(str(func.__name__ if hasattr(func, "__name__") else func))
        tainted = [t for t in inputs if _inexact(t) and t in self.tainted]
        if self.forward:  # what the layer computes; the backward's detaches are no estimator's
            name = func.overloadpacket.__name__ if hasattr(func, "overloadpacket") else str(func)
            self._follow_steps(name, inputs, tainted, out, grad)
            self._follow_constants(name, inputs, tainted, out)
            if tainted and _QUANTIZING.search(name):
                self.quantizers[name] = None
        if tainted:
            stopped = not grad and self.explicit_no_grad
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor) and _inexact(t):
                    self.tainted.set(t)
                    if stopped:
                        self.stopped.add(_storage(t))
                        self.held.append(t)
                    # a piecewise-constant value (float32 spikes) does not move under a step: exact
                    if torch.finfo(t.dtype).eps > torch.finfo(self.lowest).eps and not self._constant(t):
                        self.lowest = t.dtype.to_real()  # a complex64 spectrum computes in float32
                    if (self.forward and torch.finfo(t.dtype).eps > torch.finfo(self.forward_lowest).eps
                            and not self._constant(t)):
                        self.forward_lowest = t.dtype.to_real()
        return out

    def _follow_steps(self, name: str, inputs: list[torch.Tensor], tainted: list[torch.Tensor], out: Any,
                      grad: bool) -> None:
        """Note [straight-through estimators]: mark what a step computes from the inputs, and
        record a detach of such a value, one used beside such a value, and a detached
        difference added back to one of its terms. A detach counts once its value is used:
        autograd detaches the outputs it saves for backward (sigmoid's, exp's) through the
        same operation, and those are never used by the forward."""
        step = next((found for t in inputs if (found := self._step_of(t)) is not None), None)
        used = [self.detached[id(t)] for t in inputs if id(t) in self.detached] if self.detached else []
        if grad and used:
            for detached in used:
                if not detached.counted:
                    detached.counted = True
                    if detached.step is not None:
                        self.straight_through.append(detached.step)  # (x.round() - x).detach()
                    else:
                        self.smooth_detaches += 1  # a statistic held constant: a stabiliser, or a mistake
                        if detached.extremum is not None:
                            self.detached_extrema.append(detached.extremum)
            if step is not None:
                self.straight_through.append(step)  # y_hard - y_soft.detach(): a detached value beside a step
            elif name in _SUMS and any(_storage(t) in d.terms for t in inputs for d in used):
                self.straight_through.append("a detached difference added back")  # x + (f(x) - x).detach()
        if not tainted and step is None:
            return
        if name == "detach" and grad and tainted:
            if self._constant(inputs[0]):
                return  # a spike detached (snntorch's reset): held or not, it is the same value
            terms = self.sums.get(inputs[0]) or frozenset()
            for t in tree_leaves(out):
                if isinstance(t, torch.Tensor):
                    self.detached[id(t)] = _Detached(t, terms, step, self.extrema.get(inputs[0]))
            return
        extremum = name if name in _EXTREMA else self.extrema.get(inputs[0]) if name in _COPIES else None
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            if extremum is not None and t.is_floating_point():
                self.extrema.set(t, extremum)
            if name in _SUMS:
                self.sums.set(t, frozenset(_storage(x) for x in inputs))
            if step is not None:
                self.stepped.set(t, step)
            elif name in _STEPS or not (t.is_floating_point() or t.is_complex()):
                self.stepped.set(t, name)  # a rounding; an argmax, a comparison

    def _follow_constants(self, name: str, inputs: list[torch.Tensor], tainted: list[torch.Tensor],
                          out: Any) -> None:
        """Note [surrogate gradients] in reference.py: mark what is computed from the inputs
        through steps only — a comparison, a rounding, and what follows from those alone — and
        record the Functions that return such a value requiring grad."""
        constant = [t for t in inputs if self._constant(t)]
        for t in constant:
            self.surrogate(t)
        smooth = any(not self._constant(t) for t in tainted)
        if not smooth and not constant:
            return
        for t in tree_leaves(out):
            if not isinstance(t, torch.Tensor):
                continue
            if (name in _STEPS or not (t.is_floating_point() or t.is_complex())) if smooth else bool(constant):
                self.constant.set(t)
            else:  # written into in place with a smooth value, or a smooth value of its own
                self.constant.discard(t)

    def _constant(self, t: torch.Tensor) -> bool:
        return t in self.constant

    def surrogate(self, t: torch.Tensor) -> None:
        """Record the Function that returned ``t`` when ``t`` is piecewise constant yet requires grad."""
        function = getattr(t.grad_fn, "_forward_cls", None) if t.requires_grad and self._constant(t) else None
        if function is not None:
            self.surrogates[function] = None

    def _step_of(self, t: torch.Tensor) -> str | None:
        return self.stepped.get(t)


@dataclass
class _Detached:
    """A value of the inputs the layer detached (kept alive, so that its id is not another's),
    the storages of the terms of the sum or difference it was detached from, the step it was
    made by (None: a smooth value), the extremum operation it was computed by (None: another),
    and whether a use of it was counted yet."""

    tensor: torch.Tensor
    terms: frozenset[int]
    step: str | None
    extremum: str | None = None
    counted: bool = False


class _Storages:
    """What is known of the storages of the tensors seen, each forgotten once no tensor it was
    seen on is alive: memory freed and reused by another tensor is not taken for it (a false
    float32 island, a value made by a step), and nothing is kept alive for this."""

    def __init__(self) -> None:
        self._values: dict[int, Any] = {}
        self._alive: dict[int, int] = {}  # storage -> how many of the tensors seen on it are alive
        self._refs: list[weakref.ref[torch.Tensor]] = []

    def set(self, t: torch.Tensor, value: Any = True) -> None:
        key = _storage(t)
        self._values[key] = value
        self._alive[key] = self._alive.get(key, 0) + 1
        self._refs.append(weakref.ref(t, lambda _, key=key: self._forget(key)))  # type: ignore[misc]

    def get(self, t: torch.Tensor) -> Any:
        return self._values.get(_storage(t)) if self._values else None

    def __contains__(self, t: torch.Tensor) -> bool:
        return bool(self._values) and _storage(t) in self._values

    def __bool__(self) -> bool:
        return bool(self._values)

    def discard(self, t: torch.Tensor) -> None:
        self._values.pop(_storage(t), None)

    def _forget(self, key: int) -> None:
        left = self._alive.get(key, 0) - 1
        if left > 0:
            self._alive[key] = left
        else:
            self._alive.pop(key, None)
            self._values.pop(key, None)


def _storage(t: torch.Tensor) -> int:
    try:
        return int(t.untyped_storage().data_ptr())
    except (RuntimeError, NotImplementedError):
        return id(t)


def _inexact(t: torch.Tensor) -> bool:
    """Floating or complex: what a layer computes from its inputs and parameters through an FFT
    (a spectrum) is followed as the real values before it are."""
    return t.is_floating_point() or t.is_complex()
