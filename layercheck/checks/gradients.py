"""Back-propagation: it runs, gradients have the right sizes, they agree with float64 finite
differences, and they stay right when only some tensors require grad."""

from __future__ import annotations

import contextlib
import copy
import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch
from torch import nn

from layercheck.numerics.engine import (
    BASE_STEP,
    FiniteDifferences,
    NotDifferentiable,
    OnKinks,
    Probe,
    TooNoisy,
    Unstable,
)
from layercheck.numerics.functions import Backprop, LayerFunction
from layercheck.numerics.locate import Finding, diagnose
from layercheck.numerics.patterns import PATTERN_DRAWS
from layercheck.numerics.trace import Trace, Tracing, trace
from layercheck.numerics.verdict import GRADIENT_TOLERANCE, Verdict, judge
from layercheck.registry import GRADIENTS, check
from layercheck.sdk import (
    DTYPES,
    FORWARD,
    Allowance,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Point,
    Tolerance,
    all_finite,
    cotangents,
    dtype_name,
    forward_is_random,
    gradient_norm_floor,
    identical,
    largest,
    layer_failure,
    layer_is_float32,
    mismatch,
    nonfinite,
    ratio,
    shared_nonfinite_zeroed,
    user_frame,
)
from layercheck.subject import Mode, Subject
from layercheck.tensors import Outputs, backward_nodes
from layercheck.tensors import custom_functions as _custom_functions

# needs_input_grad compares a float32 backward with the same backward when more tensors
# require grad: the same operations, so only a different summation order can separate them
# (1e-6 or less); a gradient packed into the wrong slot or computed from the wrong branch is
# off by its own size.
FROZEN_TOLERANCE = 1e-3

# What torch.utils.checkpoint warns when reentrant checkpointing runs without an input that
# requires grad: everything inside it then gets no gradient, by PyTorch's design.
_REENTRANT_DROP = "None of the inputs have requires_grad=True"

# The gradient check's tolerances (numerics.GRADIENT_TOLERANCE explains the figures).
_GRADIENT_TOLERANCES = tuple(
    Tolerance(dtype_name(dtype), value,
              "relative error of directional derivatives against float64 finite differences" if dtype is torch.float64
              else "relative difference (norm) of each tensor's gradient from the float64 gradient")
    for dtype, value in GRADIENT_TOLERANCE.items())


# -- what a hand-written backward returns ------------------------------------------------------


@dataclass(frozen=True)
class RawGradient:
    """One gradient as a hand-written backward returned it, before autograd's checks, its
    summing over broadcast dimensions and its dtype cast."""

    function: str
    position: int
    shape: tuple[int, ...]
    dtype: torch.dtype
    expected_shape: tuple[int, ...]
    expected_dtype: torch.dtype

    @property
    def wrong(self) -> bool:
        """A dtype autograd casts silently, or a size autograd cannot sum to the input's."""
        return self.dtype != self.expected_dtype or (self.shape != self.expected_shape and not self.broadcast)

    @property
    def broadcast(self) -> bool:
        """A size autograd sums to the input's (the input broadcasts to it): right, but wasteful."""
        if self.shape == self.expected_shape or len(self.expected_shape) > len(self.shape):
            return False
        tail = self.shape[len(self.shape) - len(self.expected_shape):]
        return all(e in (1, s) for e, s in zip(self.expected_shape, tail))

    def waste(self) -> str:
        """The note for a broadcast-shaped gradient: its size and the memory it costs."""
        extra = math.prod(self.shape) - math.prod(self.expected_shape)
        size = extra * torch.empty((), dtype=self.dtype).element_size()
        return (f"{self.function}.backward returns the gradient of its input {self.position} at size {self.shape} "
                f"for an input of size {self.expected_shape}; autograd sums it down, so it is right, but it holds "
                f"{extra} element(s) ({_bytes(size)}) more than needed at this layout: consider "
                f"grad.sum_to_size({self.expected_shape})")

    def describe(self) -> str:
        return (f"{self.function}.backward returned a gradient of size {self.shape} {dtype_name(self.dtype)} "
                f"for its input {self.position}, which is {self.expected_shape} {dtype_name(self.expected_dtype)}")


class BackwardRecorder:
    """Records what the hand-written backward of every ``autograd.Function`` in the graph
    returns. The Function classes found in the graph get their ``backward`` (or ``vjp``)
    wrapped while the backward runs, and put back afterwards: autograd's engine validates and
    reshapes a node's outputs before any hook sees them."""

    def __init__(self) -> None:
        self.records: list[RawGradient] = []
        self.functions: list[str] = []

    @contextlib.contextmanager
    def __call__(self, outputs: list[torch.Tensor]) -> Iterator[None]:
        classes = _custom_functions(outputs)
        self.functions = [cls.__name__ for cls in classes]
        missing = object()
        patched = []
        try:
            for cls in classes:
                name = "vjp" if cls.vjp is not torch.autograd.Function.vjp else "backward"
                patched.append((cls, name, cls.__dict__.get(name, missing)))
                setattr(cls, name, staticmethod(self._wrap(cls, getattr(cls, name))))
            yield
        finally:
            for cls, name, saved in reversed(patched):
                if saved is missing:
                    delattr(cls, name)
                else:
                    setattr(cls, name, saved)

    def _wrap(self, cls: type, original: Any) -> Any:
        def backward(node: Any, *grads: Any) -> Any:
            result = original(node, *grads)
            self._record(cls.__name__, node, result if isinstance(result, tuple) else (result,))
            return result

        return backward

    def _record(self, function: str, node: Any, returned: tuple[Any, ...]) -> None:
        # backward returns one entry per argument of forward, non-tensor ones included; the
        # graph has one edge per tensor argument, None for those that do not require grad. The
        # arguments that need a gradient and the edges that lead somewhere pair up in order.
        needed = [i for i, needs in enumerate(node.needs_input_grad) if needs]
        edges = [(edge, index) for edge, index in node.next_functions if edge is not None]
        if len(needed) != len(edges):
            return  # nothing to align by: autograd itself reports what is wrong
        for position, (edge, index) in zip(needed, edges):
            grad = returned[position] if position < len(returned) else None
            if not isinstance(grad, torch.Tensor):
                continue
            try:
                meta = edge._input_metadata[index]
            except (AttributeError, IndexError, RuntimeError):
                continue  # this torch does not expose what autograd expects: nothing to compare
            self.records.append(RawGradient(function, position, tuple(grad.shape), grad.dtype,
                                            tuple(meta.shape), meta.dtype))

    def wrong(self) -> list[RawGradient]:
        return [r for r in self.records if r.wrong]

    def broadcast(self) -> list[RawGradient]:
        return [r for r in self.records if r.broadcast and not r.wrong]


# -- the shared runs ---------------------------------------------------------------------------

# The checks that read the gradient check's shared runs (each holds full-size inputs, outputs
# and gradients): once they have all run, the runner lets the runs go (Context.shared).
_FLOAT32_READERS = ("backward_runs", "needs_input_grad", "finite")
_FLOAT32_GRADIENTS = "layercheck.gradients.float32.gradients"  # what outlives the float32 run (KeptGradients)
_GRADIENTS_READERS = ("backward_size", "gradients")
_READERS = ("backward_size", "gradients", "gradgrad", "forward_ad")  # the float64 runs


@dataclass
class Analytic:
    """One forward and backward of a fresh layer on the generated inputs, with seeded
    cotangents on all its floating outputs; the backward's error, if it raised; and, when
    asked for, what the run computed (Note [float32 islands] in numerics/trace.py)."""

    fn: LayerFunction
    result: Backprop | None
    error: LayerRaised | None
    recorder: BackwardRecorder
    trace: Trace | None = None

    @property
    def grads(self) -> list[torch.Tensor | None]:
        assert self.result is not None
        return self.result.grads

    def check_ran(self) -> Backprop:
        """The backward's result; re-raises its error (the layer's fault: a failure)."""
        if self.error is not None:
            raise self.error
        assert self.result is not None
        return self.result


def _analytic(ctx: Context, subject: Subject, inputs: list[torch.Tensor] | None = None, *,
              traced: bool = False) -> Analytic:
    """``traced``: run it under a :class:`Tracing` recorder too, which then costs the gradient
    check no run of its own; a layer that raises under the recorder is run again without it,
    so that what it raises is its own."""
    fn = LayerFunction(subject, subject.inputs(share=True) if inputs is None else inputs)
    if traced:
        tracing = Tracing()
        recorder = BackwardRecorder()

        @contextlib.contextmanager
        def watch(outputs: list[torch.Tensor]) -> Iterator[None]:
            with recorder(outputs), tracing.backward(outputs):
                yield

        try:
            result = fn.gradient(lambda outputs: cotangents(ctx, outputs, copy=False), watch=watch,
                                 around=tracing.forward)
            if all(g is not None for g in result.grads):
                return Analytic(fn, result, None, recorder, tracing.result())
            fn.reset()
            plain = _untraced(ctx, fn)
            if plain.result is None or all(g is not None or h is None
                                           for g, h in zip(result.grads, plain.result.grads)):
                fn.reset()
                return Analytic(fn, result, None, recorder, tracing.result())
            return plain  # Note [a recorder that takes a gradient away]
        except LayerRaised:
            fn.reset()
    return _untraced(ctx, fn, traced=traced)


# Note [a recorder that takes a gradient away]
#     The float64 run is recorded under a dispatch mode (the precision tracer), and a dispatch
#     mode can change what autograd records: a custom operator with a Python CPU kernel and no
#     backward (torch.library.impl alone) gets torch's not-implemented fallback node under the
#     mode, which gives its inputs no gradient, while without the mode autograd records the
#     kernel's own operations (and warns). The gradient check then saw "no gradient at all"
#     where backward_runs saw one, left the tensor out and said backward_runs reported it: the
#     tensor was never judged. So a traced run that gives some tensor no gradient is run again
#     without the recorder, and where that run gives one, it is the run judged (its precision
#     traced apart, as an untraced run's is).


def _untraced(ctx: Context, fn: LayerFunction, *, traced: bool = False) -> Analytic:
    """One forward and backward of ``fn`` as training runs it; ``traced``: its precision traced
    by a forward of its own."""
    recorder = BackwardRecorder()
    try:
        result = fn.gradient(lambda outputs: cotangents(ctx, outputs, copy=False), watch=recorder)
    except LayerRaised as exc:
        if exc.phase != "backward":
            raise
        return Analytic(fn, None, exc, recorder)
    return Analytic(fn, result, None, recorder, trace(fn) if traced else None)


def float32_run(ctx: Context) -> Analytic:
    """The float32 forward and backward shared by the four gradient checks and finite. What
    its hand-written backwards returned is held apart for backward_size, and its gradients for
    gradients[float32], which compares them with the float64 ones once the finite differences
    are done: the run's inputs, outputs and cotangents can go before the float64 runs come."""

    def compute() -> Analytic:
        analytic = _analytic(ctx, ctx.fresh(torch.float32))
        if analytic.result is not None:
            ctx.shared(_FLOAT32_GRADIENTS, lambda: KeptGradients.of(analytic), readers=_GRADIENTS_READERS)
        return analytic

    return ctx.shared("layercheck.gradients.float32", compute, readers=_FLOAT32_READERS)


@dataclass(frozen=True)
class KeptGradients:
    """What a run keeps once its inputs, outputs and cotangents are let go: the gradients, the
    names and sizes and dtypes of the tensors they belong to (on the meta device), whether
    each floating output required grad, and what the hand-written backwards returned."""

    names: list[str]
    tensors: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    differentiable: list[bool]
    recorder: BackwardRecorder

    @classmethod
    def of(cls, analytic: Analytic) -> KeptGradients:
        result = analytic.check_ran()
        return cls(analytic.fn.names, [t.to("meta") for t in analytic.fn.point], result.grads,
                   result.differentiable, analytic.recorder)


def float32_gradients(ctx: Context) -> KeptGradients:
    """The float32 run's gradients (see :func:`float32_run`). Raises the run's LayerRaised."""
    return ctx.shared(_FLOAT32_GRADIENTS, lambda: KeptGradients.of(float32_run(ctx)), readers=_GRADIENTS_READERS)


def float64_run(ctx: Context) -> Analytic:
    """The float64 copy's forward and backward: the analytic side of the float64 reference,
    and what ``backward_size`` reads a hand-written backward's float64 dtypes from.
    Raises LayerRaised when the float64 forward raises."""
    return ctx.shared("layercheck.gradients.float64.analytic",
                      lambda: _analytic(ctx, fresh_copy(ctx, torch.float64), traced=True),
                      readers=_READERS)


@dataclass
class Reference:
    """The float64 copy's analytic gradient and the finite differences that judge it."""

    fd: FiniteDifferences
    run: Backprop
    verdict: Verdict
    trace: Trace = field(default_factory=Trace)
    float64_failure: str | None = None  # why the layer cannot run in float64: the reference is float32
    sizes: dict[int, str] = field(default_factory=dict)  # the input's sizes a wrong factor may come from
    # Note [widened islands] in numerics/functions.py: why the reference was taken again with the
    # layer's lower-precision casts kept in float64 (the verdict at the island's step), or None
    widened: str | None = None
    # Note [straight-through estimators] in numerics/trace.py: why the reference was taken again
    # with the values the layer detaches held at the point (the first verdict), or None
    straight_through: str | None = None
    # Note [surrogate gradients]: why the reference was taken again with the gradient through the
    # layer's surrogate Functions taken as zero, and the tensors whose gradient flows only there
    surrogate: str | None = None
    approximate: str | None = None  # Note [approximate detaches]: why the small disagreement was accepted
    detach_hint: str | None = None  # Note [approximate detaches]: a large disagreement the detaches explain
    surrogate_only: list[str] = field(default_factory=list)
    layer_grads: list[torch.Tensor | None] | None = None  # then: the gradients with the surrogates, as trained
    beside: bool = False  # Note [beside the kinks]: taken with the layer's parameters moved off the point
    # Note [no silent pass]: what is not finite in the float64 run where the float32 run is finite
    # (then float64_failure says so too, and the reference is float32)
    float64_defect: str | None = None
    _diagnosis: tuple[list[Finding], list[str], list[str]] | None = field(default=None, repr=False)

    def reset_diagnosis(self) -> None:
        """Forget the diagnosis: the verdict was taken again (over fewer tensors)."""
        self._diagnosis = None

    def diagnosis(self) -> tuple[list[Finding], list[str], list[str]]:
        """(wrong tensors, tensors that agree, outputs whose gradient path is wrong)."""
        if self._diagnosis is None:
            with skip_if_not_differentiable():
                wrong, right = diagnose(self.fd, self.run.grads, self.verdict.tolerance, self.sizes)
                self._diagnosis = (wrong, right, _wrong_outputs(self))
        return self._diagnosis


def _wrong_outputs(ref: Reference) -> list[str]:
    """With several floating outputs: which of them back-propagate wrongly (one backward each)."""
    outputs = ref.run.outputs
    if len(outputs) < 2:
        return []
    wrong = []
    for k in range(len(outputs)):
        only = [w if i == k else None for i, w in enumerate(ref.run.cotangents)]
        grads = ref.fd.fn.gradient(only).grads
        ref.fd.fn.reset()
        verdict = judge(ref.fd, grads, ref.verdict.tolerance, outputs=[k])
        if not verdict.passed:
            lost = "" if ref.run.differentiable[k] else " (it does not require grad: detached?)"
            wrong.append(f"output {k}{lost}: {verdict.summary()}")
    return wrong


def float64_reference(ctx: Context) -> Reference:
    def build() -> Reference:
        try:
            analytic = float64_run(ctx)
            fn, run = analytic.fn, analytic.check_ran()
        except LayerRaised as exc:  # float32 ran (backward_runs): judge the float32 gradient directly
            return _float32_reference(ctx, _raised(exc))
        if not run.outputs:
            raise CheckSkipped("the layer returns no floating output: there is nothing to differentiate")
        defect = _nonfinite_problem(run, fn.names, "float64")
        if defect is not None and _float32_run_finite(ctx):  # Note [no silent pass]
            ref = _float32_reference(ctx, f"{defect} where the float32 run's are finite")
            ref.float64_defect = defect
            return ref
        _skip_unless_finite(ctx, run, "float64")
        return _judged(ctx, fn, run, traced=analytic.trace)

    return ctx.shared("layercheck.gradients.float64", build, readers=_READERS)


# Note [no silent pass]
#     A check at the core of the verdict never ends skipped because of something the layer did.
#     A layer whose float64 outputs or gradients are not finite (a normalisation kernel whose
#     float64 weight gradient comes out NaN) cannot be differenced in float64; skipping there
#     and pointing at the finite check was a silent pass where float32, which finite looks at,
#     is finite: every check passed or skipped, exit 0. So where the float32 run is finite, the
#     float64 defect fails gradients[float64], naming the tensor, and the float32 gradients are
#     judged against float32 finite differences by gradients[float32] (Note [float32 reference]).
#     Where float32 is not finite either, finite fails and the skip points at it. Every skip
#     says whether the check does not apply (CheckSkipped's default) or applies and could not
#     judge (``applies=True``: rounding noise, kinks, a refused dtype, a cause reported
#     elsewhere); the summary counts the latter, and --strict fails them.


def _nonfinite_problem(run: Backprop, names: Sequence[str], dtype: str) -> str | None:
    """What is not finite in a run's outputs or gradients, naming the first such tensor, or None."""
    for i, y in enumerate(run.outputs):
        if not y.is_meta and not all_finite(y):  # meta: found finite before, values let go
            return f"{dtype} output {i} has {nonfinite(y)}"
    for name, g in zip(names, run.grads):
        if g is not None and not all_finite(g):
            return f"the {dtype} gradient of {name} has {nonfinite(g)}"
    return None


def _float32_run_finite(ctx: Context) -> bool:
    """Whether the run the finite check looks at (the float32 one, for a float32 layer) has
    finite outputs and gradients: then a non-finite float64 run is nobody else's finding."""
    if not layer_is_float32(ctx):
        return False
    try:
        run = float32_run(ctx).check_ran()
    except LayerRaised:
        return False
    return _nonfinite_problem(run, float32_run(ctx).fn.names, "float32") is None


# Note [beside the kinks]
#     A point that sits exactly on kinks (Note [kinks at the point] in numerics/engine.py: a
#     whole timm ResNet-18 or RegNet at initialisation, whose zero-initialised residual scales
#     keep ReLUs' inputs at exactly 0) cannot be judged by finite differences. A backward's
#     formulas do not depend on the point, so the gradient check takes its references again at a
#     point beside it: the layer's floating parameters moved by KINK_NUDGE of their root mean
#     square (an all-zero tensor, the zero-initialised scale that put the point there, by
#     KINK_NUDGE), seeded, the same values in float64 and in float32; the inputs are the same.
#     The verdict there is the check's, right or wrong, and says where it was taken. Where the
#     layer raises there, gives values that are not finite, or still sits on kinks, the skip
#     stands. The ResNet-18 passes there, as it does with that initialisation off; a wrong
#     backward is wrong beside the point as at it.
KINK_NUDGE = 1e-3
_NUDGE_SEED = 104_729


def gradient_reference(ctx: Context) -> Reference:
    """The float64 reference the gradient check judges: at the point, or beside it where the
    point sits on kinks (Note [beside the kinks])."""

    def build() -> Reference | CheckSkipped:
        try:
            return float64_reference(ctx)
        except CheckSkipped as exc:
            if not isinstance(exc.__cause__, OnKinks):
                return exc
            subject = _beside(ctx, torch.float64)
            if subject is None:  # no parameter to move
                return exc
            beside = _reference_beside(ctx, subject)
            if isinstance(beside, Reference):
                return beside
            return CheckSkipped(f"{exc}; nor could they beside it, with the layer's floating parameters moved by "
                                f"{KINK_NUDGE:g} of their size" + (f" ({beside})" if beside else ""), applies=True)

    found = ctx.shared("layercheck.gradients.reference", build, readers=("gradients",))
    if isinstance(found, CheckSkipped):
        raise found
    return found


def _reference_beside(ctx: Context, subject: Subject) -> Reference | str | None:
    """The reference beside the point, or why finite differences could not judge there either
    (a skip's reason), or None (the layer raised or failed there: the skip at the point stands)."""
    try:
        analytic = _analytic(ctx, subject, traced=True)
        fn, run = analytic.fn, analytic.check_ran()
        if not run.outputs:
            return None
        _skip_unless_finite(ctx, run, "float64")  # its skip or failure leaves the skip at the point
        ref = _judged(ctx, fn, run, traced=analytic.trace)
    except CheckSkipped as exc:
        return f"there, {exc}" if isinstance(exc.__cause__, TooNoisy) else None
    except (LayerRaised, CheckFailed):
        return None
    ref.beside = True
    return ref


def _beside(ctx: Context, dtype: torch.dtype, *, sample: bool = False) -> Subject | None:
    """A fresh layer in ``dtype`` with its floating parameters moved off the point (Note
    [beside the kinks]); None for a layer without floating parameters."""
    moved = ctx.shared("layercheck.gradients.nudged", lambda: _nudged_parameters(ctx), readers=("gradients",))
    if not moved:
        return None
    subject = fresh_copy(ctx, dtype, sample=sample)
    assert subject.module is not None
    with torch.no_grad():
        for name, p in subject.module.named_parameters():
            if name in moved:
                p.copy_(moved[name])
    return subject


def _fresh(ctx: Context, dtype: torch.dtype, beside: bool, *, sample: bool = False) -> Subject:
    """A fresh layer, at the point or beside it."""
    subject = _beside(ctx, dtype, sample=sample) if beside else fresh_copy(ctx, dtype, sample=sample)
    assert subject is not None  # a reference is taken beside the point only where there are parameters to move
    return subject


def _complex64_parameters(ctx: Context) -> list[str]:
    """The parameters ``layer.double()`` leaves complex64 (Note [complex weights in float64])."""
    module = ctx.target.pristine()
    return [f"parameter {name!r}" for name, p in ([] if module is None else module.named_parameters())
            if p.dtype == torch.complex64]


# Note [complex weights in float64]
#     ``layer.double()`` casts floating tensors only: a Fourier layer's complex64 weights stay
#     complex64 in the float64 copy (neuraloperator's SpectralConv, Li et al.'s FNO). Differenced
#     there, each step rounds the moved weights to float32: an error in the displacement itself,
#     the same in every output, which the noise estimate (a median over output chunks) cannot
#     see. An FNO layer that casts its weights to the spectrum's dtype was skipped as too steep
#     at one seed in four for it, and its double backward failed by 50% at another: the first
#     gradient of a complex64 weight is float32-precise. So the copies the gradient checks take
#     their float64 references from have their complex64 parameters and buffers made complex128
#     as well: the same operations on the same values, without float32's rounding. A layer that
#     then still computes in complex64 somewhere (it allocates its spectrum as torch.cfloat) is a
#     float32 island there (Note [float32 islands] in numerics/trace.py) and is differenced as
#     one. The dtype check keeps ``layer.double()`` as users call it: a layer that cannot run
#     after it fails there, whatever these copies do.
def fresh_copy(ctx: Context, dtype: torch.dtype, *, sample: bool = False) -> Subject:
    """A fresh layer in ``dtype`` for the gradient checks; in float64, with its complex
    parameters and buffers in complex128 too (Note [complex weights in float64])."""
    subject = ctx.fresh(dtype, sample=sample)
    if dtype is torch.float64 and subject.module is not None:
        for t in [*subject.module.parameters(), *subject.module.buffers()]:
            if t.dtype == torch.complex64:
                t.data = t.data.to(torch.complex128)
    return subject


def _nudged_parameters(ctx: Context) -> dict[str, torch.Tensor]:
    """The float32 layer's floating parameters moved by KINK_NUDGE of their size (seeded): read
    from the pristine layer every subject is loaded from, rounded to float32 as a float32
    subject's are."""
    module = ctx.target.pristine()
    if module is None:
        return {}
    generator = torch.Generator().manual_seed(ctx.seed + _NUDGE_SEED)
    moved = {}
    for name, p in module.named_parameters():
        if not p.is_floating_point() or p.numel() == 0:
            continue
        value = p.detach().cpu().float().double()
        if not bool(value.isfinite().all()):
            continue
        scale = float(value.square().mean().sqrt()) or 1.0
        noise = torch.randn(value.shape, generator=generator, dtype=torch.float64)
        moved[name] = (value + KINK_NUDGE * scale * noise).float()
    return moved


def _beside_text(ref: Reference) -> str:
    return (f" at a point beside the layer's (its parameters moved by {KINK_NUDGE:g} of their size: the layer's "
            "point sits on kinks, see the note)" if ref.beside else "")


# Note [float32 reference]
#     A layer that cannot run in float64 (it allocates a buffer in the default dtype and fills it
#     with float64's largest value, calls a float32-only kernel) still gets a gradient verdict:
#     its float32 gradient is judged against float32 finite differences, at float32's step and
#     with its measured noise (Note [float32 islands] in numerics/trace.py), held to
#     FLOAT32_REFERENCE_TOLERANCE. It is weaker than the float64 check — errors below about
#     1e-3 of the derivative go unseen — and the result says so and why float64 failed.
FLOAT32_REFERENCE_TOLERANCE = 1e-3


def _float32_reference(ctx: Context, cause: str) -> Reference:
    """The float32 reference of a layer that cannot run in float64, for ``cause``."""
    analytic = float32_run(ctx)
    fn, run = analytic.fn, analytic.check_ran()
    if not run.outputs:
        raise CheckSkipped("the layer returns no floating output: there is nothing to differentiate")
    _skip_unless_finite(ctx, run, "float32")
    return _judged(ctx, fn, run, precision=torch.float32, float64_failure=cause)


def _raised(failure: LayerRaised) -> str:
    """What the layer raised, and where in its code."""
    where = user_frame(failure.exc)
    cause = f"{failure.phase} raised {type(failure.exc).__name__}: {str(failure.exc).splitlines()[0]}"
    return cause + (f" at {where}" if where else "")


def _judged(ctx: Context, fn: LayerFunction, run: Backprop, *, precision: torch.dtype | None = None,
            float64_failure: str | None = None, traced: Trace | None = None) -> Reference:
    """The finite differences of ``fn`` and their verdict on its analytic gradient ``run``
    (``traced``: what the run computed, when it was recorded while it ran)."""
    kept = None if any(y.is_meta for y in run.outputs) else run.outputs  # meta: judged before, values let go
    fd = FiniteDifferences(fn, [w for w in run.cotangents if w is not None], seed=ctx.seed, outputs=kept)
    # the outputs' values are in the differences' base sums now: only their sizes and dtypes
    # are read again, and a full-size copy fewer is held while the layer is differenced
    run.outputs[:] = [y.to("meta") for y in run.outputs]
    fd.excluded = {slot for slot, g in enumerate(run.grads) if g is None}
    fd.held = _held_rows(fn)
    traced = trace(fn) if traced is None else traced
    # a complex64 parameter of a float64 copy (layer.double() leaves complex weights alone) is
    # differenced through its float32 real view: at float32's precision, as a float32 island is
    points = [t.dtype for t in fn.point if t.is_floating_point()]
    fd.precision = precision or max([traced.lowest, *points], key=lambda d: torch.finfo(d).eps)
    try:
        fd.check_stable()
    except Unstable as exc:
        raise CheckFailed(
            f"the float64 layer's output at the same inputs and parameters changed between two evaluations "
            f"(relative change {exc.change:.2g}), so it is not a fixed function finite differences can judge: "
            "something it reads was modified in place — by backward (a saved tensor, an input or an output "
            "updated in place, e.g. y.sqrt_() for y.sqrt()) or by forward (state or an attribute not put back)",
            blocking=True, relative_change=exc.change) from exc
    tolerance = ctx.tolerance_of(GRADIENTS, "float64")  # the gradient check's verdict, whoever asks first
    if float64_failure is not None:
        tolerance = max(tolerance, FLOAT32_REFERENCE_TOLERANCE)
    widens = precision is None and fd.precision != torch.float64 and not fn.widen
    with skip_if_not_differentiable():
        try:
            verdict = judge(fd, run.grads, tolerance)
        except TooNoisy as exc:  # Note [widened islands]: no verdict at all at the island's step
            found = _widened(ctx, fn, run, str(exc)) if widens else None
            if found is None and traced.quantizers:
                raise CheckSkipped(
                    f"the layer fake-quantises ({', '.join(traced.quantizers)}): its output is piecewise constant in "
                    "what it quantises and its gradient there a straight-through estimate by definition, which "
                    f"finite differences cannot judge ({exc})", applies=True) from exc
            if found is None:
                raise
            return found
        ref = Reference(fd, run, verdict, traced, float64_failure, _size_names(ctx))
    if not ref.verdict.passed and widens:
        ref = _widened(ctx, fn, run, ref) or ref
    if not ref.verdict.passed and traced.straight_through and fn.held is None:
        ref = _straight_through(ctx, fn, ref) or ref
    elif not ref.verdict.passed and traced.detached and fn.held is None:
        ref = _approximate_detaches(ctx, fn, ref) or ref
    if not ref.verdict.passed and traced.surrogates and not fn.cut:
        ref = _surrogate_functions(ctx, fn, ref) or ref
    return ref


# Note [approximate detaches]
#     A layer may detach a smooth value its output barely depends on: Performer's random-feature
#     softmax kernel subtracts a detached maximum inside exp(), which the normalisation would
#     cancel exactly but for the eps added beside it, so its gradient is the derivative with that
#     maximum held constant, off the true one by about 1e-4. When the differences disagree and the
#     layer detaches smooth values (and no step's), the reference is taken again with every value
#     it detaches held at the point (as for a straight-through estimator): if that agrees, the
#     backward is exactly right for what it means to differentiate, and the disagreement is the
#     detach's alone. It is accepted, with a note naming its size, only when it is at most
#     APPROXIMATE_DETACH relative (gradcheck's own rtol); a statistic detached by mistake (a
#     normalisation's mean) moves the gradient by far more and stays a failure.
APPROXIMATE_DETACH = 1e-3
# The largest such disagreement for which the failure suggests a --tolerance that accepts it.
ACCEPTABLE_DETACH = 0.05


def _approximate_detaches(ctx: Context, fn: LayerFunction, first: Reference) -> Reference | None:
    """The reference taken again with the smooth values the layer detaches held at the point
    (Note [approximate detaches]), when it agrees and the first verdict's error is small; None
    otherwise, and ``fn`` is as it was."""
    error = first.verdict.worst.relative_error
    ref = _held(ctx, fn, first)
    if ref is None or not ref.verdict.passed:
        fn.release()
        return None
    if error > APPROXIMATE_DETACH:
        fn.release()
        first.detach_hint = _detach_hint(first.trace, error, ctx.variant)
        return None
    ref.approximate = (
        "the layer detaches smooth values (a maximum subtracted for stability, a statistic), so its gradient is the "
        "derivative with those values held constant: with them held at the point the differences agree, and the "
        f"full derivative differs from the gradient by a relative {error:.2g} ({first.verdict.summary()}), at most "
        f"{APPROXIMATE_DETACH:g}: an approximation the layer makes on purpose (an eps beside a stabiliser), or the "
        "error of a detach it should not make")
    return ref


def _detach_hint(trace: Trace, error: float, variant: str) -> str:
    """What a disagreement the layer's detaches explain says (Note [approximate detaches]): a
    maximum subtracted for stability is the layer's own approximation where something beside it
    (an eps) keeps the output from cancelling it; another statistic detached is likely a mistake."""
    lead = ("With the smooth values the layer detaches held constant, the differences agree with its gradient: the "
            f"detaches are the whole disagreement, and they move the derivative by a relative {error:.2g}")
    # a tolerance that accepts more than a few percent would accept any wrong gradient as well
    accept = (f"accept it for this layer (--tolerance gradients.{variant}={_above(2 * error):g}) or leave the check "
              "out (--skip gradients)" if error <= ACCEPTABLE_DETACH else
              f"leave the check out for this layer (--skip gradients: a tolerance above {ACCEPTABLE_DETACH:g} would "
              "accept a wrong gradient too)")
    if not trace.detached or len(trace.detached_extrema) < trace.detached:
        return (f"{lead} — a statistic (a mean, a norm) detached by mistake? If it is meant (kornia's HardNet "
                f"normalises each patch by its detached mean and standard deviation, on purpose), {accept}; "
                "otherwise let the gradient through the statistic")
    names = ", ".join(dict.fromkeys(trace.detached_extrema))
    return (f"{lead}. What it detaches is a maximum ({names}) subtracted for stability, which the output would "
            "cancel but for something beside it (an eps added after exp(x - max): Performer's softmax kernel): the "
            "gradient leaves out the derivative through that maximum, on purpose, and here it is not small. If that "
            f"approximation is meant, {accept}; otherwise let the gradient through the maximum")


def _above(error: float) -> float:
    """A round tolerance above ``error``: 0.012 -> 0.02, 0.003 -> 0.005 (given twice the error: room
    for other draws)."""
    scale = 10.0 ** math.floor(math.log10(error))
    return next(step * scale for step in (2, 5, 10) if step * scale > error)


def _surrogate_functions(ctx: Context, fn: LayerFunction, first: Reference) -> Reference | None:
    """The reference taken again with the gradient through the layer's surrogate Functions taken
    as zero, the derivative of their piecewise-constant forward (Note [surrogate gradients]):
    what the rest of the layer's backward is judged by, so its verdict, right or wrong, is the
    one to give; None when it cannot be taken, and ``fn`` is as it was."""
    fn.cut = first.trace.surrogates
    ref = None
    try:
        try:
            run = fn.gradient(list(first.run.cotangents))
        finally:
            fn.reset()
        if run.outputs:
            _skip_unless_finite(ctx, run, "float64")
            ref = _judged(ctx, fn, run, precision=first.verdict.precision, float64_failure=first.float64_failure,
                          traced=first.trace)
    except (LayerRaised, CheckFailed, CheckSkipped):
        pass  # nothing the first verdict does not already say: it stands
    if ref is None:
        fn.cut = ()
        return None
    ref.surrogate_only = [name for name, g, cut in zip(fn.names, first.run.grads, ref.run.grads)
                          if _nonzero(g) and not _nonzero(cut)]
    functions = _cut_names(fn)
    ref.surrogate = (
        f"the layer's autograd.Function {functions} computes a step in its forward (a value piecewise constant in the "
        "inputs and parameters: a spike, a sign, a rounding) and passes a gradient in its backward: a surrogate "
        "gradient by design (spiking neurons, binarised networks), which finite differences cannot judge, as the "
        f"step's derivative is zero wherever it exists ({first.verdict.summary()})")
    ref.straight_through = first.straight_through
    ref.layer_grads = first.run.grads
    return ref


def _straight_through(ctx: Context, fn: LayerFunction, first: Reference) -> Reference | None:
    """The reference taken again with the values the layer detaches held at the point (Note
    [straight-through estimators] in numerics/trace.py): what autograd differentiates, so its
    verdict, right or wrong, is the one to give; None when it cannot be taken (the layer
    detaches other values at other points), and ``fn`` is as it was."""
    ref = _held(ctx, fn, first)
    if ref is None:
        return None
    seen = ", ".join(first.trace.straight_through[:3])
    ref.straight_through = (
        f"the layer detaches a value made by a step, or a difference it adds back ({seen}): a straight-through "
        "estimator, whose forward takes one function's value and whose gradient another's by design, so finite "
        f"differences of its forward disagree with autograd ({first.verdict.summary()}). With every value it "
        "detaches held at the point, which is what autograd differentiates, " + ("they agree" if ref.verdict.passed
                                                                                 else "they still disagree"))
    return ref


def _nonzero(grad: torch.Tensor | None) -> bool:
    return grad is not None and bool(grad.abs().sum() > 0)


def _cut_names(fn: LayerFunction) -> str:
    """The surrogate Functions whose gradient ``fn`` takes as zero (Note [surrogate gradients])."""
    return ", ".join(f.__qualname__ for f in fn.cut)


def _held(ctx: Context, fn: LayerFunction, first: Reference) -> Reference | None:
    """The reference taken again with the values the layer detaches held at the point, the
    first run's analytic gradient judged by it; None when it cannot be taken (the layer raises,
    or detaches other values at other points), and ``fn`` is as it was."""
    ref = None
    try:
        if fn.hold():
            ref = _judged(ctx, fn, first.run, precision=first.verdict.precision,
                          float64_failure=first.float64_failure, traced=first.trace)
    except (LayerRaised, CheckFailed, CheckSkipped):
        pass  # nothing the first verdict does not already say: it stands
    if ref is None or not fn.held_matched:
        fn.release()
        return None
    return ref


def _widened(ctx: Context, fn: LayerFunction, first: Backprop, island: Reference | str) -> Reference | None:
    """The reference taken again with the layer's lower-precision casts kept in float64 (Note
    [widened islands] in numerics/functions.py): when the island's verdict (a Reference)
    disagreed, only if it agrees; when the island was too noisy to judge (``island`` says
    why), whatever it says. ``first``: the island's run, whose cotangents are used again. None
    otherwise, and ``fn`` is as it was."""
    fn.widen = True
    ref = None
    try:
        tracing = Tracing()
        try:
            run = fn.gradient(list(first.cotangents), watch=tracing.backward, around=tracing.forward)
        finally:
            fn.reset()
        traced = tracing.result()
        if traced.lowest == torch.float64 and run.outputs:  # else a cast it could not widen
            _skip_unless_finite(ctx, run, "float64")
            ref = _judged(ctx, fn, run, traced=traced)
    except (LayerRaised, CheckFailed, CheckSkipped):
        pass  # nothing the first verdict does not already say: it stands
    if ref is None or (isinstance(island, Reference) and not ref.verdict.passed):
        fn.widen = False
        fn.release()  # what the widened verdict's own retries set: the island's are taken afresh
        fn.cut = ()
        return None
    kept = ("with the layer's casts to a lower precision and its allocations in the default dtype kept in float64 "
            "(the same operations and derivative formulas, without the rounding)")
    if isinstance(island, Reference):
        precision = dtype_name(island.verdict.precision)
        ref.widened = (f"at {precision}'s difference step ({island.verdict.step:.2g}), which the layer's {precision} "
                       f"computation inside sets, the differences disagreed ({island.verdict.summary()}): a step that "
                       f"large crosses kinks. {kept[0].upper()}{kept[1:]} they agree at the float64 step")
    else:
        ref.widened = (f"at the precision the layer computes in inside, {island[0].lower()}{island[1:]}; {kept}, "
                       f"they were judged at the float64 step")
    return ref


_LETTERS = {"B": "the batch size", "C": "the number of channels", "T": "the sequence length",
            "S": "a spatial size", "U": "the size of a dimension"}


def _size_names(ctx: Context) -> dict[int, str]:
    """The sizes of the inputs a wrong constant factor is likely made of: the batch size, the
    channels, each dimension, the elements averaged over per channel, all elements."""
    names: dict[int, str] = {}
    for layout in ctx.layouts:
        per_channel = layout.numel // max(1, math.prod(s for s, f in zip(layout.size, layout.format) if f == "C"))
        for size, letter in zip(layout.size, layout.format):
            names.setdefault(size, _LETTERS.get(letter, "the size of a dimension"))
        names.setdefault(per_channel, "the number of elements per channel (batch × positions)")
        names.setdefault(layout.numel, "the number of input elements")
    return names


# Note [second draw]
#     A hand-written backward may branch on how its inputs compare (which of two bounds is the
#     lower, per channel): with few elements, one draw of inputs can take the same branch
#     everywhere and leave the other one unchecked — three channels all ordered one way happens
#     one time in four. Where the inputs and parameters are small (SECOND_DRAW_LIMIT elements in
#     all, where differencing costs next to nothing), the float64 reference is judged a second
#     time on the first draw mirrored: inputs drawn symmetrically about zero are negated, which
#     turns every comparison with zero and every order between two inputs the other way; the
#     others (integers, masks, a domain) are drawn anew. Large inputs take every branch in one.
SECOND_DRAW_LIMIT = 4096


def second_draw_reference(ctx: Context, *, beside: bool = False) -> Reference | None:
    """The float64 reference on a second draw of the inputs, for small layers (Note [second
    draw]); None for large ones. ``beside``: with the parameters moved (Note [beside the kinks])."""

    def build() -> Reference | None:
        drawn = _second_draw(ctx, beside)
        return None if drawn is None else _judged_on(ctx, *drawn)

    return ctx.shared(f"layercheck.gradients.float64.second_draw{'.beside' * beside}", build, readers=_READERS)


def second_draw_after_writes(ctx: Context, *, beside: bool = False) -> tuple[list[str], Reference | None] | None:
    """The parameters one training call on the second draw of the inputs writes into, and the
    float64 reference on that draw from the state the call leaves (Note [parameter writes]);
    None where the call writes into none."""

    def build() -> tuple[list[str], Reference | None] | None:
        drawn = _second_draw(ctx, beside)
        if drawn is None:
            return None
        subject, inputs = drawn
        written = _writes_of(subject, inputs)
        return (written, _judged_on(ctx, subject, inputs)) if written else None

    return ctx.shared(f"layercheck.gradients.float64.second_draw_written{'.beside' * beside}", build,
                      readers=_READERS)


def _second_draw(ctx: Context, beside: bool) -> tuple[Subject, list[torch.Tensor]] | None:
    """A fresh float64 layer and the second draw of the inputs (Note [second draw]); None for
    large layers."""
    subject = _fresh(ctx, torch.float64, beside)
    if _elements(ctx, subject) > SECOND_DRAW_LIMIT:
        return None
    first = ctx.target.inputs(torch.float64)
    fresh = ctx.target.inputs(torch.float64, seed=ctx.seed * 1_000_003 + 271_828)
    return subject, [-x if _standard_normal(spec) and x.is_floating_point() else other
                     for spec, x, other in zip(ctx.target.specs, first, fresh)]


# Note [tails]
#     Standard-normal inputs at test sizes stay within about ±3.2, so a backward wrong only at
#     large magnitudes (a sigmoid's derivative computed from an output clamped to [0.01, 0.99],
#     wrong beyond 4.6; an exp or a log-sum-exp that loses its shift; a softplus that switches
#     formula) passed every check, as it passes gradcheck. Where the layer is small
#     (SECOND_DRAW_LIMIT elements, as for the second draw) and some input is drawn standard
#     normal (the default; a declared range or distribution, integers and masks are the layer's
#     domain and stay as drawn), the float64 reference is judged once more on the first draw with
#     those inputs scaled by TAILS_SCALE: a quarter of their elements then lie beyond 4.6 and the
#     largest near 13. Where finite differences cannot judge that draw (an output jumps, noise),
#     the first draw's verdict stands, as for the second draw, and so it does where the values the
#     layer detaches on purpose are the whole disagreement there (Note [approximate detaches]: a
#     detached maximum beside an eps moves the derivative more at large magnitudes, by design);
#     where the layer's outputs are not finite there, a note says at what magnitude (an overflow
#     a user's activations may reach).
TAILS_SCALE = 4.0


def tails_reference(ctx: Context, *, beside: bool = False) -> Reference | None:
    """The float64 reference on the first draw with its standard-normal inputs scaled by
    TAILS_SCALE, for small layers (Note [tails]); None where there is no such draw or it
    cannot be judged."""

    def build() -> Reference | None:
        subject = _fresh(ctx, torch.float64, beside)
        if _elements(ctx, subject) > SECOND_DRAW_LIMIT:
            return None
        first = ctx.target.inputs(torch.float64)
        scaled = [_standard_normal(spec) and x.is_floating_point() for spec, x in zip(ctx.target.specs, first)]
        if not any(scaled):
            return None
        inputs = [x * TAILS_SCALE if scale else x for x, scale in zip(first, scaled)]
        analytic = _analytic(ctx, subject, inputs)
        run = analytic.check_ran()
        problem = _nonfinite_problem(run, analytic.fn.names, "float64")
        if problem is not None:
            largest_input = max(float(x.abs().max()) for x, scale in zip(inputs, scaled) if scale)
            ctx.note(f"on the inputs scaled by {TAILS_SCALE:g} (magnitudes up to {largest_input:.3g}), {problem}: "
                     "the layer overflows at magnitudes a network's activations may reach")
            return None
        return _judged_from(ctx, analytic)

    return ctx.shared(f"layercheck.gradients.float64.tails{'.beside' * beside}", build, readers=_READERS)


def _standard_normal(spec: Any) -> bool:
    """Whether an input is drawn standard normal (the default): symmetric about zero, unbounded."""
    return bool(spec.values.distribution == "normal" and spec.values.mean == 0)


def _elements(ctx: Context, subject: Subject) -> int:
    """The elements of the layer's inputs and parameters: what a further draw costs to difference."""
    return sum(layout.numel for layout in ctx.layouts) + sum(p.numel() for _, p in subject.parameters())


def _judged_on(ctx: Context, subject: Subject, inputs: list[torch.Tensor]) -> Reference | None:
    return _judged_from(ctx, _analytic(ctx, subject, inputs))


def _judged_from(ctx: Context, analytic: Analytic) -> Reference | None:
    """The reference of a further draw's run, or None where it has nothing to add to the first
    draw's verdict: no floating output, outputs that are not finite, or differences that cannot
    judge it (an output jumps there)."""
    run = analytic.check_ran()
    if not run.outputs or any(not all_finite(y) for y in run.outputs):
        return None
    try:
        return _judged(ctx, analytic.fn, run)
    except CheckSkipped:
        return None


def _writes_of(subject: Subject, inputs: Sequence[torch.Tensor]) -> list[str]:
    """The parameters one training call of ``subject`` on ``inputs`` writes into."""
    before = {name: p.detach().clone() for name, p in subject.parameters()}
    subject.forward([x.clone() for x in inputs])
    return [f"parameter {name!r}" for name, p in subject.parameters()
            if name in before and not torch.equal(before[name], p.detach())]


# Note [second call]
#     Every evaluation of the gradient check starts from the fresh layer's state, so a path the
#     layer takes only once its state is set — a cache filled by the first call, a recurrent
#     state, a counter past its warm-up — is never differenced, while training runs it from the
#     second step on. When one training call leaves the layer changed in a way its next call
#     shows (other outputs, or another autograd graph: other operations, another hand-written
#     Function), the float64 reference is built and judged a second time from the state the first
#     call leaves. Running statistics that the next training call ignores (BatchNorm) change
#     neither, and cost nothing more.


def eval_reference(ctx: Context, *, beside: bool = False) -> Reference:
    """The float64 reference of the forward in eval mode (with grad): training-only behaviour —
    batch statistics, dropout, a power iteration under no_grad — switched off."""

    def build() -> Reference:
        subject = _fresh(ctx, torch.float64, beside)
        fn = LayerFunction(subject, subject.inputs(), mode=Mode.EVAL)
        return _judged(ctx, fn, fn.gradient(lambda outputs: cotangents(ctx, outputs)))

    return ctx.shared(f"layercheck.gradients.float64.eval{'.beside' * beside}", build, readers=_READERS)


def held_constant(ctx: Context, ref: Reference) -> str | None:
    """When the training-mode gradient disagrees only because the layer holds part of its
    training forward constant on purpose (Note [stop-gradients] in numerics/trace.py): a note
    saying so; None when that is not the explanation (the backward is wrong)."""
    if ref.verdict.passed or not ref.trace.stop_gradients:
        return None
    try:
        agrees = eval_reference(ctx, beside=ref.beside).verdict.passed
    except (LayerRaised, CheckFailed, CheckSkipped):
        return None
    if not agrees:
        return None
    used = ", ".join(ref.trace.stop_gradients[:3])
    return (f"in training mode the layer computes part of its forward under torch.no_grad and uses it ({used}), "
            "which autograd treats as a constant by the layer's design (a power iteration, an adaptive step, a "
            "moving average) while finite differences see it move: the training-mode gradients differ from finite "
            f"differences ({ref.verdict.summary()}); in eval mode they agree, so the backward is right")


def second_call_reference(ctx: Context, *, beside: bool = False) -> Reference | None:
    """The float64 reference from the state the layer's first training call leaves, when that
    call changes the layer in a way its next call shows (Note [second call]); None otherwise."""

    def build() -> Reference | None:
        # whether it does is the layer's logic, not its size: asked of the sample of the batch
        # where there is one (a full-size float64 forward less for every layer that does not)
        subject = _fresh(ctx, torch.float64, beside, sample=True)
        first = _graph_and_outputs(subject)
        after_first = subject.checkpoint()
        if not subject.changes(_fresh(ctx, torch.float64, beside, sample=True).checkpoint()):
            return None  # the first call leaves nothing behind
        second = _graph_and_outputs(subject)
        if first == second:
            return None  # what it leaves behind (running statistics) does not change the next call
        if subject.target is not ctx.target:  # decided on the sample: the reference is the whole batch's
            subject = _fresh(ctx, torch.float64, beside)
            subject.forward(subject.inputs(requires_grad=True))  # its first call, as _graph_and_outputs makes it
            after_first = subject.checkpoint()
        subject.rewind(after_first)
        analytic = _analytic(ctx, subject)
        return _judged(ctx, analytic.fn, analytic.check_ran())

    return ctx.shared(f"layercheck.gradients.float64.second{'.beside' * beside}", build, readers=_READERS)


# Note [padding rows]
#     nn.Embedding(padding_idx=i) (and nn.EmbeddingBag) reads row i like any other, yet PyTorch
#     gives it no gradient, by design: the padding entry stays as it was, zeros by default.
#     Finite differences of that row move the output wherever index i is looked up, and the
#     weight's gradient was called wrong (analytic 0 against the numeric change of row i) in
#     one of NLP's commonest layers. With scale_grad_by_freq=True PyTorch divides each row's
#     gradient by how often the batch looks it up, by design too. So the gradient check holds
#     those rows of every such submodule's weight at the point — the padding rows, and the rows
#     looked up more than once at the point where the gradient is scaled — its directions leave
#     them alone, and a note says so. The other rows are judged as before.


def _held_rows(fn: LayerFunction) -> dict[int, torch.Tensor]:
    """Per parameter slot, the rows of an nn.Embedding or nn.EmbeddingBag weight whose gradient
    PyTorch leaves out or scales by design (Note [padding rows]), as a mask of its elements."""
    module = fn.subject.module
    if module is None:
        return {}
    slots = {name: len(fn.input_slots) + k for k, (name, _) in enumerate(fn.parameters)}
    weights = {sub: f"{owner}.weight" if owner else "weight" for owner, sub in module.named_modules()
               if isinstance(sub, (nn.Embedding, nn.EmbeddingBag))}
    tables = [(sub, slots[name]) for sub, name in weights.items() if name in slots]
    held: dict[int, torch.Tensor] = {}
    looked_up: dict[int, list[torch.Tensor]] = {}

    def watch(slot: int) -> Callable[..., None]:
        def hook(_: nn.Module, args: tuple[Any, ...]) -> None:
            looked_up.setdefault(slot, []).append(args[0].detach().reshape(-1).cpu())
        return hook

    hooks = [sub.register_forward_pre_hook(watch(slot)) for sub, slot in tables if sub.scale_grad_by_freq]
    if hooks:
        try:
            fn.call()
        finally:
            fn.reset()
            for hook in hooks:
                hook.remove()
    for sub, slot in tables:
        mask = torch.zeros(fn.point[slot].shape, dtype=torch.bool)
        if sub.padding_idx is not None:
            mask[sub.padding_idx] = True
        if slot in looked_up:
            counts = torch.bincount(torch.cat(looked_up[slot]), minlength=mask.shape[0])
            mask[counts > 1] = True
        if mask.any():
            held[slot] = mask
    return held


# Note [parameter writes]
#     A layer may write into its own parameters in its training forward: nn.Embedding with
#     max_norm renormalises the rows it looks up in place, a face-recognition loss (P2SGrad)
#     projects its class weights onto the unit sphere. Autograd's gradient is then the gradient
#     at the written values, by design; finite differences from a layer whose values the write
#     still moves have every step written over as well (a row moved off the sphere is put back
#     on it), so they see the gradient of what the write keeps. A write that stops after the
#     first call is taken for a data-dependent initialisation and made before any check (Note
#     [data-dependent initialisation] in building.py), so the first draw of the inputs is judged
#     past it; but a second draw (Note [second draw]) reads other rows of an embedding, which
#     its first call renormalises: nn.Embedding(10, 4, max_norm=1.0) failed gradients[float64]
#     there ("wrong gradient of parameter 'weight'", relative error 0.3-1.6). Where the second
#     draw disagrees and one training call on it writes into a parameter, that draw is judged
#     again from the state the call leaves, as training's second step sees it (a renormalised
#     row then lies inside the bound by its margin, which a step of the differences does not
#     cross); where it agrees there, the check passes with a note. A write that moves the values
#     in every call (P2SGrad's projection) disagrees however it is taken, and the failure names
#     the parameters written and why that may be by design.


def parameters_written(ctx: Context, *, beside: bool = False) -> list[str]:
    """The parameters one training call of a fresh layer (past a data-dependent initialisation)
    writes into: those the layer writes in every call (Note [parameter writes]), asked of the
    sample of the batch: the layer's logic, not its size."""

    def build() -> list[str]:
        subject = _fresh(ctx, torch.float64, beside, sample=True)
        return _writes_of(subject, subject.inputs())

    return ctx.shared(f"layercheck.gradients.float64.written{'.beside' * beside}", build, readers=_READERS)


def _writes(written: Sequence[str], when: str = "") -> str:
    """What the training forward writes into (Note [parameter writes])."""
    return (f"the training forward writes into {', '.join(written)} (in place{', ' + when if when else ''}, as "
            "nn.Embedding's max_norm renormalises the rows it reads)")


def _graph_and_outputs(subject: Subject) -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """One training call of the layer: the kinds of its autograd nodes and its outputs' bytes."""
    outputs = Outputs.of(subject.forward(subject.inputs(requires_grad=True))).floating
    kinds = tuple(type(node).__name__ for node in backward_nodes(outputs))
    return kinds, tuple(y.detach().cpu().numpy().tobytes() for y in outputs)


def _skip_unless_finite(ctx: Context, run: Backprop, dtype: str) -> None:
    """No finite difference can be taken of a layer whose outputs or gradients are not
    finite: skipped pointing at the finite check, or failed when that check does not run
    (a skip must never point at a check that did not run)."""
    problem = next((f"{dtype} output {i} is not finite on the generated inputs" for i, y in enumerate(run.outputs)
                    if not y.is_meta and not all_finite(y)), None)  # meta: found finite before, values let go
    if problem is None:
        problem = next((f"a {dtype} gradient is not finite on the generated inputs" for g in run.grads
                        if g is not None and not all_finite(g)), None)
    if problem is None:
        return
    _not_finite(ctx, problem, skipped=", so no finite difference can be taken",
                failed="; no gradient can be judged until it is", reporters=("finite", "gradients:float64"))


def _not_finite(ctx: Context, problem: str, *, skipped: str, failed: str = "",
                reporters: Sequence[str] = ("finite",), **details: Any) -> NoReturn:
    """What non-finite values keep this check from judging: a skip pointing at the first of
    ``reporters`` that runs (not this check itself), or a failure when none does (a skip must
    never point at a check that did not run)."""
    for reporter in reporters:
        if reporter != f"{ctx.info.id}:{ctx.variant}" and ctx.planned(reporter):
            raise CheckSkipped(f"{problem}{skipped} ({reporter} reports it)", applies=True)
    raise CheckFailed(f"{problem} (the finite check, which did not run, names where){failed}", **details)


@contextlib.contextmanager
def skip_if_not_differentiable() -> Iterator[None]:
    """The engine's NotDifferentiable and TooNoisy as a skip with their message: finite
    differences do not apply to a layer whose outputs change in number or size under a
    difference step, nor judge one whose rounding noise swamps the derivative."""
    try:
        yield
    except (NotDifferentiable, TooNoisy) as exc:
        raise CheckSkipped(str(exc), applies=True) from exc


# -- the checks --------------------------------------------------------------------------------


@check(
    "backward_runs",
    title="back-propagation runs and reaches every input and learnable parameter",
    matlab="backwardDoesNotError, backwardPropagationDoesNotError",
    requires=("forward_runs",),
)
def backward_runs(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Runs the training forward on inputs that require grad and back-propagates seeded
    random output gradients through every floating output.

    The backward must not raise, and every floating input and every learnable parameter
    must receive a gradient. One that gets none is not trained (a parameter) or cuts the
    network behind the layer off (an input). Usual causes: a parameter that forward never
    uses, a tensor used through ``.data`` or ``.detach()``, a hand-written backward that
    returns None for an input that needs a gradient, or one that returns a gradient of a
    size autograd cannot sum back to its input's (the message names it).
    """
    run = float32_run(ctx)
    if run.error is not None and run.recorder.wrong():
        error = run.error
        raise CheckFailed(f"backward raised {type(error.exc).__name__}: {str(error.exc).splitlines()[0]}; the cause: "
                          f"{run.recorder.wrong()[0].describe()}", blocking=True, phase="backward",
                          traceback=error.trace,
                          returned=[_raw_dict(r) for r in run.recorder.wrong()])
    result = run.check_ran()
    names = run.fn.names
    if not names:
        raise CheckSkipped("the layer has no floating input and no learnable parameter: nothing takes a gradient")
    if not result.outputs:
        raise CheckSkipped("the layer returns no floating output: there is nothing to back-propagate")
    if not any(result.differentiable):
        shape_only = _read_for_shape_only(ctx, names)
        if len(shape_only) == len(names):  # every one an input, no learnable parameter
            raise CheckSkipped(f"the outputs do not change with the values of {', '.join(shape_only)} (read for "
                               "its size, dtype or device only) and the layer has no learnable parameter: nothing "
                               "takes a gradient")
        raise CheckFailed(
            f"none of the {len(result.outputs)} floating output(s) carries a gradient: each is detached or "
            "computed from non-differentiable operations, so nothing reaches the inputs and parameters",
            blocking=True, outputs=len(result.outputs))
    missing = [name for name, g in zip(names, result.grads) if g is None]
    elsewhere = _reached_on_other_inputs(ctx, missing) if missing else []
    never = [name for name in missing if name not in elsewhere]
    shape_only = _read_for_shape_only(ctx, never) if never else []
    never = [name for name in never if name not in shape_only]
    if never:
        what = "; ".join(_why_none(name) for name in never)
        raise CheckFailed(f"{len(never)} of {len(names)} tensor(s) receive no gradient: {what}",
                          missing=never, reached=[n for n in names if n not in never])
    reached = [name for name in names if name not in shape_only]
    message = f"gradients reach {_count_names(reached)}"
    if shape_only:
        message += (f"; {', '.join(shape_only)} take(s) none and need(s) none: the outputs do not change with "
                    "its values (read for its size, dtype or device only)")
        ctx.note(f"{', '.join(shape_only)} receive no gradient, and other values of them give the same outputs: "
                 "the layer reads them for their size, dtype or device only (declare such an input grad=no)")
    if elsewhere:
        message += (f"; {', '.join(elsewhere)} get theirs on other draws of the inputs only: on the generated ones "
                    "the layer takes a branch without them (a router that sends no token to an expert)")
        ctx.note(f"{', '.join(elsewhere)} receive no gradient on the generated inputs, only on other draws of "
                 "them: the layer uses them for some inputs only")
    return message, {"tensors": names, "hand_written_backward": run.recorder.functions, "other_inputs_only": elsewhere,
                     "shape_only": shape_only}


@check(
    "backward_size",
    title="every gradient has the size and dtype of its input or parameter",
    matlab="backwardIsConsistentInSize",
    requires=("forward_runs", "backward_runs"),
)
def backward_size(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Compares the size and dtype of every gradient with its input or parameter, including
    what a hand-written ``backward`` returned before autograd summed it over broadcast
    dimensions or cast it (autograd does both silently), judged as autograd judges them.

    A gradient in another dtype costs a cast and hides precision loss: it fails. A gradient of
    a size autograd sums back to the input's (the input broadcasts to it) is right, as it is in
    PyTorch, and passes with a note on the memory it wastes; one autograd cannot sum back makes
    the backward raise (backward_runs reports it). Fix: reduce to the input's shape
    (``grad.sum_to_size(x.shape)``) and return the input's dtype.
    """
    kept = float32_gradients(ctx)
    for record in kept.recorder.broadcast():
        ctx.note(record.waste())
    wrong = kept.recorder.wrong()
    if not wrong:  # a backward that computes in float32 whatever it is given shows only in float64
        try:
            wrong = float64_run(ctx).recorder.wrong()
        except LayerRaised:
            pass  # the float64 forward raises: the dtype check reports that
    if wrong:  # back-propagation ran (backward_runs passed): autograd summed or cast them silently
        raise CheckFailed(
            f"{wrong[0].describe()}" + (f" (and {len(wrong) - 1} more)" if len(wrong) > 1 else "")
            + "; autograd reshaped or cast it silently", returned=[_raw_dict(r) for r in wrong])
    if not any(kept.differentiable):
        raise CheckSkipped("no floating output carries a gradient: nothing was back-propagated")
    for name, value, g in zip(kept.names, kept.tensors, kept.grads):
        if g is not None and (g.shape != value.shape or g.dtype != value.dtype):
            raise CheckFailed(
                f"the gradient of {name} is {tuple(g.shape)} {dtype_name(g.dtype)}, the tensor is "
                f"{tuple(value.shape)} {dtype_name(value.dtype)}", tensor=name)
    recorder = kept.recorder
    message = f"the gradients of {_count_names(kept.names)} have their tensors' sizes and dtypes"
    if recorder.functions:
        message += (f"; hand-written backward of {', '.join(recorder.functions)} returned "
                    f"{len(recorder.records)} gradient(s) of the right size and dtype before autograd's checks")
    return message, {"hand_written_backward": recorder.functions, "raw_gradients": len(recorder.records)}


@check(
    "gradients",
    title="analytic gradients of inputs and parameters agree with float64 finite differences",
    matlab="gradientsAreNumericallyCorrect",
    requires=("forward_runs", "backward_runs", "backward_size"),
    uses=(FORWARD,),  # forward_is_random reads the shared forward run
    variants=("float64", "float32"),
    optional_variants=("float16", "bfloat16"),
    tolerances=_GRADIENT_TOLERANCES,
)
def gradients(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Compares the analytic gradients of every floating input and every learnable
    parameter with central finite differences of a float64 copy of the layer, taken along
    random directions over all of them at once (two forward passes per direction, whatever
    the input size; see ``layercheck/numerics/engine.py``). The float64 variant compares the
    float64 backward directly; the others compare their backward with the float64 one
    tensor by tensor. Every evaluation restarts from the same state and random stream, so
    dropout, running statistics and recurrent state are a fixed function; kinks (ReLU,
    abs, clamp, max-pooling) crossed by a step are recognised and not reported. A small
    layer (up to 4096 input and parameter elements) is judged on two more draws: its
    standard-normal inputs mirrored (the other side of every comparison) and scaled by 4
    (magnitudes up to about 13, where saturation and overflow live).

    It never skips over something the layer did: a float64 run that is not finite where the
    float32 run is fails, naming the tensor, and the float32 gradients are then judged
    against float32 finite differences. It is skipped, saying why, only where it does not
    apply (nothing takes a gradient) or cannot judge (rounding noise swamps the derivative,
    the point sits on kinks); ``--strict`` fails the latter.

    A wrong gradient trains the network wrongly without any error. On failure the message
    names the tensor whose gradient is wrong first, with the shape of the error where it has
    one (a constant factor, named after the batch size or another input size it equals; a
    flipped sign; a transpose; another tensor's gradient), then gives the analytic and
    numeric directional derivatives and the relative error against the tolerance, and where
    it could be found the value range, slab or elements where they disagree. Usual causes in a hand-written
    backward: a wrong derivative on one branch, gradients returned in the wrong order, a
    parameter gradient averaged instead of summed over the batch, a missing factor or sign.
    """
    dtype = DTYPES[ctx.variant]
    ref = gradient_reference(ctx)
    if ref.beside:
        ctx.note("the point sits on kinks (a zero-initialised scale keeps ReLUs' inputs at exactly 0, or the like), "
                 "where finite differences cannot judge: the gradients were compared at a point beside it, the "
                 f"layer's floating parameters moved by {KINK_NUDGE:g} of their size (seeded; a backward's formulas "
                 "do not depend on the point)")
    if not ref.fd.fn.names:
        raise CheckSkipped("the layer has no floating input and no learnable parameter: nothing takes a gradient")
    if len(ref.fd.excluded) == len(ref.fd.fn.names):
        raise CheckSkipped(f"{_count_names(ref.fd.fn.names)} receive(s) no gradient at all (backward_runs says why): "
                           "there is no gradient to compare", applies=True)
    if ref.float64_defect is not None and dtype is torch.float64:  # Note [no silent pass]
        judged = (" (gradients[float32] judges the float32 gradients against float32 finite differences)"
                  if ctx.planned("gradients:float32") else "")
        raise CheckFailed(f"{ref.float64_defect} where the float32 run's are finite: the layer breaks in float64 "
                          f"(a kernel or a backward that mishandles float64?), so no float64 gradient can be "
                          f"judged{judged}", float64_defect=ref.float64_defect)
    if (ref.float64_failure is not None and ref.float64_defect is None and dtype is not torch.float64
            and ctx.planned("gradients:float64")):
        raise CheckSkipped(f"the layer cannot run in float64 ({ref.float64_failure}): gradients[float64] judged its "
                           "float32 gradients against float32 finite differences, and there is no float64 gradient "
                           f"to compare {ctx.variant} with")
    if dtype is torch.float64 or ref.float64_failure is not None:
        return _judge_float64(ctx, ref)
    return _judge_lower(ctx, ref, dtype)


@check(
    "needs_input_grad",
    title="gradients stay right when only some inputs or parameters require grad",
    requires=("forward_runs", "backward_runs", "backward_size"),
    uses=(FORWARD,),  # the rounding floor of the float32 gradients
    tolerances=(Tolerance("float32", FROZEN_TOLERANCE, "relative difference (norm) of a gradient from its value "
                          "when every tensor requires grad"),),
    any_batch=True,
)
def needs_input_grad(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Freezes each parameter in turn and takes each input out of the gradient computation
    in turn (for an ``autograd.Function`` also one operation input at a time, like MATLAB's
    ``computeGradients``), and requires the
    remaining gradients to equal those computed with every tensor requiring grad.

    Fine-tuning freezes parameters and a first layer's input never requires grad; a
    hand-written backward that reads ``ctx.needs_input_grad`` wrongly then crashes, returns
    its gradients packed to the front (each in the wrong slot), or computes one from a
    branch it skipped. Fix: return exactly one entry per forward input, None where
    ``ctx.needs_input_grad[i]`` is False, each in its own position.
    """
    reference = float32_run(ctx)
    full = reference.check_ran()
    names = reference.fn.names
    if len(names) < 2:
        raise CheckSkipped(f"only {_count_names(names)} takes gradients: there is nothing to freeze")
    tolerance = ctx.tolerance(torch.float32)
    masks = _masks(ctx, reference.fn)
    worst = 0.0
    for description, requires in masks:
        subject = ctx.fresh(torch.float32)
        fn = LayerFunction(subject, subject.inputs())
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                result = fn.gradient(full.cotangents, requires=requires)
        except LayerRaised as exc:
            raise layer_failure(exc, description, mask=description) from exc
        dropped = any(_REENTRANT_DROP in str(w.message) for w in caught)
        for slot, name in enumerate(names):
            expected = full.grads[slot]
            if not requires[slot] or expected is None:
                continue
            got = result.grads[slot]
            if got is None and dropped:
                ctx.note(f"{description} (as for a first layer), {name} receives no gradient: the layer uses reentrant "
                         "checkpointing (torch.utils.checkpoint with use_reentrant=True), which drops the gradients "
                         "of everything inside it when none of its inputs requires grad (PyTorch warns 'None of the "
                         "inputs have requires_grad=True'); use checkpoint(..., use_reentrant=False) if this layer "
                         "may come first in a network")
                continue
            if got is None:
                raise CheckFailed(f"{description}, {name} receives no gradient (it does when every tensor "
                                  "requires grad): the backward put it in another slot or skipped it",
                                  mask=description, tensor=name)
            pair = shared_nonfinite_zeroed(got, expected)
            if pair is None:  # NaN or infinity where the other has none: which one is right is finite's question
                _not_finite(ctx, f"the gradient of {name} is not finite on the generated inputs, and {description} "
                            "its non-finite entries move", skipped=": nothing to compare", mask=description,
                            tensor=name)
            got, expected = pair  # NaN where every tensor requires grad stays NaN: finite reports it, not this check
            gap = _Gap.of(got, expected)
            difference = gap.relative
            worst = max(worst, difference)
            floor, source = (gradient_norm_floor(ctx, name, needed=gap.unexplained(tolerance))
                             if difference > tolerance else (0.0, ""))
            if gap.excess(tolerance, floor) > 1:
                found = mismatch(expected, got, Allowance(0.0, tolerance * largest(expected))) or {}
                where = (f"; worst at index {tuple(found['index'])}: {found['actual']:.6g} vs {found['expected']:.6g}"
                         if found else "")
                raise CheckFailed(
                    f"{description}, the gradient of {name} differs from its gradient when every tensor requires "
                    f"grad: relative difference {difference:.3g} > tolerance {tolerance:g}"
                    f"{_floor_text(floor, source)}{where}",
                    mask=description, tensor=name, relative_difference=difference, tolerance=tolerance, **found)
    return (f"{len(masks)} pattern(s) of frozen tensors leave the other gradients unchanged "
            f"(largest relative difference {worst:.2g}, tolerance {tolerance:g})",
            {"patterns": [d for d, _ in masks], "largest_relative_difference": worst})


# -- judging -----------------------------------------------------------------------------------


def _judge_float64(ctx: Context, ref: Reference) -> tuple[str, dict[str, Any]]:
    verdict = ref.verdict
    names = ref.fd.fn.names
    details = {**verdict.to_dict(), "tensors": names, "evaluations": ref.fd.evaluations}
    if ref.beside:
        details["beside"] = KINK_NUDGE
    if ref.float64_failure is not None:
        return _judge_float32_reference(ctx, ref, details)
    constant = held_constant(ctx, ref)
    if constant is not None:
        ctx.note(constant)
        in_eval = _agreement(eval_reference(ctx, beside=ref.beside).verdict)
        return (f"{_count_names(names)}: in eval mode, {in_eval}; in training mode the layer holds a no_grad "
                "computation constant by design (see the note)", details)
    drawn = second_draw_reference(ctx, beside=ref.beside) if verdict.passed else None
    if drawn is not None and not drawn.verdict.passed:
        written, again = second_draw_after_writes(ctx, beside=ref.beside) or ([], None)
        if again is None or not again.verdict.passed:
            details = {**details, "second_draw": drawn.verdict.to_dict()}
            writes = f", {_writes(written)}" if written else ""
            raise _disagreement(drawn, "on a second draw of the inputs (the first draw's agree: a branch the first "
                                f"draw did not take?){writes}, float64 analytic gradients", details)
        details = {**details, "second_draw": again.verdict.to_dict(), "written": written}
        ctx.note(f"{_writes(written)}: on a second draw of the inputs every step of the finite differences from "
                 "the fresh layer was written over too, which the analytic gradient by design does not see; from "
                 "the state one call on that draw leaves, as training's second step sees it, they agree")
    tails = tails_reference(ctx, beside=ref.beside) if verdict.passed else None
    if tails is not None and not tails.verdict.passed and tails.detach_hint is None:
        details = {**details, "tails": tails.verdict.to_dict()}
        raise _disagreement(tails, f"on the inputs scaled by {TAILS_SCALE:g}, whose magnitudes reach where the "
                            "first draw's do not (the first draw's agree: a formula wrong only at large "
                            "magnitudes, a clamp, an overflow?), float64 analytic gradients", details)
    if tails is not None:
        details["tails"] = tails.verdict.to_dict()
    second = second_call_reference(ctx, beside=ref.beside) if verdict.passed else None
    if second is not None and not second.verdict.passed:
        details = {**details, "second_call": second.verdict.to_dict()}
        raise _disagreement(second, "from the state the layer's first training call leaves (its second call, as in "
                            "the second step of training), float64 analytic gradients", details)
    if second is not None:
        details["second_call"] = second.verdict.to_dict()
    if ref.fd.excluded:
        left_out = [names[slot] for slot in sorted(ref.fd.excluded)]
        details["left_out"] = left_out
    if verdict.passed:
        for note in _dead_tensors(ctx, ref):
            ctx.note(note)
        if ref.fd.held:
            held = ", ".join(ref.fd.fn.names[slot] for slot in ref.fd.held)
            ctx.note(f"rows of {held} were held at the point: PyTorch gives an embedding's padding row no "
                     "gradient (padding_idx), and with scale_grad_by_freq divides a row's gradient by how often "
                     "the batch looks it up, by design")
        complex_low = _complex64_parameters(ctx)
        if complex_low:
            ctx.note(f"{', '.join(complex_low)} stay(s) complex64 under layer.double() (it casts floating tensors "
                     "only): the float64 reference made it complex128, differenced as its real and imaginary parts")
        if verdict.precision != torch.float64:
            low = dtype_name(verdict.precision)
            spectrum = " or a complex64 spectrum (torch.cfloat)" if verdict.precision == torch.float32 else ""
            ctx.note(f"the layer computes in {low} inside even in float64 (a .float(), a {low} constant{spectrum}): "
                     "its float64 gradients are as precise as that allows, and the gradient check was done at that "
                     "precision")
        if ref.widened is not None:
            details["widened"] = ref.widened
            ctx.note(f"the layer computes in a lower precision inside even in float64 (a .float()): {ref.widened}")
        for kind, why in (("straight_through", ref.straight_through), ("approximate_detach", ref.approximate)):
            if why is not None:
                details[kind] = why
                ctx.note(why)
        judged = [name for slot, name in enumerate(names) if slot not in ref.fd.excluded]
        through = _note_surrogates(ctx, ref, judged, details) if ref.surrogate is not None else ""
        message = (f"{_count_names([n for n in judged if n not in ref.surrogate_only])}: {_agreement(verdict)}"
                   f"{_beside_text(ref)}{through}")
        if ref.fd.excluded:
            message += (f"; {', '.join(details['left_out'])} receive(s) no gradient at all (backward_runs reports it) "
                        "and were left out")
        return message, details
    if ref.surrogate is not None:
        details["surrogate"] = ref.surrogate
        functions = _cut_names(ref.fd.fn)
        raise _disagreement(ref, f"{ref.surrogate}. With the gradient through {functions} taken as zero, float64 "
                            "analytic gradients", details)
    for kind, why in (("straight_through", ref.straight_through), ("widened", ref.widened)):
        if why is not None:
            details[kind] = why
            raise _disagreement(ref, f"{why}: float64 analytic gradients", details)
    surrogates = _surrogates(ref)
    if surrogates:
        return _judge_without_surrogates(ctx, ref, surrogates, details)
    written = parameters_written(ctx, beside=ref.beside)
    if written:  # in every call: a write that stops after the first is a data-dependent initialisation, made already
        details["written"] = written
        raise _disagreement(ref, f"{_writes(written, 'on every call')}: finite differences see the gradient of "
                            "what the write keeps, which is no bug where the write is a projection by design (the "
                            "gradient at the written values is the layer's intent); float64 analytic gradients",
                            details)
    raise _disagreement(ref, f"float64 analytic gradients{_beside_text(ref)}", details,
                        eval_mode=_eval_mode_agrees(ctx, ref.beside))


def _note_surrogates(ctx: Context, ref: Reference, judged: list[str], details: dict[str, Any]) -> str:
    """The note on a reference taken with the surrogate Functions' gradient as zero, and what
    the message says of the tensors whose gradient flows only through them; skipped when no
    other tensor is left (Note [surrogate gradients])."""
    assert ref.surrogate is not None
    details["surrogate"] = ref.surrogate
    details["surrogate_only"] = ref.surrogate_only
    functions = _cut_names(ref.fd.fn)
    if set(judged) <= set(ref.surrogate_only):
        raise CheckSkipped(f"{ref.surrogate[0].lower()}{ref.surrogate[1:]}; every tensor takes its gradient only "
                           f"through {functions}, so nothing else is left to judge", applies=True)
    ctx.note(f"{ref.surrogate}. With the gradient through {functions} taken as zero, the rest of the layer's "
             "gradients agree")
    if not ref.surrogate_only:
        return ""
    return (f"; {', '.join(ref.surrogate_only)} left out: its gradient flows only through the surrogate {functions} "
            "(see the note)")


# Note [surrogate gradients]
#     A hand-written backward may pass a gradient through a forward that is piecewise constant
#     on purpose — a spiking neuron's spike (snntorch, spikingjelly, norse) with an arctan or
#     fast-sigmoid gradient, a binarised network's sign with a hard-tanh gradient, a rounding
#     Function with an identity backward — so that training can move what lies before it at
#     all. Its derivative is zero wherever it exists, and finite differences cannot judge a
#     gradient that is meant not to be it (a straight-through estimator written with .detach()
#     is judged with its detached values held; one written as a Function has nothing to hold).
#     The float64 trace (numerics/trace.py) follows the values computed from the inputs and
#     parameters through steps only (comparisons, roundings, and what follows from those alone)
#     and records each Function that returns such a value requiring grad. When the differences
#     disagree, the analytic gradient is taken again with those Functions' backward passing
#     zeros, the step's own derivative (LayerFunction.cut): that judges everything else — a
#     membrane's leak, a learned threshold, the weights before the spike, a hand-written
#     Function beside it — and its verdict is the check's, either way. A tensor whose gradient
#     flows only through the surrogate is left out (all of them: skipped), and the float32
#     gradients are compared with the float64 ones as the layer computes them, surrogate
#     included. Where the trace cannot see the step (a sign computed in NumPy), such a tensor
#     is recognised by its outputs: they do not move at all along PATTERN_DRAWS random
#     directions at the check's step, yet move along a step of SURROGATE_STEP of the tensor's
#     scale (a tensor the forward does not read moves nothing, and its nonzero gradient stays a
#     failure). Its gradient is left out with a note, and the others are judged without it.
SURROGATE_STEP = 0.25


def _surrogates(ref: Reference) -> list[int]:
    """The slots of the wrong tensors whose gradient is a surrogate by design (Note [surrogate
    gradients])."""
    wrong, _, _ = ref.diagnosis()
    names, grads, fd = ref.fd.fn.names, ref.run.grads, ref.fd
    found = []
    for finding in wrong:
        slot = names.index(finding.name)
        grad = grads[slot]
        if not _nonzero(grad):
            continue
        try:
            near = [fd.compare(Probe(d, ref.verdict.step, slot), grads, ref.verdict.tolerance)
                    for d in range(PATTERN_DRAWS)]
            if any(c.numeric != 0 or any(c.one_sided) for c in near):
                continue
            far = fd.compare(Probe(0, SURROGATE_STEP, slot), grads, ref.verdict.tolerance)
        except (NotDifferentiable, TooNoisy, LayerRaised):
            continue  # a step that changes what the layer returns, or makes it raise: no such evidence
        if far.numeric != 0 or any(far.one_sided):
            found.append(slot)
    return found


def _judge_without_surrogates(ctx: Context, ref: Reference, surrogates: list[int],
                              details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    names = ref.fd.fn.names
    left = [names[slot] for slot in surrogates]
    why = (f"the forward is piecewise constant in {_count_names(left)}: its outputs do not move at all at the "
           "difference step, yet move over a quarter of the tensor's scale, so its derivative is zero wherever it "
           "exists and the nonzero gradient backward gives is a surrogate by design (a straight-through estimator "
           "written as an autograd.Function), which finite differences cannot judge")
    details = {**details, "surrogates": left}
    ref.fd.exclude(set(surrogates))
    judged = [name for slot, name in enumerate(names) if slot not in ref.fd.excluded]
    if not judged:
        raise CheckSkipped(f"{why}; no other tensor takes a gradient", applies=True)
    with skip_if_not_differentiable():
        ref.verdict = judge(ref.fd, ref.run.grads, ref.verdict.tolerance)
    ref.reset_diagnosis()
    if not ref.verdict.passed:
        raise _disagreement(ref, f"{why}. Without it, float64 analytic gradients", details)
    ctx.note(f"{why}: left out")
    return f"{_count_names(judged)}: {_agreement(ref.verdict)}; {', '.join(left)} left out (see the note)", details



def _judge_float32_reference(ctx: Context, ref: Reference, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """Note [float32 reference]: the float32 gradients against float32 finite differences."""
    details = {**details, "float64_failure": ref.float64_failure}
    why = (f"the layer cannot run in float64 ({ref.float64_failure}), so its float32 gradients were judged against "
           "float32 finite differences instead — a weaker check (tolerance "
           f"{ref.verdict.tolerance:g} plus float32 rounding noise)")
    if not ref.verdict.passed:
        raise _disagreement(ref, f"{why}; float32 analytic gradients", details)
    ctx.note(why)
    return f"{_count_names(ref.fd.fn.names)}: {_agreement(ref.verdict).replace('float64 finite', 'float32 finite')}", \
        details


def _eval_mode_agrees(ctx: Context, beside: bool = False) -> bool:
    """Whether the gradients agree in eval mode (for a failure message; False when unknown)."""
    try:
        return eval_reference(ctx, beside=beside).verdict.passed
    except (LayerRaised, CheckFailed, CheckSkipped):
        return False


# A tensor whose float64 gradient moves the layer's output by less than this share of what
# all tensors together move it (along the scaled random directions of the gradient check) is
# zero to rounding: float64 rounding leaves about 1e-16 of the whole, a tensor with a real
# but weak influence leaves 1e-6 or more.
DEAD_SHARE = 1e-11


def _dead_tensors(ctx: Context, ref: Reference) -> list[str]:
    """Notes for inputs and parameters that have no effect on the output: their float64
    gradient, which agrees with finite differences, is zero to rounding on every element."""
    grads = ref.run.grads
    total = ref.fd.spread(Probe(0, BASE_STEP), grads)
    notes = []
    for slot, (name, g) in enumerate(zip(ref.fd.fn.names, grads)):
        if g is None or total == 0 or ref.fd.spread(Probe(0, BASE_STEP, slot), grads) > DEAD_SHARE * total:
            continue
        if name in ref.surrogate_only:  # zero with its surrogate gradient taken as zero, by construction
            continue
        notes.append(f"{name} has no effect on the output (its gradient is zero to rounding: at most "
                     f"{largest(g):.1g} in float64) — {_dead_hint(ctx, name)}")
    return notes


def _dead_hint(ctx: Context, name: str) -> str:
    module = ctx.target.pristine()
    normalisations = (nn.modules.batchnorm._NormBase, nn.GroupNorm, nn.LayerNorm)
    if (name.startswith("parameter") and name.strip("'").endswith("bias") and module is not None
            and any(isinstance(sub, normalisations) for sub in module.modules())):
        return ("a bias directly before a normalisation is redundant: the normalisation subtracts the mean, and the "
                "bias with it; construct the layer that owns it with bias=False")
    if name.startswith("parameter"):
        return "it is trained for nothing: check that forward uses it as intended"
    return "check that forward uses it as intended"


def _judge_lower(ctx: Context, ref: Reference, dtype: torch.dtype) -> tuple[str, dict[str, Any]]:
    """A lower precision's backward against the float64 one, tensor by tensor (norm of the
    difference over the norm of the float64 gradient); the float64 one is vouched for by the
    finite differences, so agreeing with it is agreeing with them."""
    name = dtype_name(dtype)
    low, high = _lower_run(ctx, ref, dtype)
    tolerance = ctx.tolerance(dtype)
    names = ref.fd.fn.names
    gaps = [_Gap.of(g, e) for g, e in zip(low, high)]
    differences = [gap.relative for gap in gaps]
    floors, sources = _floors(ctx, names, gaps, tolerance, dtype, beside=ref.beside)
    excess = [gap.excess(tolerance, floor) for gap, floor in zip(gaps, floors)]
    worst = max(range(len(names)), key=lambda i: excess[i])
    details: dict[str, Any] = {"tolerance": tolerance, "relative_differences": dict(zip(names, differences)),
                               "float64": ref.verdict.to_dict()}
    if any(floors):
        details["rounding_floors"] = dict(zip(names, floors))
    agree = excess[worst] <= 1
    accepted = ref.verdict.passed or held_constant(ctx, ref) is not None
    if agree and accepted:
        vouched = (_agreement(ref.verdict) if ref.verdict.passed else
                   "agree with finite differences in eval mode (in training mode the layer holds a no_grad "
                   "computation constant by design: see gradients[float64])")
        floored = [names[i] for i, d in enumerate(differences) if d > tolerance]
        one = len(floored) == 1
        within = (f"; {', '.join(floored[:3])}{' and more' if len(floored) > 3 else ''} beyond the tolerance but "
                  f"within the rounding floor measured for {'it' if one else 'them'}: {name}'s own rounding moves "
                  f"{'its gradient' if one else 'their gradients'} as much (a gradient zero by cancellation, or one "
                  "the layer amplifies rounding into)" if floored else "")
        return (f"{name} gradients of {_count_names(names)} match the float64 gradients (largest relative "
                f"difference {differences[worst]:.2g} in {names[worst]}, tolerance {tolerance:g}{within}), which "
                f"{vouched}", details)
    if agree:
        if ctx.planned("gradients:float64"):
            raise CheckSkipped(f"the {name} gradients match the float64 ones (largest relative difference "
                               f"{differences[worst]:.2g}, tolerance {tolerance:g}), which gradients[float64] "
                               "reports wrong: one cause, reported there", applies=True)
        raise _disagreement(ref, f"{name} gradients match the float64 ones, which", details, brief=True)
    if forward_is_random(ctx):
        raise CheckSkipped(
            f"the training forward draws random numbers (dropout-like), and the {name} and float64 layers draw "
            f"different ones, so the {name} gradient has no float64 counterpart; gradients[float64] checks the "
            "backward with a fixed random stream")
    if accepted:
        g, e = low[worst], high[worst]
        assert g is not None and e is not None
        found = mismatch(e, g, Allowance(0.0, tolerance * largest(e))) or {}
        where = (f"; worst at index {tuple(found['index'])}: {name} {found['actual']:.6g} vs float64 "
                 f"{found['expected']:.6g}" if found else "")
        raise CheckFailed(
            f"the {name} gradient of {names[worst]} differs from the float64 gradient (which agrees with "
            f"finite differences): relative difference {differences[worst]:.3g} > tolerance {tolerance:g}"
            f"{_floor_text(floors[worst], sources[worst])}{where}",
            tensor=names[worst], **details, **found)
    # Both differ from each other and the float64 one is wrong: judge this one on its own.
    with skip_if_not_differentiable():
        own = judge(ref.fd, low, tolerance)
    if own.passed:
        return (f"{name} gradients of {_count_names(names)} agree with float64 finite differences "
                f"({own.summary()}); the float64 backward does not (see gradients[float64])", details)
    if ctx.planned("gradients:float64"):
        raise CheckSkipped(f"the {name} gradients disagree with float64 finite differences too ({own.summary()}), "
                           "and differ from the float64 gradients, which gradients[float64] reports wrong: fix "
                           "that first", applies=True)
    raise _disagreement(ref, f"{name} gradients differ from the float64 ones ({own.summary()}), and both", details)


def _floors(ctx: Context, names: Sequence[str], gaps: Sequence[_Gap], tolerance: float,
            dtype: torch.dtype, *, beside: bool = False) -> tuple[list[float], list[str]]:
    """Per tensor, the rounding floor of the norm of a difference between two computations of
    its gradient (Note [rounding floor] in ``layercheck/calibration.py``) and where it comes
    from, on the layer beside the point where the gradients were compared there; measured only
    when some tensor exceeds the tolerance without it."""
    if all(gap.relative <= tolerance for gap in gaps):
        return [0.0] * len(names), [""] * len(names)
    at = Point("beside the kinks", lambda: _fresh(ctx, torch.float32, True)) if beside else None
    found = [gradient_norm_floor(ctx, name, dtype, at=at, needed=gap.unexplained(tolerance))
             for name, gap in zip(names, gaps)]
    return [floor for floor, _ in found], [source for _, source in found]


@dataclass(frozen=True)
class _Gap:
    """How far one tensor's gradient is from another computation of it: ‖got − expected‖ and
    ‖expected‖, in float64 (both 0 where either gradient is missing: nothing to compare)."""

    difference: float
    size: float

    @classmethod
    def of(cls, got: torch.Tensor | None, expected: torch.Tensor | None) -> _Gap:
        if got is None or expected is None:
            return cls(0.0, 0.0)
        if got.shape != expected.shape:
            return cls(math.inf, 0.0)
        e = expected.detach().to(torch.float64)
        return cls(float((got.detach().to(torch.float64) - e).norm()), float(e.norm()))

    @property
    def relative(self) -> float:
        """‖got − expected‖ / ‖expected‖ (as ``relative_difference``)."""
        return ratio(self.difference, self.size)

    def unexplained(self, tolerance: float) -> float:
        """How much of ‖got − expected‖ the tolerance leaves for a rounding floor to explain."""
        return self.difference - tolerance * self.size

    def excess(self, tolerance: float, floor: float) -> float:
        """‖got − expected‖ over what is allowed, tolerance·‖expected‖ + floor: at most 1 agrees."""
        return ratio(self.difference, tolerance * self.size + floor)


def _floor_text(floor: float, source: str) -> str:
    return f", beyond the rounding floor {floor:.3g} of its norm ({source})" if floor > 0 else ""


def _lower_run(ctx: Context, ref: Reference, dtype: torch.dtype) -> tuple[list[torch.Tensor | None],
                                                                            list[torch.Tensor | None]]:
    """The gradients in ``dtype`` and the float64 ones to compare them with. float32 uses the
    shared run and the float64 reference (their inputs differ by float32 rounding, far below
    the tolerance); float16 and bfloat16 round the inputs enough to move elements across
    kinks, so their float64 counterpart is taken at the rounded point."""
    if dtype is torch.float32:
        grads = (_analytic(ctx, _fresh(ctx, dtype, True)).check_ran().grads if ref.beside
                 else float32_gradients(ctx).grads)
        return grads, ref.run.grads if ref.layer_grads is None else ref.layer_grads
    subject = _fresh(ctx, dtype, ref.beside)
    try:
        low = LayerFunction(subject, subject.inputs()).gradient(lambda outputs: cotangents(ctx, outputs))
    except LayerRaised as exc:
        if "not implemented for" in str(exc.exc):
            raise CheckSkipped(f"{dtype_name(dtype)} is not supported on the CPU by an operation the layer uses "
                               f"({exc}); run this variant where such kernels exist (e.g. a GPU)",
                               applies=True) from exc
        raise
    upcast = copy.deepcopy(subject.module).to(torch.float64) if subject.module is not None else None
    high_subject = Subject(ctx.target, upcast, dtype=torch.float64)
    high = LayerFunction(high_subject, [x.to(torch.float64) for x in subject.inputs()])
    reference = high.gradient([None if w is None else w.to(torch.float64) for w in low.cotangents])
    return low.grads, reference.grads


def _disagreement(ref: Reference, what: str, details: dict[str, Any], *, brief: bool = False,
                  eval_mode: bool = False, derivative: str = "gradient") -> CheckFailed:
    wrong, right, outputs = ref.diagnosis()
    differences = "float32" if ref.float64_failure is not None else "float64"
    overall = f"{what} disagree with {differences} finite differences ({ref.verdict.summary()})"
    if wrong:  # what to fix first, the combined numbers after
        lines = [f"wrong {derivative} of " + " | ".join(f.describe(brief=brief) for f in wrong), overall]
    else:
        lines = [overall, "no single tensor stands out: small errors spread over several"]
    if outputs:
        lines.append("through " + " | ".join(outputs))
    right = [name for name in right if name not in ref.surrogate_only]  # zero by construction, not judged
    if right:
        lines.append(f"agree: {', '.join(right)}")
    if ref.detach_hint is not None:
        lines.append(ref.detach_hint)
    if eval_mode:
        lines.append("In eval mode the gradients agree: the mismatch is in training mode only, where the layer treats "
                     "part of its computation as a constant (batch statistics, a value detached or computed under "
                     "no_grad) or its hand-written backward leaves out the training-mode terms")
    elif ref.trace.stop_gradients:
        used = ", ".join(ref.trace.stop_gradients[:3])
        lines.append(f"The layer computes part of its forward under torch.no_grad and uses it ({used}), which "
                     "autograd holds constant while finite differences see it move: if that is by design (an ODE "
                     "solver's adaptive step size, a power iteration), the disagreement may be that, and its size "
                     "says how much the held part matters (a looser --tolerance gradients.float64=... accepts it); by "
                     "mistake, it is the bug")
        details = {**details, "stop_gradients": list(ref.trace.stop_gradients)}
    details = {**details, "evaluations": ref.fd.evaluations, "eval_mode_agrees": eval_mode}
    return CheckFailed(". ".join(lines), **details, wrong=[f.to_dict() for f in wrong], agree=right,
                       wrong_outputs=outputs)


def _agreement(verdict: Verdict) -> str:
    worst = verdict.worst
    allowed = f"tolerance {verdict.tolerance:g}" + (" plus rounding noise" if verdict.precision_limited else "")
    text = (f"directional derivatives along {len(verdict.comparisons)} random directions agree with float64 "
            f"finite differences (largest relative error {worst.relative_error:.1e}, {allowed})")
    if verdict.retried:
        text += "; a first pair of directions crossed a kink, two fresh ones agree"
    if verdict.precision != torch.float64:
        text += (f"; the layer computes in {dtype_name(verdict.precision)} inside (seen in the operations its float64 "
                 f"copy runs), so differences were taken at step {verdict.step:.0e} and its rounding noise "
                 f"({verdict.noise:.1e} of the derivative) is allowed on top of the tolerance")
    elif verdict.precision_limited:
        text += (f"; the float64 copy rounds like a lower precision, so the step was raised to {verdict.step:.0e} "
                 f"and rounding noise ({verdict.noise:.1e} of the derivative) is allowed on top of the tolerance")
    return text


def _masks(ctx: Context, fn: LayerFunction) -> list[tuple[str, list[bool]]]:
    """Which tensors require grad in each pattern, with a description."""
    count = len(fn.names)
    inputs = len(fn.input_slots)
    masks: list[tuple[str, list[bool]]] = []
    for slot, name in enumerate(fn.names):
        verb = "not requiring grad" if slot < inputs else "frozen"
        masks.append((f"with {name} {verb}", [s != slot for s in range(count)]))
    if ctx.target.kind != "module":
        for slot, name in enumerate(fn.names):
            masks.append((f"with only {name} requiring grad", [s == slot for s in range(count)]))
    unique: dict[tuple[bool, ...], str] = {}
    for description, mask in masks:
        if any(mask):
            unique.setdefault(tuple(mask), description)
    return [(description, list(mask)) for mask, description in unique.items()]


# -- small helpers -----------------------------------------------------------------------------


# How many other draws of the inputs a tensor that gets no gradient is given before it is
# called unused: a top-1 router over four experts leaves one without a token of ten about one
# time in ten, and with a token in every one of four other draws almost always.
OTHER_DRAWS = 4


def _other_draw(ctx: Context, subject: Subject, k: int) -> list[torch.Tensor]:
    """The ``k``-th other draw of the float32 inputs (k >= 1): the same for every check that
    asks whether a tensor's gradient, or the outputs, depend on the values drawn."""
    return subject.target.inputs(torch.float32, subject.device, seed=ctx.seed + 7919 * k)


def _reached_on_other_inputs(ctx: Context, missing: Sequence[str]) -> list[str]:
    """Those of ``missing`` (tensors without a gradient on the generated inputs) that get one
    on other draws of the inputs: a parameter forward uses for some inputs only (an expert
    its router sends no token to here) is trained; one it never uses, or uses through
    ``.detach()`` only, gets none on any draw."""
    reached: set[str] = set()
    for k in range(1, OTHER_DRAWS + 1):
        subject = ctx.fresh(torch.float32)
        inputs = _other_draw(ctx, subject, k)
        try:
            run = _analytic(ctx, subject, inputs)
        except LayerRaised:  # the forward, on these inputs
            continue
        if run.result is None:  # the backward raised
            continue
        reached.update(name for name, g in zip(run.fn.names, run.grads) if g is not None and name in missing)
        if reached >= set(missing):
            break
    return [name for name in missing if name in reached]


def _read_for_shape_only(ctx: Context, missing: Sequence[str]) -> list[str]:
    """Those inputs of ``missing`` (no gradient on any draw) whose values do not change the
    outputs: the training forward gives bit-identical outputs when each is drawn again (same
    random stream, a fresh copy of the layer per call). A positional embedding that takes ``x``
    for its length, or a layer that reads an input's dtype or device only, needs no gradient
    for it; an input used through ``.detach()`` or comparisons changes the outputs and still
    fails. A layer whose outputs differ between two identical calls is never let off."""
    positions = {int(name.split()[1]): name for name in missing if name.startswith("input ")}
    if not positions:
        return []

    def outputs(inputs: list[Any]) -> list[torch.Tensor] | None:
        try:
            return Outputs.of(ctx.fresh(torch.float32).call(Mode.FORWARD, inputs, grad=False)).tensors
        except LayerRaised:
            return None

    subject = ctx.fresh(torch.float32)
    base = subject.inputs()
    reference, again = outputs(base), outputs(base)
    if reference is None or again is None or not identical(again, reference):
        return []
    unchanged = set(positions)
    for k in range(1, 3):
        other = _other_draw(ctx, subject, k)
        for i in sorted(unchanged):
            got = outputs([other[i] if j == i else x for j, x in enumerate(base)])
            if got is None or not identical(got, reference):
                unchanged.discard(i)
    return [positions[i] for i in sorted(unchanged)]


def _why_none(name: str) -> str:
    if name.startswith("parameter"):
        return (f"{name} (None: forward does not use it, or only through .data/.detach(), or a hand-written "
                "backward returns None for it)")
    return (f"{name} (None: the outputs do not depend on it through autograd: .detach()/.data, "
            "comparisons only, or a hand-written backward returns None for it)")


def _count_names(names: Sequence[str]) -> str:
    inputs = [n for n in names if n.startswith("input")]
    params = [n for n in names if n.startswith("parameter")]
    parts = []
    if inputs:
        parts.append(", ".join(inputs))
    if params:
        parts.append(f"{len(params)} parameter(s)" if len(params) > 3 else ", ".join(params))
    return " and ".join(parts) or "no tensor"


def _bytes(count: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if count < 1024 or unit == "GiB":
            return f"{count:.0f} {unit}" if unit == "bytes" else f"{count:.1f} {unit}"
        count /= 1024  # type: ignore[assignment]
    return f"{count} bytes"


def _raw_dict(r: RawGradient) -> dict[str, Any]:
    return {"function": r.function, "position": r.position, "size": list(r.shape), "dtype": dtype_name(r.dtype),
            "expected_size": list(r.expected_shape), "expected_dtype": dtype_name(r.expected_dtype)}
