"""The float64 reference taken a second time, where one look at the fresh layer can miss a
wrong gradient or call a right one wrong: on a second draw of the inputs (Note [second draw]),
from the state a first training call leaves (Note [second call]), in eval mode, and past the
writes a training call makes into the parameters (Note [parameter writes]); and at the point a
lower precision rounds the inputs to (float16, bfloat16)."""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layercheck.numerics.functions import LayerFunction
from layercheck.numerics.recording import Analytic, analytic_run
from layercheck.numerics.reference import (
    FLOAT64_READERS,
    Reference,
    float32_gradients,
    fresh_layer,
    judged,
    nonfinite_problem,
)
from layercheck.parent.errors import CheckFailed, CheckSkipped, LayerRaised
from layercheck.parent.inputs import CAPTURED
from layercheck.support.compare import all_finite, dtype_name, identical, nonfinite
from layercheck.support.context import Context
from layercheck.support.runs import cotangents
from layercheck.target.seeding import second_draw_seed
from layercheck.target.subject import Mode, Subject
from layercheck.target.tensors import Outputs, backward_nodes

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
    draw]); None for large ones. ``beside``: with the parameters moved (Note [beside the kinks] in
    reference.py)."""

    def build() -> Reference | None:
        drawn = _second_draw(ctx, beside)
        return None if drawn is None else _judged_on(ctx, *drawn)

    return ctx.shared(f"layercheck.gradients.float64.second_draw{'.beside' * beside}", build, readers=FLOAT64_READERS)


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
                      readers=FLOAT64_READERS)


def _second_draw(ctx: Context, beside: bool) -> tuple[Subject, list[torch.Tensor]] | None:
    """A fresh float64 layer and the second draw of the inputs (Note [second draw]); None for
    large layers."""
    subject = fresh_layer(ctx, torch.float64, beside)
    if _elements(ctx, subject) > SECOND_DRAW_LIMIT:
        return None
    first = ctx.target.inputs(torch.float64)
    fresh = ctx.target.inputs(torch.float64, seed=second_draw_seed(ctx.seed))
    return subject, [-x if _standard_normal(spec) and x.is_floating_point() else other
                     for spec, x, other in zip(ctx.target.specs, first, fresh)]


# Note [tails]
#     Standard-normal inputs at test sizes stay within about ±3.2 (±4.5 at a million elements),
#     so a backward wrong only at large magnitudes (a sigmoid's derivative computed from an output
#     clamped to [0.01, 0.99], wrong beyond 4.6; an exp or a log-sum-exp that loses its shift; a
#     softplus that switches formula) passed every check, as it passes gradcheck. Where some input
#     is drawn standard normal (the default; a declared range or distribution, integers and masks
#     are the layer's domain and stay as drawn) or captured from a model (layercheck scan: the
#     activations one sample forward gave the layer; larger ones are what training reaches, and
#     integer and bool inputs stay as captured), the float64 reference is judged once more on the
#     first draw with those inputs scaled by TAILS_SCALE: a quarter of their elements then lie
#     beyond 4.6 and the largest near 13. A small layer (SECOND_DRAW_LIMIT elements, as for the
#     second draw) is judged so whole. A larger one is judged on the runner's sample of the batch
#     where it has made one (its first few observations, about 2^16 input elements: Target.sampled),
#     which costs a few hundredths of one full-size judgement at SReLU's 24,24,20,128; else (its
#     inputs are below that size already, or it has no common batch) on the whole batch, one more
#     judgement. Where finite differences cannot judge that draw (an output jumps, noise), the
#     first draw's verdict stands, as for the second draw, and so it does where the values the
#     layer detaches on purpose are the whole disagreement there (Note [approximate detaches] in
#     reference.py: a detached maximum beside an eps moves the derivative more at large
#     magnitudes, by design).
#
#     The same draw is run in float32 for gradients[float32] (Note [tails in float32]). Where the
#     float64 outputs or gradients are not finite there, nothing is judged on the draw, and a note
#     says where and from what magnitude (the smallest scale on TAILS_LADDER at which the run is
#     not finite): an overflow of the function itself (exp(x²)) that a user's activations may reach.
TAILS_SCALE = 4.0
TAILS_LADDER = (1.5, 2.0, 2.5, 3.0, 3.5)  # the scales tried to say where a run stops being finite


@dataclass
class TailsDraw:
    """The draw into the tails (Note [tails]): the float64 layer's run on the scaled inputs and
    the reference judged on it."""

    sample: bool  # run on the runner's sample of the batch (a large layer), not the whole batch
    inputs: list[torch.Tensor]  # float64, scaled where ``scaled``
    scaled: list[bool]
    names: Sequence[str]
    outputs: list[torch.Tensor]  # the float64 run's outputs (kept before the differences let them go)
    grads: list[torch.Tensor | None]  # its analytic gradients
    finite: bool  # whether the float64 outputs and gradients are all finite
    reference: Reference | None  # None where finite differences cannot judge the draw
    observations: int  # of the batch the draw was run on

    @property
    def largest(self) -> float:
        """The largest magnitude of the scaled inputs."""
        return max(float(x.abs().max()) for x, scale in zip(self.inputs, self.scaled) if scale and x.numel())

    def where(self) -> str:
        """"on the inputs scaled by 4 (magnitudes up to 13.1)", and on which observations."""
        sample = f", on the first {self.observations} observations of the batch" if self.sample else ""
        return f"on the inputs scaled by {TAILS_SCALE:g} (magnitudes up to {self.largest:.3g}{sample})"


def tails_draw(ctx: Context, *, beside: bool = False) -> TailsDraw | None:
    """The float64 run on the first draw with its standard-normal and captured floating inputs
    scaled by TAILS_SCALE, and its reference (Note [tails]); None where there is no such input."""

    def build() -> TailsDraw | None:
        subject = fresh_layer(ctx, torch.float64, beside)
        sample = False
        if _elements(ctx, subject) > SECOND_DRAW_LIMIT:
            subject = fresh_layer(ctx, torch.float64, beside, sample=True)  # the whole batch where none was made
            sample = subject.target is not ctx.target
        target = subject.target
        first = target.inputs(torch.float64)
        scaled = [_into_tails(spec) and x.is_floating_point() for spec, x in zip(target.specs, first)]
        if not any(scaled):
            return None
        inputs = _scaled(first, scaled, TAILS_SCALE)
        analytic = analytic_run(ctx, subject, inputs)
        run = analytic.check_ran()
        problem = nonfinite_problem(run, analytic.fn.names, "float64")
        draw = TailsDraw(sample, inputs, scaled, analytic.fn.names, [y.detach().clone() for y in run.outputs],
                         [None if g is None else g.detach().clone() for g in run.grads], problem is None, None,
                         target.batch or 0)
        if problem is not None:
            since = first_scale_not_finite(ctx, draw, torch.float64, beside)
            ctx.note(f"{draw.where()}, {problem}{since}: the layer overflows at magnitudes a network's activations "
                     "may reach")
            return draw
        draw.reference = _judged_from(ctx, analytic)
        return draw

    return ctx.shared(f"layercheck.gradients.float64.tails{'.beside' * beside}", build, readers=FLOAT64_READERS)


def tails_reference(ctx: Context, *, beside: bool = False) -> Reference | None:
    """The float64 reference on the draw into the tails (Note [tails]); None where there is no
    such draw or it cannot be judged."""
    draw = tails_draw(ctx, beside=beside)
    return None if draw is None else draw.reference


def _scaled(inputs: Sequence[torch.Tensor], scaled: Sequence[bool], scale: float) -> list[torch.Tensor]:
    return [x * scale if flag else x for x, flag in zip(inputs, scaled)]


def _in(dtype: torch.dtype, inputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The floating inputs in ``dtype`` (complex ones in its complex dtype); the others (a
    boolean mask, indices) as they are."""
    complex_dtype = torch.complex128 if dtype is torch.float64 else torch.complex64
    return [x.to(dtype) if x.is_floating_point() else x.to(complex_dtype) if x.is_complex() else x for x in inputs]


def first_scale_not_finite(ctx: Context, draw: TailsDraw, dtype: torch.dtype, beside: bool) -> str:
    """", first at the inputs scaled by 2.5 (magnitudes up to 8.2)": the smallest scale on
    TAILS_LADDER at which a fresh layer's run in ``dtype`` is not finite; "" where that is only
    at TAILS_SCALE (or the layer raises before)."""
    for scale in TAILS_LADDER:
        subject = fresh_layer(ctx, dtype, beside, sample=draw.sample)
        inputs = _in(dtype, _scaled(draw.inputs, draw.scaled, scale / TAILS_SCALE))
        try:
            run = analytic_run(ctx, subject, inputs).check_ran()
        except LayerRaised:
            return ""
        if nonfinite_problem(run, draw.names, dtype_name(dtype)) is not None:
            largest = draw.largest * scale / TAILS_SCALE
            return f", first at the inputs scaled by {scale:g} (magnitudes up to {largest:.3g})"
    return ""


# Note [tails in float32]
#     On the draw into the tails (Note [tails]), gradients[float32] runs the float32 layer as
#     well, on the same scaled inputs rounded to float32 (scaling by 4 is exact; a mask or indices
#     as they are) with the same output gradients: where the float64 run is finite, every float32
#     output and gradient whose float64 values lie within float32's range must be finite too (a
#     softmax that exponentiates without subtracting its maximum gives inf/inf = NaN once a logit
#     passes 88.7, which float64 computes to 1e113 and divides back to a probability; a softplus
#     written log(1 + exp(x)) is inf there). A float32 value beyond float32's range, where
#     float64's is too, is the function's, not a defect: it is left to the note. The failure says
#     where and from what magnitude. How far the float32 gradients are from the float64 ones
#     there is recorded in the result's details, not judged: at large magnitudes float32 parts
#     from float64 where nothing is wrong. A Gaussian kernel's gradient underflows to exactly
#     zero in float32 (gpytorch's RBF kernel: relative difference 1, rounding floor 3e-25); a
#     mixture of experts routes a token near a tie to another expert (st-moe: an expert's bias
#     gradient 11% off); one-ulp moves, which the rounding floor is measured by, change neither.


@dataclass
class TailsInFloat32:
    """The float32 run on the draw into the tails, beside the float64 one (Note [tails in float32])."""

    draw: TailsDraw
    outputs: list[torch.Tensor]
    grads: list[torch.Tensor | None]
    since: Callable[[], str]  # ", first at the inputs scaled by 2.5 (...)": where float32 stops being finite

    def overflow(self) -> str | None:
        """What is not finite in float32 where the float64 value is finite and within float32's
        range, naming the first such tensor; None where nothing is."""
        limit = torch.finfo(torch.float32).max
        pairs: list[tuple[str, torch.Tensor | None, torch.Tensor | None]]
        pairs = [(f"output {k}", low, high) for k, (low, high) in enumerate(zip(self.outputs, self.draw.outputs))]
        pairs += [(f"gradient of {name}", low, high) for name, low, high in zip(self.draw.names, self.grads,
                                                                                  self.draw.grads)]
        for name, low, high in pairs:
            if low is None or high is None or low.shape != high.shape or all_finite(low):
                continue
            representable = torch.isfinite(high) & (high.abs() <= limit)
            found = nonfinite(low.detach().cpu(), ignore=~representable.cpu())
            if found is not None:
                largest_there = float(high[representable].abs().max()) if bool(representable.any()) else 0.0
                return (f"the float32 {name} has {found}, where the float64 run's are finite (at most "
                        f"{largest_there:.3g} in magnitude, within float32's range){self.since()}")
        return None


def tails_in_float32(ctx: Context, *, beside: bool = False) -> TailsInFloat32 | None:
    """The float32 layer's run on the draw into the tails (Note [tails in float32]); None where
    there is no such draw, its float64 run is not finite, or the float32 layer raises there."""
    draw = tails_draw(ctx, beside=beside)
    if draw is None or not draw.finite:
        return None
    subject = fresh_layer(ctx, torch.float32, beside, sample=draw.sample)
    try:
        run = analytic_run(ctx, subject, _in(torch.float32, draw.inputs)).check_ran()
    except LayerRaised:
        return None  # backward_runs and the first draw report what the layer raises
    return TailsInFloat32(draw, list(run.outputs), list(run.grads),
                          lambda: first_scale_not_finite(ctx, draw, torch.float32, beside))


def _standard_normal(spec: Any) -> bool:
    """Whether an input is drawn standard normal (the default): symmetric about zero, unbounded."""
    return bool(spec.values.distribution == "normal" and spec.values.mean == 0)


def _into_tails(spec: Any) -> bool:
    """Whether an input is scaled in the draw into the tails (Note [tails]): drawn standard normal,
    or captured from a model (its floating values; integers and masks stay as captured)."""
    return _standard_normal(spec) or spec.values.distribution == CAPTURED


def _elements(ctx: Context, subject: Subject) -> int:
    """The elements of the layer's inputs and parameters: what a further draw costs to difference."""
    return sum(layout.numel for layout in ctx.layouts) + sum(p.numel() for _, p in subject.parameters())


def _judged_on(ctx: Context, subject: Subject, inputs: list[torch.Tensor]) -> Reference | None:
    return _judged_from(ctx, analytic_run(ctx, subject, inputs))


def _judged_from(ctx: Context, analytic: Analytic) -> Reference | None:
    """The reference of a further draw's run, or None where it has nothing to add to the first
    draw's verdict: no floating output, outputs that are not finite, or differences that cannot
    judge it (an output jumps there)."""
    run = analytic.check_ran()
    if not run.outputs or any(not all_finite(y) for y in run.outputs):
        return None
    try:
        return judged(ctx, analytic.fn, run)
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
        subject = fresh_layer(ctx, torch.float64, beside)
        fn = LayerFunction(subject, subject.inputs(), mode=Mode.EVAL)
        return judged(ctx, fn, fn.gradient(lambda outputs: cotangents(ctx, outputs)))

    return ctx.shared(f"layercheck.gradients.float64.eval{'.beside' * beside}", build, readers=FLOAT64_READERS)


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
        subject = fresh_layer(ctx, torch.float64, beside, sample=True)
        first = _graph_and_outputs(subject)
        after_first = subject.checkpoint()
        if not subject.changes(fresh_layer(ctx, torch.float64, beside, sample=True).checkpoint()):
            return None  # the first call leaves nothing behind
        second = _graph_and_outputs(subject)
        if first == second:
            return None  # what it leaves behind (running statistics) does not change the next call
        if subject.target is not ctx.target:  # decided on the sample: the reference is the whole batch's
            subject = fresh_layer(ctx, torch.float64, beside)
            subject.forward(subject.inputs(requires_grad=True))  # its first call, as _graph_and_outputs makes it
            after_first = subject.checkpoint()
        subject.rewind(after_first)
        analytic = analytic_run(ctx, subject)
        return judged(ctx, analytic.fn, analytic.check_ran())

    return ctx.shared(f"layercheck.gradients.float64.second{'.beside' * beside}", build, readers=FLOAT64_READERS)


# Note [parameter writes]
#     A layer may write into its own parameters in its training forward: nn.Embedding with
#     max_norm renormalises the rows it looks up in place, a face-recognition loss (P2SGrad)
#     projects its class weights onto the unit sphere. Autograd's gradient is then the gradient
#     at the written values, by design; finite differences from a layer whose values the write
#     still moves have every step written over as well (a row moved off the sphere is put back
#     on it), so they see the gradient of what the write keeps. A write that stops after the
#     first call is taken for a data-dependent initialisation and made before any check (Note
#     [data-dependent initialisation] in target/building.py), so the first draw of the inputs is judged
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
        subject = fresh_layer(ctx, torch.float64, beside, sample=True)
        return _writes_of(subject, subject.inputs())

    return ctx.shared(f"layercheck.gradients.float64.written{'.beside' * beside}", build, readers=FLOAT64_READERS)


def _graph_and_outputs(subject: Subject) -> tuple[tuple[str, ...], tuple[bytes, ...]]:
    """One training call of the layer: the kinds of its autograd nodes and its outputs' bytes."""
    outputs = Outputs.of(subject.forward(subject.inputs(requires_grad=True))).floating
    kinds = tuple(type(node).__name__ for node in backward_nodes(outputs))
    return kinds, tuple(y.detach().cpu().numpy().tobytes() for y in outputs)


# How many other draws of the inputs a tensor that gets no gradient is given before it is
# called unused: a top-1 router over four experts leaves one without a token of ten about one
# time in ten, and with a token in every one of four other draws almost always.
OTHER_DRAWS = 4


def other_draw(ctx: Context, subject: Subject, k: int) -> list[torch.Tensor]:
    """The ``k``-th other draw of the float32 inputs (k >= 1): the same for every check that
    asks whether a tensor's gradient, or the outputs, depend on the values drawn."""
    return subject.target.inputs(torch.float32, subject.device, seed=ctx.seed + 7919 * k)


def reached_on_other_inputs(ctx: Context, missing: Sequence[str]) -> list[str]:
    """Those of ``missing`` (tensors without a gradient on the generated inputs) that get one
    on other draws of the inputs: a parameter forward uses for some inputs only (an expert
    its router sends no token to here) is trained; one it never uses, or uses through
    ``.detach()`` only, gets none on any draw."""
    reached: set[str] = set()
    for k in range(1, OTHER_DRAWS + 1):
        subject = ctx.fresh(torch.float32)
        inputs = other_draw(ctx, subject, k)
        try:
            run = analytic_run(ctx, subject, inputs)
        except LayerRaised:  # the forward, on these inputs
            continue
        if run.result is None:  # the backward raised
            continue
        reached.update(name for name, g in zip(run.fn.names, run.grads) if g is not None and name in missing)
        if reached >= set(missing):
            break
    return [name for name in missing if name in reached]


def read_for_shape_only(ctx: Context, missing: Sequence[str]) -> list[str]:
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
        other = other_draw(ctx, subject, k)
        for i in sorted(unchanged):
            got = outputs([other[i] if j == i else x for j, x in enumerate(base)])
            if got is None or not identical(got, reference):
                unchanged.discard(i)
    return [positions[i] for i in sorted(unchanged)]


# What torch's CPU kernels say where they have none for a dtype ("add_stub" not implemented for
# 'Half'; the FFT's Unsupported dtype Half): the environment's limit, not the layer's fault.
_NO_KERNEL = ("not implemented for", "Unsupported dtype")


def lower_precision_run(ctx: Context, ref: Reference, dtype: torch.dtype,
                        inputs: Sequence[torch.Tensor] | None = None) -> tuple[list[torch.Tensor | None],
                                                                                list[torch.Tensor | None]]:
    """The gradients in ``dtype`` and the float64 ones to compare them with. float32 uses the
    shared run and the float64 reference (their inputs differ by float32 rounding, far below
    the tolerance); float16 and bfloat16 round the inputs enough to move elements across
    kinks, so their float64 counterpart is taken at the rounded point (the target's inputs, or
    ``inputs`` in ``dtype``: another draw)."""
    if dtype is torch.float32:
        grads = (analytic_run(ctx, fresh_layer(ctx, dtype, True)).check_ran().grads if ref.beside
                 else float32_gradients(ctx).grads)
        return grads, ref.run.grads if ref.layer_grads is None else ref.layer_grads
    subject = fresh_layer(ctx, dtype, ref.beside)
    # the float64 twin copied before the forward: from the same state, and before the forward
    # leaves tensors of its graph in the module (a cache), which deepcopy refuses
    upcast = copy.deepcopy(subject.module).to(torch.float64) if subject.module is not None else None
    try:
        point = subject.inputs() if inputs is None else [x.detach().clone() for x in inputs]
        low = LayerFunction(subject, point).gradient(lambda outputs: cotangents(ctx, outputs))
    except LayerRaised as exc:
        if any(text in str(exc.exc) for text in _NO_KERNEL):
            raise CheckSkipped(f"{dtype_name(dtype)} is not supported on the CPU by an operation the layer uses "
                               f"({exc}); run this variant where such kernels exist (e.g. a GPU)",
                               applies=True) from exc
        raise
    high_subject = Subject(ctx.target, upcast, dtype=torch.float64)
    # integer and bool inputs (indices, targets, masks) stay as they are
    high = LayerFunction(high_subject, [x.to(torch.float64) if x.is_floating_point() else x for x in point])
    reference = high.gradient([None if w is None else w.to(torch.float64) for w in low.cotangents])
    return low.grads, reference.grads
