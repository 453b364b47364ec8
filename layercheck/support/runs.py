"""Runs of the layer that checks share, and the comparisons they are judged by.

One predict and one forward+backward of a fresh float32 layer on the generated inputs are
computed once per target (``ctx.shared``) and read by every check that declares them
(``@check(uses=(PREDICT, FORWARD))``): the dtype, state, observation, determinism,
finiteness, layout and device checks compare against the same outputs instead of
recomputing them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from layercheck.parent.errors import CheckFailed
from layercheck.parent.registry import SharedRun, Tolerance, get, readers_of
from layercheck.support.compare import (
    ROUNDING,
    Allowance,
    AllowanceFor,
    assert_close,
    describe_shapes,
    dtype_name,
    identical,
    mismatch,
    rounding_allowance,
)
from layercheck.support.context import Context
from layercheck.target.calling import backpropagate
from layercheck.target.seeding import seeded, standard_normal
from layercheck.target.subject import Checkpoint, Subject
from layercheck.target.tensors import Outputs

REQUIRES_GRAD_SWITCHED = "given without requires_grad, it requires grad after the call"
"""How :func:`input_change` names an input whose gradient the layer switched on."""

PREDICT = SharedRun("predict", ("predict_runs",))
"""Predict (eval, no grad) of a fresh float32 layer on the generated inputs."""
FORWARD = SharedRun("forward and backward", ("forward_runs", "backward_runs"))
"""The training forward and a backward with seeded output gradients of a fresh float32 layer."""

# Relative tolerance for the same math computed along another path: batched against single
# observations, strided against contiguous inputs, an accelerator against the CPU. The
# summation order may differ (blocked matmul, another convolution algorithm), so a few
# hundred units of rounding are allowed, not one. The absolute part scales with the
# tensor's largest magnitude (compare.scaled_allowance).
PATH_RTOL = {
    "float16": 1e-2,
    "bfloat16": 5e-2,
    "float32": 1e-4,
    "float64": 1e-10,
}


def path_tolerances(bounds: str) -> tuple[Tolerance, ...]:
    """The declaration of a check that compares the same math along another path (one per dtype)."""
    return tuple(Tolerance(dtype, rtol, bounds) for dtype, rtol in PATH_RTOL.items())


def rounding_tolerances(bounds: str) -> tuple[Tolerance, ...]:
    """The declaration of a check that compares the same computation done twice: torch.testing's
    relative tolerances (compare.ROUNDING), one per dtype."""
    return tuple(Tolerance(dtype_name(dtype), rtol, bounds) for dtype, (rtol, _) in ROUNDING.items())

@dataclass(frozen=True)
class Run:
    """One call of a layer: its tensor outputs, the gradients (forward runs only, in the
    order of :func:`gradient_targets`), its state afterwards (detached copies), the
    buffers that were left requiring grad (attached to the autograd graph, or made leaves
    that require grad), and how the call changed its inputs (None: unchanged, or not watched)."""

    outputs: list[torch.Tensor]
    grads: list[tuple[str, torch.Tensor | None]]
    state: dict[str, torch.Tensor | None]
    attached: tuple[str, ...] = ()
    input_change: str | None = None
    leaves: tuple[str, ...] = ()  # of those, the ones no graph is attached to (requires_grad_() on a buffer)


def predict_run(subject: Subject, inputs: Sequence[torch.Tensor] | None = None, *,
                rng_seed: int | None = None, watch_inputs: bool = False) -> Run:
    """Predict once (eval, no grad) and record outputs and state (and, with
    ``watch_inputs``, whether the generated inputs were changed)."""
    inputs = subject.inputs() if inputs is None else inputs
    return predicted(subject, Outputs.of(subject.predict(inputs, rng_seed=rng_seed)).tensors, watch_inputs=watch_inputs)


def predicted(subject: Subject, outputs: Sequence[torch.Tensor], *, watch_inputs: bool = False) -> Run:
    """The record of a predict call the subject just made, which returned ``outputs``."""
    change = input_change(subject.inputs(), subject.fed) if watch_inputs else None
    attached, leaves = _attached(subject)
    return Run([t.detach() for t in outputs], [], subject.snapshot(), attached, change, leaves)


def forward_run(ctx: Context, subject: Subject, inputs: Sequence[torch.Tensor] | None = None, *,
                rng_seed: int | None = None, backward: bool = True, watch_inputs: bool = False) -> Run:
    """Run the training forward on inputs that require grad, back-propagate seeded
    cotangents (see :func:`cotangents`) and record outputs, gradients and state (and,
    with ``watch_inputs``, whether the generated inputs were changed)."""
    inputs = subject.inputs(requires_grad=True) if inputs is None else inputs
    outputs = Outputs.of(subject.forward(inputs, rng_seed=rng_seed)).tensors
    state, (attached, leaves) = subject.snapshot(), _attached(subject)
    change = input_change(subject.inputs(), subject.fed) if watch_inputs else None
    values = [t.detach().clone() for t in outputs]  # before backward, which may write into a saved output
    grads = gradients(ctx, subject, inputs, outputs) if backward else []
    return Run(values, grads, state, attached, change, leaves)


def input_change(originals: Sequence[torch.Tensor], inputs: Sequence[torch.Tensor]) -> str | None:
    """How a call changed the inputs it was given (size, strides, values, or a gradient switched
    on), or None."""
    for i, (old, new) in enumerate(zip(originals, inputs)):
        if new.shape != old.shape or new.stride() != old.stride():
            return (f"input {i}: size {tuple(old.shape)} (strides {old.stride()}) became {tuple(new.shape)} "
                    f"(strides {new.stride()}), an in-place reshape (unsqueeze_, t_, resize_)")
        if new.requires_grad and new.is_leaf and not old.requires_grad:
            # x.requires_grad_() on the caller's tensor (to take a gradient inside forward): the
            # caller's own in-place writes to it then raise, and every backward fills its .grad
            return (f"input {i}: {REQUIRES_GRAD_SWITCHED}: the layer called requires_grad_() on the caller's "
                    "tensor (to take a gradient inside forward?), so the caller's in-place writes to it now raise "
                    "(a leaf that requires grad) and backward fills its .grad. Fix: take the gradient of a copy, "
                    "x = x.detach().requires_grad_() where x does not require grad")
        if not torch.equal(old, new.detach()):
            found = mismatch(old, new, Allowance(0.0, 0.0))
            if found is not None:
                return (f"input {i}: at index {tuple(found['index'])} {found['expected']:.6g} became "
                        f"{found['actual']:.6g} ({found['mismatched']} of {found['elements']} elements changed)")
    return None


def _attached(subject: Subject) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The buffers that require grad, and those of them that are leaves."""
    found = [(name, t) for name, t in subject.buffers().items() if t is not None and t.requires_grad]
    return tuple(name for name, _ in found), tuple(name for name, t in found if t.grad_fn is None)


def gradient_targets(subject: Subject, inputs: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    """What gradients are taken of: inputs that require grad, then learnable parameters."""
    named = [(f"input {i}", x) for i, x in enumerate(inputs) if x.requires_grad]
    return named + [(f"parameter {name!r}", p) for name, p in subject.parameters()]


def gradients(ctx: Context, subject: Subject, inputs: Sequence[torch.Tensor],
              outputs: Sequence[torch.Tensor]) -> list[tuple[str, torch.Tensor | None]]:
    """The gradients of every input and learnable parameter for seeded cotangents; None
    where a tensor does not influence the outputs. Raises LayerRaised("backward")."""
    wanted = gradient_targets(subject, inputs)
    differentiable = [t for t in outputs if t.requires_grad]
    if not wanted or not differentiable:
        return [(name, None) for name, _ in wanted]
    with seeded(subject.target.seed, subject.device):
        found = backpropagate(list(zip(differentiable, cotangents(ctx, differentiable))), [t for _, t in wanted])
    return [(name, g) for (name, _), g in zip(wanted, found)]


def cotangents(ctx: Context, outputs: Sequence[torch.Tensor], *, copy: bool = True) -> list[torch.Tensor]:
    """Seeded standard-normal output gradients, the same values for every dtype and device
    (drawn once per target and output size). Copies, which a backward may change; with
    ``copy=False`` the float64 ones on the CPU are the values every check's are copied from,
    to be read only (a LayerFunction copies what it hands to a backward)."""
    result = []
    for i, out in enumerate(outputs):
        if out.device.type == "meta":
            result.append(torch.ones_like(out))  # no values on meta: only shapes matter there
            continue

        def draw(i: int = i, shape: tuple[int, ...] = tuple(out.shape)) -> torch.Tensor:
            return standard_normal(shape, ctx.seed * 1_000_003 + 7_919 * (i + 1))

        values = ctx.shared(("cotangent", i, tuple(out.shape)), draw)
        result.append(values.to(out.device, out.dtype, copy=copy))  # a backward may change it in place
    return result


# -- shared between checks (computed once per target) ----------------------------------------


def reference_predict(ctx: Context, *, rng_seed: int | None = None) -> Run:
    """Predict of a fresh layer on the generated inputs (random stream ``rng_seed``)."""
    ctx.use(PREDICT)
    seed = ctx.seed if rng_seed is None else rng_seed
    return ctx.shared(("reference_predict", seed),
                      lambda: predict_run(ctx.fresh(), rng_seed=seed, watch_inputs=seed == ctx.seed),
                      readers=readers_of(PREDICT))


def share_predict(ctx: Context, subject: Subject, outputs: Sequence[torch.Tensor]) -> None:
    """Keep a predict of a fresh layer on the generated inputs with the target's random stream,
    which ``subject`` just made (predict_runs), as the shared predict run: it is that run."""
    ctx.shared(("reference_predict", ctx.seed), lambda: predicted(subject, outputs, watch_inputs=True),
               readers=readers_of(PREDICT))


# Note [the layout's first batch]
#     predict_runs calls predict on a fresh layer and the generated inputs; observations begins
#     with the very same call (a fresh layer from the same constructor call, initialisation and
#     seed, the same inputs, predict mode, the target's random stream) and goes on calling that
#     layer (Note [the second batch] in checks/batching.py). So where observations runs,
#     predict_runs leaves it the layer, its state before the call and the call's outputs, and
#     observations takes them instead of making the call again: one full-size forward fewer.
#     It is a hand-over, not a cache of a run deemed identical: the same object after the same
#     call, whatever the layer does from call to call (a random predict, a counter, a cache), so
#     what observations sees is what it saw making the call itself. A check run without
#     predict_runs before it in this process (a record from an earlier worker) makes the call.
FIRST_BATCH = "first_batch"
_FIRST_BATCH_READERS = ("observations",)


@dataclass(frozen=True)
class FirstBatch:
    """A fresh layer after predict_runs' call (Note [the layout's first batch]): its state before
    the call, and the call's outputs."""

    subject: Subject
    initial: Checkpoint
    outputs: list[torch.Tensor]


def first_batch_checkpoint(ctx: Context, subject: Subject) -> Checkpoint | None:
    """The fresh layer's state before predict_runs calls it, where a check will take the layer
    after the call (Note [the layout's first batch]); None where none runs or applies."""
    taken = any(ctx.planned(reader) and get(reader).skip_reason(ctx.target) is None for reader in _FIRST_BATCH_READERS)
    return subject.checkpoint() if taken else None


def hand_over_first_batch(ctx: Context, subject: Subject, initial: Checkpoint | None,
                          outputs: Sequence[torch.Tensor]) -> None:
    """Leave the layer predict_runs called for the check that goes on calling it."""
    if initial is not None:
        ctx.shared(FIRST_BATCH, lambda: FirstBatch(subject, initial, [t.detach() for t in outputs]),
                   readers=_FIRST_BATCH_READERS)


def reference_forward(ctx: Context) -> Run:
    """Training forward and backward of a fresh layer on the generated inputs."""
    ctx.use(FORWARD)
    return ctx.shared("reference_forward", lambda: forward_run(ctx, ctx.fresh(), watch_inputs=True),
                      readers=readers_of(FORWARD))


def layer_is_float32(ctx: Context) -> bool:
    """Whether the layer's floating parameters and buffers are float32 already (an operation
    has none): a float32 copy of it (``ctx.fresh(torch.float32)``) is then the layer itself."""
    layer = ctx.target.pristine()
    if layer is None:
        return True
    return all(t.dtype == torch.float32 for t in [*layer.parameters(), *layer.buffers()] if t.is_floating_point())


def predict_is_random(ctx: Context) -> bool:
    """Whether two identical copies predict differently when their random streams differ."""
    a = reference_predict(ctx)
    b = reference_predict(ctx, rng_seed=ctx.seed + 1)
    return not identical(a.outputs, b.outputs)


def forward_is_random(ctx: Context) -> bool:
    """Whether the training forward depends on the random stream (dropout-like): its value
    then depends on how the random numbers are laid out, so only sizes can be compared."""

    def compute() -> bool:
        subject = ctx.fresh()
        other = forward_run(ctx, subject, rng_seed=ctx.seed + 1, backward=False)
        # draws that happen to agree under both seeds (stochastic depth keeping every row) are random too
        return subject.drew_random or not identical(reference_forward(ctx).outputs, other.outputs)

    return bool(ctx.shared("forward_is_random", compute))


# -- comparing -------------------------------------------------------------------------------


def rounding_allowance_of(ctx: Context) -> AllowanceFor:
    """The allowance of a check that compares the same computation done twice: its declared
    (or overridden) relative tolerance for the tensor's dtype and torch.testing's absolute one."""

    def allowance(name: str, expected: torch.Tensor) -> Allowance:
        if not expected.is_floating_point():
            return Allowance(0.0, 0.0)
        return Allowance(ctx.tolerance(expected.dtype), rounding_allowance(expected.dtype).atol)

    return allowance


def assert_same_unless_random(expected: Sequence[torch.Tensor], actual: Sequence[torch.Tensor], *,
                              random: Callable[[], bool], what: str, names: Sequence[str],
                              allowance: Allowance | AllowanceFor, labels: tuple[str, str] = ("expected", "got"),
                              ) -> bool:
    """:func:`~layercheck.support.compare.assert_close`, except that values may differ when ``random()``
    says the layer draws random numbers (then only sizes and dtypes must agree). ``random`` is
    asked only when values differ, so a deterministic layer never pays for it. Returns whether
    values were compared."""
    try:
        assert_close(expected, actual, what=what, names=names, labels=labels, allowance=allowance)
        return True
    except CheckFailed:
        if not random():
            raise
    if [(e.shape, e.dtype) for e in expected] != [(a.shape, a.dtype) for a in actual]:
        raise CheckFailed(f"{what}: sizes or dtypes differ", expected=describe_shapes(expected),
                          actual=describe_shapes(actual))
    return False


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
        theirs_value = other.state.get(name)
        if value is not None and theirs_value is not None and value.shape == theirs_value.shape:
            names.append(f"state {name!r}")
            mine.append(value)
            theirs.append(theirs_value)
    return names, mine, theirs


def present_grads(run: Run) -> tuple[list[str], list[torch.Tensor]]:
    """Names and values of the gradients a run produced (tensors that influence no output
    have none)."""
    pairs = [(name, g) for name, g in run.grads if g is not None]
    return [f"gradient of {name}" for name, _ in pairs], [g for _, g in pairs]


def output_names(outputs: Sequence[torch.Tensor], prefix: str = "") -> list[str]:
    return [f"{prefix}output {i}" for i in range(len(outputs))]
