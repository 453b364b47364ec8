"""Back-propagation: it runs, gradients have the right sizes, they agree with float64 finite
differences, and they stay right when only some tensors require grad.

The four checks and their judging. The float32 and float64 runs and the float64 reference they
share (with higher_order's checks and finite) live in numerics/reference.py, the references
taken a second time in numerics/second_looks.py, and the words of an agreement or a
disagreement in numerics/diagnosis.py."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch

from layercheck._sdk_internal import (
    Point,
    forward_is_random,
    gradient_norm_floor,
    shared_nonfinite_zeroed,
)
from layercheck.numerics.diagnosis import (
    Gap,
    agreement,
    count_names,
    dead_tensors,
    disagreement,
    float32_judgement,
    floor_details,
    why_none,
)
from layercheck.numerics.functions import LayerFunction
from layercheck.numerics.reference import (
    KINK_NUDGE,
    Reference,
    complex64_parameters,
    cut_names,
    float32_function_reference,
    float32_gradients,
    float32_run,
    float64_run,
    fresh_layer,
    gradient_reference,
    not_finite,
    skip_if_not_differentiable,
    surrogate_slots,
)
from layercheck.numerics.resolution import resolved
from layercheck.numerics.second_looks import (
    eval_reference,
    held_constant,
    lower_precision_run,
    parameters_written,
    reached_on_other_inputs,
    read_for_shape_only,
    second_call_reference,
    second_draw_after_writes,
    second_draw_reference,
    tails_draw,
    tails_in_float32,
)
from layercheck.numerics.verdict import GRADIENT_TOLERANCE, judge
from layercheck.parent.registry import check
from layercheck.reference.per_dtype import Yardstick, autograd_yardstick, not_judged, other_function
from layercheck.reference.precision import imprecise_backward
from layercheck.sdk import (
    DTYPES,
    FORWARD,
    Allowance,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Tolerance,
    dtype_name,
    largest,
    layer_failure,
    mismatch,
)
from layercheck.target.seeding import second_draw_seed

# needs_input_grad compares a float32 backward with the same backward when more tensors
# require grad: the same operations, so only a different summation order can separate them
# (1e-6 or less); a gradient packed into the wrong slot or computed from the wrong branch is
# off by its own size.
FROZEN_TOLERANCE = 1e-3

# What torch.utils.checkpoint warns when reentrant checkpointing runs without an input that
# requires grad: everything inside it then gets no gradient, by PyTorch's design.
_REENTRANT_DROP = "None of the inputs have requires_grad=True"

# The gradient check's tolerances (numerics.GRADIENT_TOLERANCE explains the figures).
# Written out, one per dtype, so that `layercheck checks gradients` reads them from this source.
_GRADIENT_BOUNDS = "relative difference (norm) of each tensor's gradient from the float64 gradient"
_GRADIENT_TOLERANCES = (
    Tolerance("float64", GRADIENT_TOLERANCE[torch.float64],
              "relative error of directional derivatives against float64 finite differences"),
    Tolerance("float32", GRADIENT_TOLERANCE[torch.float32], _GRADIENT_BOUNDS),
    Tolerance("float16", GRADIENT_TOLERANCE[torch.float16], _GRADIENT_BOUNDS),
    Tolerance("bfloat16", GRADIENT_TOLERANCE[torch.bfloat16], _GRADIENT_BOUNDS),
)


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
    size autograd cannot sum back to its input's (the message names it). Fix: use every
    parameter in forward through autograd (no ``.data``, no ``.detach()``), and return a
    gradient of the input's size for every input that needs one.
    """
    run = float32_run(ctx)
    if run.error is not None and run.recorder.wrong():
        error = run.error
        raise CheckFailed(f"backward raised {type(error.exc).__name__}: {str(error.exc).splitlines()[0]}; the cause: "
                          f"{run.recorder.wrong()[0].describe()}", blocking=True, phase="backward",
                          traceback=error.trace,
                          returned=[r.to_dict() for r in run.recorder.wrong()])
    result = run.check_ran()
    names = run.fn.names
    if not names:
        raise CheckSkipped("the layer has no floating input and no learnable parameter: nothing takes a gradient")
    if not result.outputs:
        raise CheckSkipped("the layer returns no floating output: there is nothing to back-propagate")
    if not any(result.differentiable):
        shape_only = read_for_shape_only(ctx, names)
        if len(shape_only) == len(names):  # every one an input, no learnable parameter
            raise CheckSkipped(f"the outputs do not change with the values of {', '.join(shape_only)} (read for "
                               "its size, dtype or device only) and the layer has no learnable parameter: nothing "
                               "takes a gradient")
        raise CheckFailed(
            f"none of the {len(result.outputs)} floating output(s) carries a gradient: each is detached or "
            "computed from non-differentiable operations, so nothing reaches the inputs and parameters",
            blocking=True, outputs=len(result.outputs))
    missing = [name for name, g in zip(names, result.grads) if g is None]
    elsewhere = reached_on_other_inputs(ctx, missing) if missing else []
    never = [name for name in missing if name not in elsewhere]
    shape_only = read_for_shape_only(ctx, never) if never else []
    never = [name for name in never if name not in shape_only]
    if never:
        what = "; ".join(why_none(name) for name in never)
        raise CheckFailed(f"{len(never)} of {len(names)} tensor(s) receive no gradient: {what}",
                          missing=never, reached=[n for n in names if n not in never])
    reached = [name for name in names if name not in shape_only]
    message = f"gradients reach {count_names(reached)}"
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
            + "; autograd reshaped or cast it silently", returned=[r.to_dict() for r in wrong])
    if not any(kept.differentiable):
        raise CheckSkipped("no floating output carries a gradient: nothing was back-propagated")
    for name, value, g in zip(kept.names, kept.tensors, kept.grads):
        if g is not None and (g.shape != value.shape or g.dtype != value.dtype):
            raise CheckFailed(
                f"the gradient of {name} is {tuple(g.shape)} {dtype_name(g.dtype)}, the tensor is "
                f"{tuple(value.shape)} {dtype_name(value.dtype)}", tensor=name)
    recorder = kept.recorder
    message = f"the gradients of {count_names(kept.names)} have their tensors' sizes and dtypes"
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
    the input size; the documentation's "How the gradient check works" says why). The float64 variant compares the
    float64 backward directly; the others compare their backward with the float64 one
    tensor by tensor. Every evaluation restarts from the same state and random stream, so
    dropout, running statistics and recurrent state are a fixed function; kinks (ReLU,
    abs, clamp, max-pooling) crossed by a step are recognised and not reported. A small
    layer (up to 4096 input and parameter elements) is judged on its standard-normal inputs
    mirrored too (the other side of every comparison). Every layer is judged again with its
    standard-normal inputs scaled by 4 (magnitudes up to about 13, where saturation and
    overflow live; a large layer on the first few observations of its batch), and float32
    there must stay finite wherever float64 is finite and within float32's range. A layer whose
    float32 function is not its float64 one (random numbers drawn in the input's dtype) has its
    float32 gradients judged against float32 finite differences, saying why; in float16 and
    bfloat16 a hand-written backward is held to k times autograd's error of the same forward.

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
    Fix: correct the derivative of the tensor named first (in a hand-written backward its
    formula, order, factor or sign; elsewhere a ``.detach()`` or ``no_grad`` on its path), and
    confirm it with ``torch.autograd.gradcheck`` on a small float64 input.
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
        raise CheckSkipped(f"{count_names(ref.fd.fn.names)} receive(s) no gradient at all (backward_runs says why): "
                           "there is no gradient to compare", applies=True)
    if ref.float64_defect is not None and dtype is torch.float64:  # Note [no silent pass] in numerics/reference.py
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
        raise CheckSkipped(f"only {count_names(names)} takes gradients: there is nothing to freeze")
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
                not_finite(ctx, f"the gradient of {name} is not finite on the generated inputs, and {description} "
                           "its non-finite entries move", skipped=": nothing to compare", mask=description,
                           tensor=name)
            got, expected = pair  # NaN where every tensor requires grad stays NaN: finite reports it, not this check
            gap = Gap.of(got, expected)
            difference = gap.relative
            worst = max(worst, difference)
            floor, source = (gradient_norm_floor(ctx, name, needed=gap.unexplained(tolerance))
                             if difference > tolerance else (0.0, ""))
            if gap.excess(tolerance, floor) > 1:
                found = mismatch(expected, got, Allowance(0.0, tolerance * largest(expected))) or {}
                where = (f": at index {tuple(found['index'])} it is {found['actual']:.6g} there and "
                         f"{found['expected']:.6g} when every tensor requires grad" if found else "")
                raise CheckFailed(
                    f"{description}, the gradient of {name} differs from its gradient when every tensor requires "
                    f"grad{where} (a difference of {difference:.3g} × its norm, over the tolerance {tolerance:g})",
                    mask=description, tensor=name, relative_difference=difference, tolerance=tolerance,
                    **floor_details(floor, source), **found)
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
        return float32_judgement(ctx, ref, details)
    constant = held_constant(ctx, ref)
    if constant is not None:
        ctx.note(constant)
        in_eval = agreement(eval_reference(ctx, beside=ref.beside).verdict)
        return (f"{count_names(names)}: in eval mode, {in_eval}; in training mode the layer holds a no_grad "
                "computation constant by design (see the note)", details)
    drawn = second_draw_reference(ctx, beside=ref.beside) if verdict.passed else None
    if drawn is not None and not drawn.verdict.passed:
        written, again = second_draw_after_writes(ctx, beside=ref.beside) or ([], None)
        if again is None or not again.verdict.passed:
            details = {**details, "second_draw": drawn.verdict.to_dict()}
            writes = f", {_writes(written)}" if written else ""
            raise disagreement(drawn, "on a second draw of the inputs (the first draw's agree: a branch the first "
                               f"draw did not take?){writes}, float64 gradients", details)
        details = {**details, "second_draw": again.verdict.to_dict(), "written": written}
        ctx.note(f"{_writes(written)}: on a second draw of the inputs every step of the finite differences from "
                 "the fresh layer was written over too, which the analytic gradient by design does not see; from "
                 "the state one call on that draw leaves, as training's second step sees it, they agree")
    draw = tails_draw(ctx, beside=ref.beside) if verdict.passed else None
    tails = None if draw is None else draw.reference
    if draw is not None and tails is not None and not tails.verdict.passed and tails.detach_hint is None:
        details = {**details, "tails": tails.verdict.to_dict()}
        raise disagreement(tails, f"{draw.where()}, whose magnitudes reach where the first draw's do not (the "
                           "first draw's agree: a formula wrong only at large magnitudes, a clamp, an overflow?), "
                           "float64 gradients", details)
    if tails is not None:
        details["tails"] = tails.verdict.to_dict()
    second = second_call_reference(ctx, beside=ref.beside) if verdict.passed else None
    if second is not None and not second.verdict.passed:
        details = {**details, "second_call": second.verdict.to_dict()}
        raise disagreement(second, "from the state the layer's first training call leaves (its second call, as in "
                           "the second step of training), float64 gradients", details)
    if second is not None:
        details["second_call"] = second.verdict.to_dict()
    if ref.fd.excluded:
        left_out = [names[slot] for slot in sorted(ref.fd.excluded)]
        details["left_out"] = left_out
    if verdict.passed:
        if ref.widened is None:  # Note [float64 backward precision]
            imprecise = imprecise_backward(ctx, lambda: resolved(ref.fd, ref.verdict))
            if imprecise is not None:
                raise CheckFailed(imprecise[0], **details, **imprecise[1])
        for note in dead_tensors(ctx, ref):
            ctx.note(note)
        if ref.fd.held:
            held = ", ".join(ref.fd.fn.names[slot] for slot in ref.fd.held)
            ctx.note(f"rows of {held} were held at the point: PyTorch gives an embedding's padding row no "
                     "gradient (padding_idx), and with scale_grad_by_freq divides a row's gradient by how often "
                     "the batch looks it up, by design")
        complex_low = complex64_parameters(ctx)
        if complex_low:
            ctx.note(f"{', '.join(complex_low)} stay(s) complex64 under layer.double() (it casts floating tensors "
                     "only): the float64 reference made it complex128, differenced as its real and imaginary parts")
        if verdict.precision != torch.float64:
            low = dtype_name(verdict.precision)
            spectrum = " or a complex64 spectrum (torch.cfloat)" if verdict.precision == torch.float32 else ""
            # a float64 forward whose backward alone computes lower (seen by the traced run)
            part = "its backward" if ref.trace.lowest == verdict.precision != ref.trace.forward_lowest else "the layer"
            ctx.note(f"{part} computes in {low} inside even in float64 (a .float(), a {low} constant{spectrum}): "
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
        message = (f"{count_names([n for n in judged if n not in ref.surrogate_only])}: {agreement(verdict)}"
                   f"{_beside_text(ref)}{through}")
        if ref.fd.excluded:
            message += (f"; {', '.join(details['left_out'])} receive(s) no gradient at all (backward_runs reports it) "
                        "and were left out")
        return message, details
    if ref.surrogate is not None:
        details["surrogate"] = ref.surrogate
        functions = cut_names(ref.fd.fn)
        raise disagreement(ref, f"{ref.surrogate}. With the gradient through {functions} taken as zero, float64 "
                           "gradients", details)
    for kind, why in (("straight_through", ref.straight_through), ("widened", ref.widened)):
        if why is not None:
            details[kind] = why
            raise disagreement(ref, f"{why}: float64 gradients", details)
    surrogates = surrogate_slots(ref)
    if surrogates:
        return _judge_without_surrogates(ctx, ref, surrogates, details)
    written = parameters_written(ctx, beside=ref.beside)
    if written:  # in every call: a write that stops after the first is a data-dependent initialisation, made already
        details["written"] = written
        raise disagreement(ref, f"{_writes(written, 'on every call')}: finite differences see the gradient of "
                           "what the write keeps, which is no bug where the write is a projection by design (the "
                           "gradient at the written values is the layer's intent); float64 gradients",
                           details)
    raise disagreement(ref, f"float64 gradients{_beside_text(ref)}", details,
                       eval_mode=_eval_mode_agrees(ctx, ref.beside))


def _note_surrogates(ctx: Context, ref: Reference, judged: list[str], details: dict[str, Any]) -> str:
    """The note on a reference taken with the surrogate Functions' gradient as zero, and what
    the message says of the tensors whose gradient flows only through them; skipped when no
    other tensor is left (Note [surrogate gradients] in numerics/reference.py)."""
    assert ref.surrogate is not None
    details["surrogate"] = ref.surrogate
    details["surrogate_only"] = ref.surrogate_only
    functions = cut_names(ref.fd.fn)
    if set(judged) <= set(ref.surrogate_only):
        raise CheckSkipped(f"{ref.surrogate[0].lower()}{ref.surrogate[1:]}; every tensor takes its gradient only "
                           f"through {functions}, so nothing else is left to judge", applies=True)
    ctx.note(f"{ref.surrogate}. With the gradient through {functions} taken as zero, the rest of the layer's "
             "gradients agree")
    if not ref.surrogate_only:
        return ""
    return (f"; {', '.join(ref.surrogate_only)} left out: its gradient flows only through the surrogate {functions} "
            "(see the note)")


def _judge_without_surrogates(ctx: Context, ref: Reference, surrogates: list[int],
                              details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    names = ref.fd.fn.names
    left = [names[slot] for slot in surrogates]
    why = (f"the forward is piecewise constant in {count_names(left)}: its outputs do not move at all at the "
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
        raise disagreement(ref, f"{why}. Without it, float64 gradients", details)
    ctx.note(f"{why}: left out")
    return f"{count_names(judged)}: {agreement(ref.verdict)}; {', '.join(left)} left out (see the note)", details



def _confirmed(ctx: Context, ref: Reference, dtype: torch.dtype, first: Yardstick) -> Yardstick:
    """A failure against autograd in a low dtype, confirmed on a second draw of the inputs; where
    the second is within the rule, its verdict, noting the first (Note [autograd in the same
    dtype] in reference/per_dtype.py)."""
    if not first.failed:
        return first
    seed = second_draw_seed(ctx.seed)
    subject = fresh_layer(ctx, dtype, ref.beside)
    point = ctx.target.inputs(dtype, subject.device, seed=seed)
    low, high = lower_precision_run(ctx, ref, dtype, inputs=point)
    again = autograd_yardstick(ctx, subject, ref.fd.fn.names, low, high, point)
    if isinstance(again, str) or again.failed:
        return first
    ctx.note(f"on the first draw of the inputs {first.said(dtype)}; within the rule on a second draw (seed {seed}), "
             "so rounding on a few elements, not the backward")
    return again


def _eval_mode_agrees(ctx: Context, beside: bool = False) -> bool:
    """Whether the gradients agree in eval mode (for a failure message; False when unknown)."""
    try:
        return eval_reference(ctx, beside=beside).verdict.passed
    except (LayerRaised, CheckFailed, CheckSkipped):
        return False


def _judge_lower(ctx: Context, ref: Reference, dtype: torch.dtype) -> tuple[str, dict[str, Any]]:
    """A lower precision's backward against the float64 one, tensor by tensor (norm of the
    difference over the norm of the float64 gradient); the float64 one is vouched for by the
    finite differences, so agreeing with it is agreeing with them."""
    name = dtype_name(dtype)
    low, high = lower_precision_run(ctx, ref, dtype)
    tolerance = ctx.tolerance(dtype)
    names = ref.fd.fn.names
    gaps = [Gap.of(g, e) for g, e in zip(low, high)]
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
    stick = (autograd_yardstick(ctx, fresh_layer(ctx, dtype, ref.beside), names, low, high)
             if accepted and dtype is not torch.float32 else "")
    if not isinstance(stick, str):  # Note [autograd in the same dtype] in reference/per_dtype.py
        return _confirmed(ctx, ref, dtype, stick).verdict(dtype, details)
    if agree and accepted:
        vouched = (agreement(ref.verdict) if ref.verdict.passed else
                   "agree with finite differences in eval mode (in training mode the layer holds a no_grad "
                   "computation constant by design: see gradients[float64])")
        floored = [names[i] for i, d in enumerate(differences) if d > tolerance]
        one = len(floored) == 1
        within = (f"; {', '.join(floored[:3])}{' and more' if len(floored) > 3 else ''} beyond the tolerance but "
                  f"within the rounding floor measured for {'it' if one else 'them'}: {name}'s own rounding moves "
                  f"{'its gradient' if one else 'their gradients'} as much (a gradient zero by cancellation, or one "
                  "the layer amplifies rounding into)" if floored else "")
        tails = (_judge_tails_float32(ctx, ref, details)
                 if dtype is torch.float32 and ref.verdict.passed else "")
        return (f"{name} gradients of {count_names(names)} match the float64 gradients (largest relative "
                f"difference {differences[worst]:.2g} in {names[worst]}, tolerance {tolerance:g}{within}), which "
                f"{vouched}{tails}{f' (the fixed tolerance: {stick})' if stick else ''}", details)
    if agree:
        if ctx.planned("gradients:float64"):
            raise CheckSkipped(f"the {name} gradients match the float64 ones (largest relative difference "
                               f"{differences[worst]:.2g}, tolerance {tolerance:g}), which gradients[float64] "
                               "reports wrong: one cause, reported there", applies=True)
        raise disagreement(ref, f"{name} gradients match the float64 ones, which", details, brief=True)
    if forward_is_random(ctx):
        raise CheckSkipped(
            f"the training forward draws random numbers (dropout-like), and the {name} and float64 layers draw "
            f"different ones, so the {name} gradient has no float64 counterpart; gradients[float64] checks the "
            "backward with a fixed random stream")
    why = other_function(ctx, dtype) if accepted else None
    if why is not None:  # Note [a function per dtype] in reference/per_dtype.py
        return float32_judgement(ctx, float32_function_reference(ctx, why, beside=ref.beside), details, why) \
            if dtype is torch.float32 else not_judged(why, dtype)
    if accepted:
        g, e = low[worst], high[worst]
        assert g is not None and e is not None
        found = mismatch(e, g, Allowance(0.0, tolerance * largest(e))) or {}
        where = (f": at index {tuple(found['index'])} the {name} gradient is {found['actual']:.6g}, the float64 "
                 f"one {found['expected']:.6g}" if found else "")
        overflow = ""
        if dtype is not torch.float32 and not bool(g.isfinite().all()):
            overflow = (f": not finite where the float64 one is, so {name} overflows past "
                        f"{torch.finfo(dtype).max:.6g} on the way (a constant or an intermediate beyond its range). "
                        f"Fix: compute that step in float32 (upcast before it, as autocast does), or keep it in range")
        raise CheckFailed(
            f"the {name} gradient of {names[worst]} differs from the float64 gradient (which agrees with "
            f"finite differences){where} (a difference of {differences[worst]:.3g} × its norm, over the tolerance "
            f"{tolerance:g}{f'; the fixed tolerance: {stick}' if stick else ''}){overflow}",
            tensor=names[worst], **details, **floor_details(floors[worst], sources[worst]), **found)
    # Both differ from each other and the float64 one is wrong: judge this one on its own.
    with skip_if_not_differentiable():
        own = judge(ref.fd, low, tolerance)
    if own.passed:
        return (f"{name} gradients of {count_names(names)} agree with float64 finite differences "
                f"({own.summary()}); the float64 backward does not (see gradients[float64])", details)
    if ctx.planned("gradients:float64"):
        raise CheckSkipped(f"the {name} gradients disagree with float64 finite differences too ({own.summary()}), "
                           "and differ from the float64 gradients, which gradients[float64] reports wrong: fix "
                           "that first", applies=True)
    raise disagreement(ref, f"{name} gradients differ from the float64 ones ({own.summary()}), and both", details)


def _judge_tails_float32(ctx: Context, ref: Reference, details: dict[str, Any]) -> str:
    """The float32 run on the draw into the tails against the float64 one (Note [tails in
    float32] in numerics/second_looks.py): what the success message adds, or CheckFailed."""
    found = tails_in_float32(ctx, beside=ref.beside)
    if found is None:
        return ""
    draw = found.draw
    overflow = found.overflow()
    if overflow is not None:
        details["tails_overflow"] = overflow
        raise CheckFailed(f"{draw.where()}, {overflow}: the layer overflows in float32 at magnitudes a network's "
                          "activations reach, where the function it computes does not (an exp without the maximum "
                          "subtracted, as in a hand-written softmax or log-sum-exp; log(1 + exp(x)) for softplus; "
                          "a square of a large value): compute it the stable way (torch.softmax, torch.logsumexp, "
                          "torch.nn.functional.softplus)", **details)
    differences = [Gap.of(low, high).relative for low, high in zip(found.grads, draw.grads)]
    details["tails_relative_differences"] = dict(zip(draw.names, differences))
    return (f"; {draw.where()} the float32 run is finite wherever the float64 run is (largest relative difference "
            f"of its gradients there {max(differences, default=0.0):.2g}, recorded, not judged)")


def _floors(ctx: Context, names: Sequence[str], gaps: Sequence[Gap], tolerance: float,
            dtype: torch.dtype, *, beside: bool = False) -> tuple[list[float], list[str]]:
    """Per tensor, the rounding floor of the norm of a difference between two computations of
    its gradient (Note [rounding floor] in ``layercheck/support/calibration.py``) and where it comes
    from, on the layer beside the point where the gradients were compared there; measured only
    when some tensor exceeds the tolerance without it."""
    if all(gap.relative <= tolerance for gap in gaps):
        return [0.0] * len(names), [""] * len(names)
    at = Point("beside the kinks", lambda: fresh_layer(ctx, torch.float32, True)) if beside else None
    found = [gradient_norm_floor(ctx, name, dtype, at=at, needed=gap.unexplained(tolerance))
             for name, gap in zip(names, gaps)]
    return [floor for floor, _ in found], [source for _, source in found]


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


def _beside_text(ref: Reference) -> str:
    return (f" at a point beside the layer's (its parameters moved by {KINK_NUDGE:g} of their size: the layer's "
            "point sits on kinks, see the note)" if ref.beside else "")


def _writes(written: Sequence[str], when: str = "") -> str:
    """What the training forward writes into (Note [parameter writes] in
    numerics/second_looks.py)."""
    return (f"the training forward writes into {', '.join(written)} (in place{', ' + when if when else ''}, as "
            "nn.Embedding's max_norm renormalises the rows it reads)")
