"""Devices: the layer runs where it is moved, on accelerators and on the ``meta`` device."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from layercheck._sdk_internal import (
    Run,
    assert_same_unless_random,
    comparable,
    failing,
    forward_is_random,
    full_float32,
    output_names,
    path_allowance,
    path_tolerances,
    predict_is_random,
    present_grads,
)
from layercheck.sdk import (
    FORWARD,
    PREDICT,
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    accelerators,
    check,
    forward_run,
    layer_failure,
    predict_run,
    reference_forward,
    reference_predict,
)


@check(
    "device",
    title="on each accelerator, outputs and gradients stay on it and agree with the CPU",
    matlab="predict/forward/backwardIsConsistentInType (gpuArray)",
    uses=(PREDICT, FORWARD),
    variants=accelerators() or ("",),
    tolerances=path_tolerances("relative difference between outputs, gradients and state on the device and on "
                               "the CPU"),
)
def device(ctx: Context) -> str:
    """Moves the layer with ``.to(device)``, runs predict and forward+backward there on the
    generated inputs, and requires every output, gradient and buffer to be on that device
    and to agree with the CPU in float32 (TF32 off) within a tolerance for another
    summation order. ``--device`` restricts the accelerators; ``--device cpu`` runs the
    comparison against a second CPU copy (for machines without an accelerator).

    A layer that creates tensors without ``device=`` or keeps plain tensor attributes
    fails on the GPU only, after the CPU tests passed; one with a device-specific code
    path can compute something else there. Fix: create tensors with ``device=x.device``
    (or ``torch.zeros_like``, ``x.new_zeros``), register constants as buffers.

    With ``--on DEVICE`` every check runs the layer there; this check then compares that
    device with the CPU where the layer runs on the CPU too, and is skipped, saying so, where
    it does not (a Triton kernel, a CUDA extension).
    """
    home = ctx.target.home
    if home.type != "cpu":
        where, random = f"{home} (--on)", _home_against_cpu(ctx, home)
    else:
        chosen = _chosen_devices(ctx)
        where, random = ", ".join(map(str, chosen)), set()
        for dev in chosen:
            with full_float32():
                random |= _compare_on(ctx, dev, (reference_predict(ctx), reference_forward(ctx)))
    note = f" (values of {' and '.join(sorted(random))} differ: the layer draws random numbers)" if random else ""
    return f"on {where}: outputs, gradients and state stay there and agree with the CPU{note}"


def _home_against_cpu(ctx: Context, home: torch.device) -> set[str]:
    """``--on DEVICE``: the layer on that device (where every other check ran it) against the
    CPU, where it runs there too; returns the modes whose values differ because the layer
    draws random numbers."""
    if ctx.variant and not _same_device(torch.device(ctx.variant), home):
        raise CheckSkipped(f"the layer is checked on {home} (--on): {ctx.variant} is not compared")
    try:
        cpu = predict_run(ctx.fresh(device="cpu")), forward_run(ctx, ctx.fresh(device="cpu"))
    except LayerRaised as exc:
        raise CheckSkipped(f"the layer is checked on {home} (--on) and does not run on the CPU ({exc}): there is "
                           f"nothing to compare its results on {home} with") from exc
    with full_float32():
        return _compare_on(ctx, home, cpu)


def _chosen_devices(ctx: Context) -> list[torch.device]:
    """This variant's accelerator, or (variant "" when none is present) the ``--device`` ones."""
    requested = []
    for text in ctx.devices:
        try:
            requested.append(torch.device(text))
        except RuntimeError as exc:
            raise CheckSkipped(f"--device {text!r} is not a device torch knows: {exc}", applies=True) from None
    if not ctx.variant:
        if not requested:
            raise CheckSkipped("no CUDA or MPS device")
        missing = [str(r) for r in requested if not _usable(r)]
        if missing:
            raise CheckSkipped(f"--device {' '.join(missing)}: not available here (accelerators present: none)",
                               applies=True)
        return requested
    mine = torch.device(ctx.variant)
    if requested and not any(_same_device(r, mine) for r in requested):
        raise CheckSkipped(f"{ctx.variant} not selected by --device {' '.join(ctx.devices)}")
    return [mine]


def _usable(dev: torch.device) -> bool:
    """Whether the check can compare on ``dev``: the CPU (a second copy) or a present accelerator."""
    if dev.type == "cpu":
        return True
    return any(_same_device(dev, torch.device(name)) for name in accelerators())


def _compare_on(ctx: Context, dev: torch.device, cpu: tuple[Run, Run]) -> set[str]:
    """Predict, forward and backward on ``dev`` against the (predict, forward) runs on the CPU;
    returns the modes whose values differ because the layer draws random numbers."""
    with failing(f"on {dev}"):
        predicted = predict_run(ctx.fresh(device=dev))
        forwarded = forward_run(ctx, ctx.fresh(device=dev))
    _assert_runs_on(dev, predicted, forwarded)
    random = set()
    for mode, on_cpu, on_dev, is_random in (
        ("predict", cpu[0], predicted, lambda: predict_is_random(ctx)),
        ("forward", cpu[1], forwarded, lambda: forward_is_random(ctx)),
    ):
        names, expected, actual = comparable(on_cpu, on_dev)
        if not assert_same_unless_random(expected, actual, random=is_random, names=names,
                                         allowance=path_allowance(ctx, FORWARD if mode == "forward" else PREDICT),
                                         what=f"{mode} on {dev} vs the CPU"):
            random.add(mode)
    return random


def _assert_runs_on(dev: torch.device, predicted: Run, forwarded: Run) -> list[torch.Tensor]:
    """Every output, gradient and buffer of the two runs is on ``dev``; returns the gradients."""
    grad_names, grads = present_grads(forwarded)
    _assert_on(dev, output_names(predicted.outputs, "predict "), predicted.outputs)
    _assert_on(dev, output_names(forwarded.outputs, "forward "), forwarded.outputs)
    _assert_on(dev, grad_names, grads)
    for run, mode in ((predicted, "predict"), (forwarded, "forward")):
        state = {k: v for k, v in run.state.items() if v is not None}
        _assert_on(dev, [f"state {k!r} after {mode}" for k in state], list(state.values()))
    return grads


def _assert_on(dev: torch.device, names: Sequence[str], tensors: Sequence[torch.Tensor]) -> None:
    for name, t in zip(names, tensors):
        if not _same_device(t.device, dev):
            raise CheckFailed(f"{name} is on {t.device}, not on {dev}: it was created without device= "
                              "(or moved) inside the layer", tensor=name, device=str(t.device), expected=str(dev))


def _same_device(a: torch.device, b: torch.device) -> bool:
    return a.type == b.type and (a.index is None or b.index is None or a.index == b.index)


# -- meta_device ------------------------------------------------------------------------------

# What an error from a layer on the meta device looks like when it is the layer's fault:
# a tensor it uses lives on the CPU ("Tensor on device cpu is not on the expected device
# meta!", "Expected all tensors to be on the same device ... meta and cpu", numpy).
# Every other error is the meta device's limit (no values: .item(), data-dependent control
# flow, copies to the host, operations without a meta kernel): a skip, not a verdict.


def _pinned_to_cpu(exc: BaseException) -> bool:
    text = str(exc).lower()
    return "device" in text and "meta" in text and "cpu" in text


@check(
    "meta_device",
    title="the layer runs on the meta device: no tensors pinned to the CPU",
    requires=("predict_runs", "forward_runs", "backward_runs"),
)
def meta_device(ctx: Context) -> str:
    """Moves the layer to the ``meta`` device (shapes and dtypes, no values), runs
    predict, forward and backward there, and requires every output, gradient and buffer
    to stay on ``meta``.

    It finds, without a GPU, what breaks on one: tensors created inside the layer without
    ``device=`` and plain tensor attributes that ``.to()`` does not move. A layer that
    reads values (``.item()``, ``if x.sum() > 0``) cannot run on meta: that is skipped,
    not failed. Fix: ``device=x.device`` / ``x.new_*`` / ``torch.*_like`` in forward,
    ``register_buffer`` for constants.
    """
    try:
        subject = ctx.fresh(device="meta")
    except Exception as exc:  # e.g. a custom _apply that cannot handle meta
        raise CheckSkipped(f"the layer cannot be moved to the meta device: {type(exc).__name__}: {exc}",
                           applies=True) from exc
    try:
        predicted = predict_run(subject)
        forwarded = forward_run(ctx, ctx.fresh(device="meta"))
    except LayerRaised as exc:
        if _pinned_to_cpu(exc.exc):
            raise layer_failure(exc, "on the meta device", hint=": a tensor the layer uses is pinned to the CPU "
                                "(created without device=, or a plain tensor attribute)") from exc
        raise CheckSkipped(f"the layer cannot run on the meta device, which has no values ({exc}); "
                           "tensors pinned to the CPU were not looked for", applies=True) from exc
    grads = _assert_runs_on(torch.device("meta"), predicted, forwarded)
    count = len(predicted.outputs) + len(forwarded.outputs) + len(grads)
    return f"predict, forward and backward run on meta; {count} output and gradient tensor(s) stay there"
