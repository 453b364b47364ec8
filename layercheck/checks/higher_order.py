"""Derivatives beyond the first backward (opt-in): second derivatives through the double
backward, and forward-mode derivatives (jvp). Both are judged on the float64 copy against
the same finite differences as the gradient check.

Note [second derivatives]
    Let w be the seeded cotangents of the gradient check, g(θ, w) = ∇_θ <w, y(θ)> the first
    gradient of the inputs and parameters θ, and u a fixed random contraction over θ (standard
    normal, scaled by each tensor's largest magnitude like the difference directions). The
    scalar F(θ, w) = <g(θ, w), u> is differenced along random directions d over θ and w
    exactly as the gradient check differences L = <w, y> (``GradientFunction`` in
    ``numerics/functions.py``); the analytic side is the double backward, ∇ F = grad of <g, u> with g
    taken with ``create_graph=True``. Along θ this is the Hessian-vector product; along w it is
    J u, so a backward that detaches its incoming gradient is seen too (gradient penalties
    differentiate through both). Everything of Note [directional derivatives], Note [kinks]
    and Note [precision] carries over: ReLU, abs, clamp, max-pooling and SReLU make the first
    gradient jump where a step crosses a kink, a central difference across the jump is a
    spike, and the one-sided difference on the other side is exact; a second pair of fresh
    directions must agree before a failure is reported.

Note [forward mode]
    The jvp along each direction the gradient check differenced (the shared float64
    reference's directions, reused with their finite differences, no new evaluation), with
    inputs and parameters as ``torch.autograd.forward_ad`` dual tensors, contracted with the
    same cotangents, must agree with the finite difference (central, or a one-sided one where
    the step crossed a kink) and with the reverse-mode <g, d> (within the same bound).
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
import zlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch
import torch.autograd.forward_ad as fwAD
from torch import nn
from torch.autograd.function import once_differentiable

from layercheck._sdk_internal import custom_functions, ratio
from layercheck.numerics.diagnosis import agreement, count_names, disagreement
from layercheck.numerics.engine import EPS64, FiniteDifferences
from layercheck.numerics.functions import Backprop, GradientFunction, LayerFunction
from layercheck.numerics.probes import Comparison, Probe
from layercheck.numerics.reference import Reference, float64_reference, fresh_copy, skip_if_not_differentiable
from layercheck.numerics.verdict import GRADIENT_TOLERANCE, judge
from layercheck.parent.registry import check
from layercheck.sdk import CheckFailed, CheckSkipped, Context, LayerRaised, Outputs, Tolerance

# Both checks are judged against the gradient check's float64 finite differences, so their
# prerequisites are the gradient check's and the gradient check itself: a wrong first
# gradient is reported once, there.
PREREQUISITES = ("forward_runs", "backward_runs", "backward_size", "gradients")

# Judged like the gradient check's float64 variant: a relative error of directional derivatives.
_FLOAT64 = Tolerance("float64", GRADIENT_TOLERANCE[torch.float64],
                     "relative error of directional derivatives against float64 finite differences")

# The code of the wrapper @once_differentiable puts around a backward: how a marked one is told apart.
_ONCE_DIFFERENTIABLE = once_differentiable(lambda ctx: None).__code__


def _marked_once_differentiable(backward: Any) -> bool:
    """Whether a backward is wrapped by @once_differentiable: its code is the wrapper's, or — on
    a torch that wraps it once more, or builds the wrapper another way — some function along its
    ``__wrapped__`` chain is a ``wrapper`` defined in the file that defines once_differentiable."""
    for _ in range(8):  # a chain of decorators, never a cycle
        code = getattr(backward, "__code__", None)
        if code is _ONCE_DIFFERENTIABLE or (code is not None and code.co_name == _ONCE_DIFFERENTIABLE.co_name
                                            and code.co_filename == _ONCE_DIFFERENTIABLE.co_filename):
            return True
        backward = getattr(backward, "__wrapped__", None)
        if backward is None:
            return False
    return False


def _reference(ctx: Context) -> Reference:
    ref = float64_reference(ctx)
    if not ref.fd.fn.names:
        raise CheckSkipped("the layer has no floating input and no learnable parameter: nothing takes a derivative")
    if ref.float64_failure is not None:
        raise CheckSkipped(f"the layer cannot run in float64 ({ref.float64_failure}): higher derivatives are "
                           "differenced in float64", applies=True)
    if ref.widened is not None:
        raise CheckSkipped("the float64 first gradients were judged with the layer's lower-precision casts kept in "
                           f"float64 ({ref.widened}): higher derivatives are not measured against such a reference",
                           applies=True)
    if ref.straight_through is not None:
        raise CheckSkipped("the float64 first gradients were judged with the values the layer detaches held "
                           "constant (a straight-through estimator): higher derivatives are not measured against "
                           "such a reference", applies=True)
    if not ref.verdict.passed:  # only when the gradient check was skipped on purpose (--skip gradients)
        why = f"the float64 first gradients disagree with finite differences ({ref.verdict.summary()})"
        if ctx.planned("gradients:float64"):
            raise CheckSkipped(f"{why}, as gradients[float64] reports: higher derivatives are measured against them",
                               applies=True)
        raise CheckFailed(f"{why}; gradients[float64], which did not run, says which tensor is wrong. Higher "
                          "derivatives are measured against the first ones, so they cannot be judged until then")
    return ref


# -- gradgrad -------------------------------------------------------------------------------------


@check(
    "gradgrad",
    title="second derivatives (double backward) agree with finite differences of the gradient",
    default=False,
    requires=PREREQUISITES,
    tolerances=(_FLOAT64,),
)
def gradgrad(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Differentiates the first gradient of a float64 copy a second time (``create_graph=True``,
    then backward through it: the double backward) and compares the result with central finite
    differences of the first gradient, along random directions over every input, parameter and
    incoming output gradient at once.

    Gradient penalties (WGAN-GP, R1), meta-learning (MAML), Hessian-vector products and
    second-order optimisers differentiate the backward itself; a backward that is not
    differentiable gives silently wrong second derivatives, or raises. A failure names the
    tensor whose second derivatives are wrong. A backward decorated with
    ``@once_differentiable``, or one whose second backward raises, fails this check: the
    layer cannot be differentiated twice, which is what this opt-in check establishes.
    Usual causes: ``.detach()``, ``.data``, ``torch.no_grad()`` or NumPy inside ``backward``;
    a saved tensor used through a detached copy; a second ``autograd.Function`` for the
    backward whose own backward is wrong. Fix: write ``backward`` with differentiable torch
    operations on ``ctx.saved_tensors`` (autograd then differentiates it), or give the
    backward's Function a correct backward of its own.
    """
    ref = _reference(ctx)
    subject = fresh_copy(ctx, torch.float64)
    fn = LayerFunction(subject, subject.inputs())
    kept = [w if differentiable else None for w, differentiable in zip(ref.run.cotangents, ref.run.differentiable)]
    first = GradientFunction(fn, kept, _contraction(ctx, ref))
    try:
        with skip_if_not_differentiable():
            hvp = first.gradient()
    except LayerRaised as exc:
        raise CheckFailed(f"the backward cannot be differentiated: the {exc.phase} (the first backward with "
                          "create_graph=True, then back-propagating through it) raised "
                          f"{type(exc.exc).__name__}: {_first_line(exc.exc)}", phase=exc.phase,
                          traceback=exc.trace) from exc
    if first.delayed:
        raise _once_differentiable(fn)
    fd = FiniteDifferences(first, [first.contraction], seed=ctx.seed, precision=ref.fd.precision)
    with skip_if_not_differentiable():
        verdict = judge(fd, hvp, ctx.tolerance(torch.float64))
    details: dict[str, Any] = {**verdict.to_dict(), "tensors": first.names, "evaluations": fd.evaluations}
    if verdict.passed:
        return f"double backward of {_tensors_and_cotangents(first.names)}: {agreement(verdict)}", details
    failure = disagreement(Reference(fd, Backprop(hvp, [], [], []), verdict),
                           "second derivatives (double backward)", details, derivative="second derivative")
    raise CheckFailed(f"{failure.message}. {_why_wrong(first, fn)}", **failure.details)


def _why_wrong(first: GradientFunction, fn: LayerFunction) -> str:
    if first.detached:
        return ("The first gradient does not require grad even with create_graph=True: the backward runs outside "
                "autograd (torch.no_grad, .detach(), .data, NumPy), so it has no derivative")
    functions = [cls.__name__ for cls in _functions_in_graph(fn)]
    if not functions:
        return "The layer has no hand-written backward: an operation's double-backward formula is wrong"
    return (f"Usual causes in the backward of {', '.join(functions)}: a tensor computed inside forward and saved with "
            "save_for_backward (forward records no graph, so the double backward treats it as a constant: save the "
            "inputs and recompute it in backward), .detach() or .data in backward, or a wrong backward of a Function "
            "that the backward calls")


def _tensors_and_cotangents(names: Sequence[str]) -> str:
    incoming = [n for n in names if n.startswith("grad_output")]
    return count_names(names) + (f", and through {', '.join(incoming)}" if incoming else "")


def _contraction(ctx: Context, ref: Reference) -> list[torch.Tensor]:
    """u: one seeded standard-normal tensor per input and parameter, scaled like the difference
    directions (by the tensor's largest magnitude), so every tensor weighs in by how much a
    relative change of it moves the layer."""
    gen = torch.Generator().manual_seed(zlib.crc32(f"{ctx.seed}|gradgrad|contraction".encode()))
    return [torch.randn(value.shape, generator=gen).to(torch.float64) * scale
            for value, scale in zip(ref.fd.fn.point, ref.fd.scales)]


def _once_differentiable(fn: LayerFunction) -> CheckFailed:
    marked = [cls.__name__ for cls in _functions_in_graph(fn)
              if _marked_once_differentiable(cls.backward)]
    if marked:
        why = (f"the backward of {', '.join(marked)} is decorated with @once_differentiable, so a double backward "
               "(gradient penalties, Hessian-vector products, torch.func.hessian) raises \"trying to differentiate "
               "twice a function that was marked with @once_differentiable\". Fix: drop the decorator and write the "
               "backward with differentiable torch operations on ctx.saved_tensors")
    else:
        why = ("the first gradient's graph holds a node that raises when it is differentiated (a library's Function "
               "marked @once_differentiable, or an operation without a double-backward formula), so a double backward "
               "(gradient penalties, Hessian-vector products, torch.func.hessian) raises")
    return CheckFailed(f"the backward cannot be differentiated: {why}, or leave gradgrad off for this layer",
                       once_differentiable=marked)


def _first_line(exc: BaseException) -> str:
    return str(exc).splitlines()[0] if str(exc) else ""


# -- forward_ad -----------------------------------------------------------------------------------


@check(
    "forward_ad",
    title="forward-mode derivatives (jvp) agree with finite differences and reverse mode",
    default=False,
    requires=PREREQUISITES,
    tolerances=(_FLOAT64,),
)
def forward_ad(ctx: Context) -> tuple[str, dict[str, Any]]:
    """Runs the training forward of a float64 copy with every floating input and learnable
    parameter as a ``torch.autograd.forward_ad`` dual tensor, tangent along the random
    directions the gradient check differenced, and compares the resulting directional
    derivative (contracted with the same seeded output cotangents) with those finite
    differences and with the reverse-mode gradient along the same direction.

    ``torch.func.jvp``, ``jacfwd``, ``hessian`` (forward-over-reverse) and forward-mode AD use
    this path; a wrong one gives wrong results without an error. A
    ``torch.autograd.Function`` without a ``jvp`` staticmethod cannot run in forward mode at
    all and fails with that message. A failure names the tensor whose tangent is handled wrongly.
    Fix: give every Function a ``jvp(ctx, *tangents)`` that returns the derivative of its
    outputs along the input tangents, including the parameters' tangents, saving what it needs
    with ``ctx.save_for_forward`` (the bundled SReLU and PReLU show how).
    """
    ref = _reference(ctx)
    subject = fresh_copy(ctx, torch.float64)
    fn = LayerFunction(subject, subject.inputs())
    tolerance = ctx.tolerance(torch.float64)
    rows: list[dict[str, Any]] = []
    bad: list[tuple[Comparison, Comparison, list[float]]] = []
    for judged in ref.verdict.comparisons:
        # the gradient check's comparison, held to this check's tolerance (its noise allowance kept)
        reverse = dataclasses.replace(judged, bound=judged.bound + (tolerance - ref.verdict.tolerance) * judged.spread)
        per_output = _forward_derivatives(fn, ref.fd.directions(reverse.probe), ref.run.cotangents)
        forward = dataclasses.replace(reverse, analytic=sum(per_output))
        gap = abs(forward.analytic - reverse.analytic)
        rows.append({"draw": reverse.probe.draw, "jvp": forward.analytic, "reverse": reverse.analytic,
                     "numeric": reverse.numeric, "one_sided": list(reverse.one_sided),
                     "relative_error": forward.relative_error, "relative_to_reverse": ratio(gap, reverse.spread),
                     "kink_crossed": forward.kink_crossed})
        if not forward.agrees or gap > reverse.bound:
            bad.append((reverse, forward, per_output))
    worst = max(rows, key=lambda r: max(r["relative_error"], r["relative_to_reverse"]))
    details: dict[str, Any] = {"tolerance": tolerance, "directions": rows, "tensors": fn.names}
    if not bad:
        return (f"jvp of {count_names(fn.names)} along {len(rows)} random directions agrees with float64 finite "
                f"differences and with reverse mode (largest relative error {worst['relative_error']:.1e}, "
                f"{worst['relative_to_reverse']:.1e} to reverse mode; tolerance {tolerance:g})", details)
    raise _wrong_jvp(ref, fn, bad, details, tolerance)


def _wrong_jvp(ref: Reference, fn: LayerFunction, bad: list[tuple[Comparison, Comparison, list[float]]],
               details: dict[str, Any], tolerance: float) -> CheckFailed:
    reverse, forward, per_output = bad[0]
    to_reverse = ratio(abs(forward.analytic - reverse.analytic), reverse.spread)
    overall = (f"Along a random direction over every input and parameter the forward-mode derivative (jvp) gives "
               f"{forward.analytic:.9g}, float64 finite differences {reverse.numeric:.9g} and reverse mode (the "
               f"gradient) {reverse.analytic:.9g}: the jvp is off by {forward.relative_error:.2g} × the derivative's "
               f"size from the differences and {to_reverse:.2g} × from reverse mode, over the tolerance {tolerance:g}")
    wrong, right = _wrong_tangents(ref, fn, reverse.probe, tolerance)
    if wrong:
        lines = ["wrong jvp of " + " | ".join(
            f"{w['tensor']}: along its part of the direction the jvp gives {w['jvp']:.6g}, reverse mode "
            f"{w['reverse']:.6g}" for w in wrong), overall]
    else:
        lines = [f"wrong jvp: {overall[0].lower()}{overall[1:]}", "no single tensor stands out"]
    outputs = _wrong_output_tangents(ref, reverse, per_output, tolerance)
    if outputs:
        lines.append("through " + " | ".join(outputs))
    if right:
        lines.append(f"agree: {', '.join(right)}")
    return CheckFailed(". ".join(lines), **details, wrong=wrong, agree=right, wrong_outputs=outputs)


def _wrong_tangents(ref: Reference, fn: LayerFunction, probe: Probe,
                    tolerance: float) -> tuple[list[dict[str, Any]], list[str]]:
    """Each tensor on its own: the jvp along its part of the direction against reverse mode
    (vouched for by the gradient check), which costs one forward each and no difference."""
    wrong: list[dict[str, Any]] = []
    right: list[str] = []
    total = ref.fd.spread(probe, ref.run.grads)
    for slot, name in enumerate(fn.names):
        own = Probe(probe.draw, probe.step, slot=slot)
        directions = ref.fd.directions(own)
        jvp = sum(_forward_derivatives(fn, directions, ref.run.cotangents))
        reverse = sum(float((g.to(torch.float64) * u).sum())
                      for g, u in zip(ref.run.grads, directions) if g is not None and u is not None)
        spread = ref.fd.spread(own, ref.run.grads)
        # Both sides are analytic: they differ by rounding only, far below the tolerance; the
        # floor keeps a tensor whose gradient is zero here from failing on rounding.
        if abs(jvp - reverse) > tolerance * spread + 1e3 * EPS64 * total:
            wrong.append({"tensor": name, "jvp": jvp, "reverse": reverse, "spread": spread})
        else:
            right.append(name)
    return wrong, right


def _wrong_output_tangents(ref: Reference, reverse: Comparison, per_output: list[float],
                           tolerance: float) -> list[str]:
    """With several floating outputs: which output's tangent disagrees with its own differences
    (read from the evaluations already made)."""
    if len(per_output) < 2:
        return []
    wrong = []
    for k, jvp in enumerate(per_output):
        with skip_if_not_differentiable():
            numeric = ref.fd.compare(reverse.probe, ref.run.grads, tolerance, outputs=[k], spread=reverse.spread)
        own = dataclasses.replace(numeric, analytic=jvp)
        if not own.agrees:
            wrong.append(f"output {k} (jvp {jvp:.9g} vs numeric {own.numeric:.9g})")
    return wrong


def _forward_derivatives(fn: LayerFunction, tangents: Sequence[torch.Tensor | None],
                         cotangents: Sequence[torch.Tensor | None]) -> list[float]:
    """<w_k, jvp of output k> for every floating output, the inputs and parameters dual along
    ``tangents`` (one per slot; None leaves a tensor without tangent). Every call starts from
    the same state and random stream, like the differences."""
    fn.subject.rewind(fn.state)
    inputs = list(fn.inputs)
    offset = len(fn.input_slots)
    try:
        with warnings.catch_warnings(), fwAD.dual_level():
            # torch scripts its jvp decompositions on first use and warns that torch.jit.script
            # is deprecated: torch's own affair, not the layer's, so keep it out of the user's output
            warnings.filterwarnings("ignore", message=".*torch.jit.script.*", category=DeprecationWarning)
            for slot, index in enumerate(fn.input_slots):
                if tangents[slot] is not None:
                    # a copy: the dual shares its primal's memory, and the point may be the
                    # inputs every check is given (Target.inputs(share=True)), which a layer
                    # that writes into its input would change
                    inputs[index] = fwAD.make_dual(fn.point[slot].clone(), tangents[slot])
            duals = {id(p): fwAD.make_dual(p.detach(), _tangent_of(p, u))
                     for (_, p), u in zip(fn.parameters, tangents[offset:]) if u is not None}
            with _parameters_replaced(fn.subject.module, duals):
                outputs = Outputs.of(fn.subject.forward(inputs)).floating
            result = []
            for y, w in zip(outputs, cotangents):
                tangent = fwAD.unpack_dual(y).tangent
                result.append(0.0 if tangent is None or w is None
                              else float((tangent.detach().to(torch.float64) * w.to(torch.float64)).sum()))
            return result
    except LayerRaised as exc:
        raise _no_forward_mode(exc, fn) from exc
    finally:
        fn.subject.rewind(fn.state)


def _tangent_of(p: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The tangent of parameter ``p`` along ``u``, its part of a difference direction: for a
    complex parameter (a Fourier layer's weights), differenced as its real and imaginary parts,
    the complex tensor of those parts."""
    return torch.view_as_complex(u.to(p.real.dtype).contiguous()) if p.is_complex() else u


@contextlib.contextmanager
def _parameters_replaced(module: nn.Module | None, values: dict[int, torch.Tensor]) -> Iterator[None]:
    """Every attribute holding one of the parameters (by id; tied ones under each name) set to
    its replacement, as torch's forward-AD tutorial does (``delattr`` then ``setattr``, so that
    modules that cache their weights, like ``nn.LSTM``'s flat weights, see the change), and put
    back afterwards."""
    replaced = []
    try:
        if module is not None and values:
            for name, p in list(module.named_parameters(remove_duplicate=False)):
                if id(p) not in values:
                    continue
                prefix, _, attr = name.rpartition(".")
                owner = module.get_submodule(prefix) if prefix else module
                delattr(owner, attr)
                setattr(owner, attr, values[id(p)])
                replaced.append((owner, attr, p))
        yield
    finally:
        for owner, attr, p in reversed(replaced):
            delattr(owner, attr)
            setattr(owner, attr, p)


def _no_forward_mode(exc: LayerRaised, fn: LayerFunction) -> CheckFailed:
    missing = [cls.__name__ for cls in _functions_in_graph(fn) if cls.jvp is torch.autograd.Function.jvp]
    message = (f"the training forward with dual (forward-mode AD) inputs and parameters raised "
               f"{type(exc.exc).__name__}: {_first_line(exc.exc)}")
    if missing:
        message = (f"{', '.join(missing)} (torch.autograd.Function) needs a jvp: it defines no jvp staticmethod, so "
                   "forward-mode AD (torch.func.jvp, jacfwd, torch.autograd.forward_ad) raises "
                   f"{type(exc.exc).__name__} on the layer. Fix: add @staticmethod jvp(ctx, *input_tangents) returning "
                   "the output tangent(s), saving what it needs in forward with ctx.save_for_forward, or leave "
                   "forward_ad off for this layer")
    return CheckFailed(message, phase=exc.phase, traceback=exc.trace, functions_without_jvp=missing)


def _functions_in_graph(fn: LayerFunction) -> list[type[torch.autograd.Function]]:
    """The user's autograd.Function classes the layer calls (the subject itself for an
    operation), found from the graph of one ordinary training forward."""
    try:
        outputs, _ = fn.call()
        return custom_functions(outputs)
    except LayerRaised:
        return []
    finally:
        fn.reset()
