"""The gradient checks' shared references: the float32 and float64 runs every gradient check
reads, and the float64 reference that judges them: finite differences of a float64 copy of the
layer and their verdict on its analytic gradient (:func:`gradient_reference`), taken again where
the layer's design asks for it (beside kinks, with its lower-precision casts widened, with the
values it detaches held, with its surrogate Functions cut) and in float32 where it cannot run in
float64. The Notes here explain each; numerics/second_looks.py takes the reference again
elsewhere, numerics/diagnosis.py words what it says."""

from __future__ import annotations

import contextlib
import math
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, NoReturn

import torch

from layercheck.numerics.engine import FiniteDifferences, NotDifferentiable, OnKinks, TooNoisy, Unstable
from layercheck.numerics.functions import Backprop, LayerFunction, held_rows
from layercheck.numerics.locate import Finding, diagnose, size_names
from layercheck.numerics.patterns import PATTERN_DRAWS
from layercheck.numerics.probes import Probe
from layercheck.numerics.recording import Analytic, KeptGradients, analytic_run, handed_run
from layercheck.numerics.trace import Trace, Tracing, trace
from layercheck.numerics.verdict import Verdict, judge
from layercheck.parent.errors import CheckFailed, CheckSkipped, LayerRaised
from layercheck.parent.registry import GRADIENTS
from layercheck.support.compare import all_finite, dtype_name, nonfinite
from layercheck.support.context import Context
from layercheck.support.runs import layer_is_float32
from layercheck.target.frames import user_frame
from layercheck.target.subject import Subject

# The checks that read the gradient check's shared runs (each holds full-size inputs, outputs
# and gradients): once they have all run, the runner lets the runs go (Context.shared).
FLOAT32_READERS = ("backward_runs", "needs_input_grad", "finite")
_FLOAT32_GRADIENTS = "layercheck.gradients.float32.gradients"  # what outlives the float32 run (KeptGradients)
_GRADIENTS_READERS = ("backward_size", "gradients")
FLOAT64_READERS = ("backward_size", "gradients", "gradgrad", "forward_ad")  # the float64 runs


def float32_run(ctx: Context) -> Analytic:
    """The float32 forward and backward shared by the four gradient checks and finite. What
    its hand-written backwards returned is held apart for backward_size, and its gradients for
    gradients[float32], which compares them with the float64 ones once the finite differences
    are done: the run's inputs, outputs and cotangents can go before the float64 runs come."""

    def compute() -> Analytic:
        analytic = handed_run(ctx) or analytic_run(ctx, ctx.fresh(torch.float32))
        if analytic.result is not None:
            ctx.shared(_FLOAT32_GRADIENTS, lambda: KeptGradients.of(analytic), readers=_GRADIENTS_READERS)
        return analytic

    return ctx.shared("layercheck.gradients.float32", compute, readers=FLOAT32_READERS)


def float32_gradients(ctx: Context) -> KeptGradients:
    """The float32 run's gradients (see :func:`float32_run`). Raises the run's LayerRaised."""
    return ctx.shared(_FLOAT32_GRADIENTS, lambda: KeptGradients.of(float32_run(ctx)), readers=_GRADIENTS_READERS)


def float64_run(ctx: Context) -> Analytic:
    """The float64 copy's forward and backward: the analytic side of the float64 reference,
    and what ``backward_size`` reads a hand-written backward's float64 dtypes from.
    Raises LayerRaised when the float64 forward raises."""
    return ctx.shared("layercheck.gradients.float64.analytic",
                      lambda: analytic_run(ctx, fresh_copy(ctx, torch.float64), traced=True),
                      readers=FLOAT64_READERS)


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
        defect = nonfinite_problem(run, fn.names, "float64")
        if defect is not None:
            if _float32_run_finite(ctx):  # Note [no silent pass]
                ref = _float32_reference(ctx, f"{defect} where the float32 run's are finite")
                ref.float64_defect = defect
                return ref
            _skip_unless_finite(ctx, run, "float64")  # finite sees it too: a skip pointing there
        return judged(ctx, fn, run, traced=analytic.trace)

    return ctx.shared("layercheck.gradients.float64", build, readers=FLOAT64_READERS)


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


def _first_nonfinite(run: Backprop) -> tuple[str, int, torch.Tensor] | None:
    """The first of a run's outputs, then of its gradients, that is not finite: ("output", its
    index, it) or ("gradient", its slot, it); None when all are finite."""
    for i, y in enumerate(run.outputs):
        if not y.is_meta and not all_finite(y):  # meta: found finite before, values let go
            return "output", i, y
    for slot, g in enumerate(run.grads):
        if g is not None and not all_finite(g):
            return "gradient", slot, g
    return None


def nonfinite_problem(run: Backprop, names: Sequence[str], dtype: str) -> str | None:
    """What is not finite in a run's outputs or gradients, naming the first such tensor, or None."""
    found = _first_nonfinite(run)
    if found is None:
        return None
    kind, k, t = found
    if kind == "output":
        return f"{dtype} output {k} has {nonfinite(t)}"
    return f"the {dtype} gradient of {names[k]} has {nonfinite(t)}"


def _float32_run_finite(ctx: Context) -> bool:
    """Whether the run the finite check looks at (the float32 one, for a float32 layer) has
    finite outputs and gradients: then a non-finite float64 run is nobody else's finding."""
    if not layer_is_float32(ctx):
        return False
    try:
        run = float32_run(ctx).check_ran()
    except LayerRaised:
        return False
    return _first_nonfinite(run) is None


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
        analytic = analytic_run(ctx, subject, traced=True)
        fn, run = analytic.fn, analytic.check_ran()
        if not run.outputs:
            return None
        _skip_unless_finite(ctx, run, "float64")  # its skip or failure leaves the skip at the point
        ref = judged(ctx, fn, run, traced=analytic.trace)
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


def fresh_layer(ctx: Context, dtype: torch.dtype, beside: bool, *, sample: bool = False) -> Subject:
    """A fresh layer in ``dtype`` for a reference, at the point or beside it (Note [beside the
    kinks])."""
    subject = _beside(ctx, dtype, sample=sample) if beside else fresh_copy(ctx, dtype, sample=sample)
    assert subject is not None  # a reference is taken beside the point only where there are parameters to move
    return subject


def complex64_parameters(ctx: Context) -> list[str]:
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
    return judged(ctx, fn, run, precision=torch.float32, float64_failure=cause)


def float32_function_reference(ctx: Context, cause: str, *, beside: bool = False) -> Reference:
    """The float32 reference of a layer whose float32 function is not its float64 one, for
    ``cause`` (Note [a function per dtype] in reference/per_dtype.py): its own run, not shared."""
    analytic = analytic_run(ctx, fresh_layer(ctx, torch.float32, beside), traced=True)
    fn, run = analytic.fn, analytic.check_ran()
    _skip_unless_finite(ctx, run, "float32")
    return judged(ctx, fn, run, precision=torch.float32, float64_failure=cause, traced=analytic.trace)


def _raised(failure: LayerRaised) -> str:
    """What the layer raised, and where in its code."""
    where = user_frame(failure.exc)
    cause = f"{failure.phase} raised {type(failure.exc).__name__}: {str(failure.exc).splitlines()[0]}"
    return cause + (f" at {where}" if where else "")


def judged(ctx: Context, fn: LayerFunction, run: Backprop, *, precision: torch.dtype | None = None,
           float64_failure: str | None = None, traced: Trace | None = None) -> Reference:
    """The finite differences of ``fn`` and their verdict on its analytic gradient ``run``
    (``traced``: what the run computed, when it was recorded while it ran)."""
    kept = None if any(y.is_meta for y in run.outputs) else run.outputs  # meta: judged before, values let go
    fd = FiniteDifferences(fn, [w for w in run.cotangents if w is not None], seed=ctx.seed, outputs=kept)
    # the outputs' values are in the differences' base sums now: only their sizes and dtypes
    # are read again, and a full-size copy fewer is held while the layer is differenced
    run.outputs[:] = [y.to("meta") for y in run.outputs]
    fd.excluded = {slot for slot, g in enumerate(run.grads) if g is None}
    fd.held = held_rows(fn)
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
            # one direction where it agrees tightly (Note [one direction that agrees tightly] in numerics/verdict.py)
            verdict = judge(fd, run.grads, tolerance, tight=True)
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
        ref = Reference(fd, run, verdict, traced, float64_failure, size_names(ctx))
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

# The largest disagreement the layer's detaches explain (Note [approximate detaches]) for which
# the failure suggests a --tolerance that accepts it.
ACCEPTABLE_DETACH = 0.05


def explain_detaches(trace: Trace, error: float, variant: str) -> str:
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
        first.detach_hint = explain_detaches(first.trace, error, ctx.variant)
        return None
    ref.approximate = (
        "the layer detaches smooth values (a maximum subtracted for stability, a statistic), so its gradient is the "
        "derivative with those values held constant: with them held at the point the differences agree, and the "
        f"full derivative differs from the gradient by a relative {error:.2g} ({first.verdict.summary()}), at most "
        f"{APPROXIMATE_DETACH:g}: an approximation the layer makes on purpose (an eps beside a stabiliser), or the "
        "error of a detach it should not make")
    return ref


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
            ref = judged(ctx, fn, run, precision=first.verdict.precision, float64_failure=first.float64_failure,
                         traced=first.trace)
    except (LayerRaised, CheckFailed, CheckSkipped):
        pass  # nothing the first verdict does not already say: it stands
    if ref is None:
        fn.cut = ()
        return None
    ref.surrogate_only = [name for name, g, cut in zip(fn.names, first.run.grads, ref.run.grads)
                          if nonzero(g) and not nonzero(cut)]
    functions = cut_names(fn)
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


def nonzero(grad: torch.Tensor | None) -> bool:
    return grad is not None and bool(grad.abs().sum() > 0)


def cut_names(fn: LayerFunction) -> str:
    """The surrogate Functions whose gradient ``fn`` takes as zero (Note [surrogate gradients])."""
    return ", ".join(f.__qualname__ for f in fn.cut)


def _held(ctx: Context, fn: LayerFunction, first: Reference) -> Reference | None:
    """The reference taken again with the values the layer detaches held at the point, the
    first run's analytic gradient judged by it; None when it cannot be taken (the layer raises,
    or detaches other values at other points), and ``fn`` is as it was."""
    ref = None
    try:
        if fn.hold():
            ref = judged(ctx, fn, first.run, precision=first.verdict.precision,
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
            ref = judged(ctx, fn, run, traced=traced)
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


def _skip_unless_finite(ctx: Context, run: Backprop, dtype: str) -> None:
    """No finite difference can be taken of a layer whose outputs or gradients are not
    finite: skipped pointing at the finite check, or failed when that check does not run
    (a skip must never point at a check that did not run)."""
    found = _first_nonfinite(run)
    if found is None:
        return
    kind, k, _ = found
    problem = (f"{dtype} output {k} is not finite on the generated inputs" if kind == "output" else
               f"a {dtype} gradient is not finite on the generated inputs")
    not_finite(ctx, problem, skipped=", so no finite difference can be taken",
               failed="; no gradient can be judged until it is", reporters=("finite", "gradients:float64"))


def not_finite(ctx: Context, problem: str, *, skipped: str, failed: str = "",
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


def surrogate_slots(ref: Reference) -> list[int]:
    """The slots of the wrong tensors whose gradient is a surrogate by design (Note [surrogate
    gradients])."""
    wrong, _, _ = ref.diagnosis()
    names, grads, fd = ref.fd.fn.names, ref.run.grads, ref.fd
    found = []
    for finding in wrong:
        slot = names.index(finding.name)
        grad = grads[slot]
        if not nonzero(grad):
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
