"""Reference runs shared between checks, and the comparisons they are judged by.

One predict and one forward+backward of a fresh float32 layer on the generated inputs are
computed once per target (``ctx.shared``) and read by every check that needs them: the
dtype, state, observation, determinism, finiteness, layout and device checks compare
against the same outputs instead of recomputing them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from layercheck.compare import assert_close_all, describe_shapes, mismatch
from layercheck.errors import CheckFailed, LayerRaised
from layercheck.runner import Context
from layercheck.subject import Outputs, Subject, seeded, user_trace

# Relative tolerance for the same math computed along another path: batched against single
# observations, strided against contiguous inputs, an accelerator against the CPU. The
# summation order may differ (blocked matmul, another convolution algorithm), so a few
# hundred units of rounding are allowed, not one. The absolute part scales with the
# tensor's largest magnitude (see assert_path_close).
PATH_RTOL = {
    torch.float16: 1e-2,
    torch.bfloat16: 5e-2,
    torch.float32: 1e-4,
    torch.float64: 1e-10,
}


@dataclass(frozen=True)
class Run:
    """One call of a layer: its tensor outputs, the gradients (forward runs only, in the
    order of :func:`gradient_targets`), its state afterwards (detached copies), the
    buffers that were left attached to the autograd graph, and how the call changed its
    inputs (None: unchanged, or not watched)."""

    outputs: list[torch.Tensor]
    grads: list[tuple[str, torch.Tensor | None]]
    state: dict[str, torch.Tensor | None]
    attached: tuple[str, ...] = ()
    input_change: str | None = None


def predict_run(subject: Subject, inputs: Sequence[torch.Tensor] | None = None, *,
                rng_seed: int | None = None, watch_inputs: bool = False) -> Run:
    """Predict once (eval, no grad) and record outputs and state (and, with
    ``watch_inputs``, whether the generated inputs were changed)."""
    inputs = subject.inputs() if inputs is None else inputs
    outputs = Outputs.of(subject.predict(inputs, rng_seed=rng_seed)).tensors
    change = input_change(subject.inputs(), inputs) if watch_inputs else None
    return Run([t.detach() for t in outputs], [], subject.snapshot(), _attached(subject), change)


def forward_run(ctx: Context, subject: Subject, inputs: Sequence[torch.Tensor] | None = None, *,
                rng_seed: int | None = None, backward: bool = True, watch_inputs: bool = False) -> Run:
    """Run the training forward on inputs that require grad, back-propagate seeded
    cotangents (see :func:`cotangents`) and record outputs, gradients and state (and,
    with ``watch_inputs``, whether the generated inputs were changed)."""
    inputs = subject.inputs(requires_grad=True) if inputs is None else inputs
    outputs = Outputs.of(subject.forward(inputs, rng_seed=rng_seed)).tensors
    state, attached = subject.snapshot(), _attached(subject)
    change = input_change(subject.inputs(), inputs) if watch_inputs else None
    grads = gradients(ctx, subject, inputs, outputs) if backward else []
    return Run([t.detach() for t in outputs], grads, state, attached, change)


def input_change(originals: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> str | None:
    """How a call changed the inputs it was given (size, strides or values), or None."""
    for i, (old, new) in enumerate(zip(originals, inputs)):
        if new.shape != old.shape or new.stride() != old.stride():
            return (f"input {i}: size {tuple(old.shape)} (strides {old.stride()}) became {tuple(new.shape)} "
                    f"(strides {new.stride()}), an in-place reshape (unsqueeze_, t_, resize_)")
        if not torch.equal(old, new.detach()):
            found = mismatch(old, new, rtol=0.0, atol=0.0)
            if found is not None:
                return (f"input {i}: at index {tuple(found['index'])} {found['expected']:.6g} became "
                        f"{found['actual']:.6g} ({found['mismatched']} of {found['elements']} elements changed)")
    return None


def _attached(subject: Subject) -> tuple[str, ...]:
    return tuple(name for name, t in subject.buffers().items() if t is not None and t.requires_grad)


def gradient_targets(subject: Subject, inputs: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """What gradients are taken of: inputs that require grad, then learnable parameters."""
    named = [(f"input {i}", x) for i, x in enumerate(inputs) if x.requires_grad]
    return named + [(f"parameter {name}", p) for name, p in subject.parameters()]


def gradients(ctx: Context, subject: Subject, inputs: Sequence[torch.Tensor],
              outputs: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor | None]]:
    """The gradients of every input and learnable parameter for seeded cotangents; None
    where a tensor does not influence the outputs. Raises LayerRaised("backward")."""
    wanted = gradient_targets(subject, inputs)
    differentiable = [t for t in outputs if t.requires_grad]
    if not wanted or not differentiable:
        return [(name, None) for name, _ in wanted]
    with seeded(subject.target.seed, subject.device):
        try:
            found = torch.autograd.grad(differentiable, [t for _, t in wanted], cotangents(ctx, differentiable),
                                        allow_unused=True)
        except Exception as exc:
            raise LayerRaised("backward", exc, user_trace(exc)) from exc
    return [(name, None if g is None else g.detach()) for (name, _), g in zip(wanted, found)]


def cotangents(ctx: Context, outputs: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Seeded standard-normal output gradients, the same values for every dtype and device
    (drawn once per target and output size)."""
    result = []
    for i, out in enumerate(outputs):
        if out.device.type == "meta":
            result.append(torch.ones_like(out))  # no values on meta: only shapes matter there
            continue

        def draw(i: int = i, shape: tuple[int, ...] = tuple(out.shape)) -> torch.Tensor:
            gen = torch.Generator().manual_seed(ctx.seed * 1_000_003 + 7_919 * (i + 1))
            return torch.randn(shape, generator=gen, dtype=torch.float64)

        values = ctx.shared(("cotangent", i, tuple(out.shape)), draw)
        result.append(values.to(out.device, out.dtype))
    return result


# -- shared between checks (computed once per target) ----------------------------------------


def reference_predict(ctx: Context, *, rng_seed: int | None = None) -> Run:
    """Predict of a fresh layer on the generated inputs (random stream ``rng_seed``)."""
    seed = ctx.seed if rng_seed is None else rng_seed
    return ctx.shared(("reference_predict", seed),
                      lambda: predict_run(ctx.fresh(), rng_seed=seed, watch_inputs=seed == ctx.seed))


def reference_forward(ctx: Context) -> Run:
    """Training forward and backward of a fresh layer on the generated inputs."""
    return ctx.shared("reference_forward", lambda: forward_run(ctx, ctx.fresh(), watch_inputs=True))


def predict_is_random(ctx: Context) -> bool:
    """Whether two identical copies predict differently when their random streams differ."""
    a = reference_predict(ctx)
    b = reference_predict(ctx, rng_seed=ctx.seed + 1)
    return not identical(a.outputs, b.outputs)


def forward_is_random(ctx: Context) -> bool:
    """Whether the training forward depends on the random stream (dropout-like): its value
    then depends on how the random numbers are laid out, so only sizes can be compared."""

    def compute() -> bool:
        other = forward_run(ctx, ctx.fresh(), rng_seed=ctx.seed + 1, backward=False)
        return not identical(reference_forward(ctx).outputs, other.outputs)

    return bool(ctx.shared("forward_is_random", compute))


# -- comparing -------------------------------------------------------------------------------


def identical(a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]) -> bool:
    """Bit-identical tensors (NaN equal to NaN), same sizes and dtypes."""
    return len(a) == len(b) and all(
        x.shape == y.shape and x.dtype == y.dtype
        and (torch.equal(x, y) or bool(((x == y) | (x != x) & (y != y)).all()))  # equal() is one fast pass
        for x, y in zip(a, b)
    )


def path_tolerance(ctx: Context, expected: torch.Tensor) -> tuple[float, float]:
    """(rtol, atol) for the same math along another path. atol is rtol times the tensor's
    largest finite magnitude: an element near zero (cancellation in a sum) is judged
    against the scale of its tensor, not against its own tiny value."""
    if not expected.is_floating_point():
        return 0.0, 0.0
    rtol = ctx.tolerance(expected.dtype, PATH_RTOL.get(expected.dtype, 1e-4))
    values = expected.detach()
    scale = 0.0
    if values.numel():
        low, high = torch.aminmax(values)  # one pass, no temporary
        scale = max(-float(low), float(high))
        if not math.isfinite(scale):
            scale = float(torch.nan_to_num(values.abs(), nan=0.0, posinf=0.0).max())
    return rtol, rtol * max(scale, 1e-30)


Tolerance = Callable[[torch.Tensor], tuple[float, float]]


def assert_path_close(ctx: Context, expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor], *,
                      what: str, names: Sequence[str] | None = None, labels: tuple[str, str] = ("expected", "got"),
                      tolerance: Tolerance | None = None) -> None:
    """Raise CheckFailed at the first pair that differs in size, dtype or value beyond
    ``tolerance(expected tensor)`` (:func:`path_tolerance` by default); ``labels`` name the
    two sides in messages."""
    want, have = labels
    if len(expected) != len(actual):
        raise CheckFailed(f"{what}: {want} gives {len(expected)} tensor(s), {have} {len(actual)}",
                          expected=describe_shapes(expected), actual=describe_shapes(actual))
    for i, (e, a) in enumerate(zip(expected, actual)):
        name = names[i] if names else f"output {i}"
        rtol_atol = tolerance(e) if tolerance is not None else path_tolerance(ctx, e)
        assert_close_all([e], [a], what=what, names=[name], tolerance=rtol_atol, labels=labels)


def assert_same_unless_random(ctx: Context, expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor], *,
                              random: Callable[[], bool], what: str, names: Sequence[str],
                              labels: tuple[str, str] = ("expected", "got"), tolerance: Tolerance | None = None) -> bool:
    """:func:`assert_path_close`, except that values may differ when ``random()`` says the
    layer draws random numbers (then only sizes and dtypes must agree). ``random`` is asked
    only when values differ, so a deterministic layer never pays for it. Returns whether
    values were compared."""
    try:
        assert_path_close(ctx, expected, actual, what=what, names=names, labels=labels, tolerance=tolerance)
        return True
    except CheckFailed:
        if not random():
            raise
    if [(e.shape, e.dtype) for e in expected] != [(a.shape, a.dtype) for a in actual]:
        raise CheckFailed(f"{what}: sizes or dtypes differ", expected=describe_shapes(expected),
                          actual=describe_shapes(actual))
    return False


def all_finite(t: torch.Tensor) -> bool:
    """Whether every element is finite. A finite sum proves it in one pass (NaN and infinity
    propagate); an overflowing sum of finite values falls back to the element-wise test."""
    if not (t.is_floating_point() or t.is_complex()) or t.numel() == 0:
        return True
    return bool(torch.isfinite(t.sum())) or bool(torch.isfinite(t).all())


def nonfinite(t: torch.Tensor, *, ignore: torch.Tensor | None = None) -> str | None:
    """"N non-finite value(s) of M, the first at index I: V" (outside ``ignore``), or None."""
    if all_finite(t):
        return None
    bad = ~torch.isfinite(t)
    if ignore is not None:
        bad &= ~ignore
    if not bool(bad.any()):
        return None
    first = tuple(int(i) for i in bad.nonzero()[0])
    return f"{int(bad.sum())} non-finite value(s) of {t.numel()}, the first at index {first}: {t[first].item()}"


def comparable(run: Run, other: Run) -> tuple[list[str], list[torch.Tensor], list[torch.Tensor]]:
    """Names and values, in ``run`` and in ``other``, of the outputs, then the gradients and
    buffers both runs have."""
    names, mine, theirs = output_names(run.outputs), list(run.outputs), list(other.outputs)
    grads = dict(other.grads)
    for name, grad in run.grads:
        if grad is not None and grads.get(name) is not None:
            names.append(f"gradient of {name}")
            mine.append(grad)
            theirs.append(grads[name])  # type: ignore[arg-type]
    for name, value in run.state.items():
        if value is not None and other.state.get(name) is not None and value.shape == other.state[name].shape:
            names.append(f"state {name!r}")
            mine.append(value)
            theirs.append(other.state[name])  # type: ignore[arg-type]
    return names, mine, theirs


def present_grads(run: Run) -> tuple[list[str], list[torch.Tensor]]:
    """Names and values of the gradients a run produced (tensors that influence no output
    have none)."""
    pairs = [(name, g) for name, g in run.grads if g is not None]
    return [f"gradient of {name}" for name, _ in pairs], [g for _, g in pairs]


def output_names(outputs: Sequence[torch.Tensor], prefix: str = "") -> list[str]:
    return [f"{prefix}output {i}" for i in range(len(outputs))]
