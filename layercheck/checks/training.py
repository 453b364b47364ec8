"""A training step (opt-in): what an optimizer does with the layer's gradients."""

from __future__ import annotations

import torch
from torch import nn

from layercheck._sdk_internal import cotangents, failing, output_names, user_trace
from layercheck.sdk import (
    CheckFailed,
    CheckSkipped,
    Context,
    LayerRaised,
    Outputs,
    Subject,
    Tolerance,
    check,
    modules_only,
    nonfinite,
    seeded,
)

_LR = 0.1


@check(
    "train_step",
    title="one SGD step moves every trainable parameter by -lr·grad and no frozen one; state stays finite",
    default=False,
    requires=("forward_runs", "backward_runs"),
    applies=modules_only("operations (autograd.Function) have no parameters to train"),
    tolerances=(Tolerance("float32", 1e-4, "relative difference between each trainable parameter's move in one "
                                           "SGD step and -lr times the gradient it held"),),
    any_batch=True,
)
def train_step(ctx: Context) -> str:
    """Builds ``torch.optim.SGD(layer.parameters(), lr=0.1)`` as a training script does, runs the
    training forward on the generated inputs, back-propagates a random loss (the seeded
    cotangents), steps, and requires every trainable parameter to have moved by -lr times the
    gradient it held, every frozen one (``requires_grad=False``; when the layer has none and
    several trainable ones, its last parameter is frozen for the step) to be unchanged, and every
    buffer, and the outputs of a second forward, to be finite.

    A training step is where a layer's parameters must be the tensors the optimizer holds: a
    forward that creates a parameter anew (``self.w = nn.Parameter(...)`` in forward, to clamp or
    re-initialise it) leaves the optimizer stepping a tensor the layer no longer uses, and training
    silently does nothing; a forward that writes into a parameter (``.data`` updates) moves frozen
    parameters and undoes the step. Fix: keep parameters as created in ``__init__``/``initialize``;
    compute derived values from them (``w = self.w.clamp(...)``) instead of reassigning them; keep
    what forward updates in buffers.
    """
    subject = ctx.fresh()
    module = subject.module
    assert module is not None
    named = dict(module.named_parameters())
    trainable = [n for n, p in named.items() if p.requires_grad]
    if not trainable:
        raise CheckSkipped("the layer has no trainable parameter")
    frozen = [n for n, p in named.items() if not p.requires_grad]
    chosen = ""
    if not frozen and len(trainable) > 1:
        chosen = trainable.pop()
        named[chosen].requires_grad_(False)
        frozen.append(chosen)
    before = {n: p.detach().clone() for n, p in named.items()}
    optimizer = torch.optim.SGD(module.parameters(), lr=_LR)
    inputs = subject.inputs()
    with failing("in forward"):
        outputs = [y for y in Outputs.of(subject.forward(inputs)).floating if y.requires_grad]
    if not outputs:
        raise CheckSkipped("no floating output requires grad: there is no loss to step on")
    with seeded(ctx.seed), failing("in backward"):
        try:
            torch.autograd.backward(outputs, cotangents(ctx, outputs))
        except Exception as exc:
            raise LayerRaised("backward", exc, user_trace(exc)) from exc
    grads = {n: None if p.grad is None else p.grad.detach().clone() for n, p in module.named_parameters()}
    optimizer.step()
    after = dict(module.named_parameters())
    for name in trainable:
        _assert_stepped(ctx, name, before[name], after.get(name), grads.get(name))
    for name in frozen:
        if name in after and not torch.equal(after[name].detach(), before[name]):
            why = "frozen for this step by layercheck" if name == chosen else "requires_grad=False"
            raise CheckFailed(f"parameter {name!r} ({why}) changed in the training step: the layer writes into it "
                              "(a .data update in forward?); only the optimizer may move parameters, and not frozen "
                              "ones. Fix: keep what forward updates in a buffer", tensor=f"parameter {name!r}")
    _assert_finite_after(subject, inputs)
    frozen_text = ((f", {len(frozen)} frozen one(s) unchanged" if frozen else ", no frozen parameter to watch")
                   + (f" ({chosen!r} frozen for the step)" if chosen else ""))
    return f"one SGD step moved {len(trainable)} trainable parameter(s) by -lr·grad{frozen_text}; state stays finite"


def _assert_stepped(ctx: Context, name: str, old: torch.Tensor, new: torch.Tensor | None,
                    grad: torch.Tensor | None) -> None:
    tensor = f"parameter {name!r}"
    if new is None:
        raise CheckFailed(f"{tensor} is gone after the training step", tensor=tensor)
    if grad is None:
        raise CheckFailed(f"{tensor} is trainable but held no gradient after backward: the step cannot move it "
                          "(backward_runs says why)", tensor=tensor)
    moved = new.detach().to(torch.float64) - old.to(torch.float64)
    wanted = -_LR * grad.to(torch.float64)
    # one rounding of the parameter after the step, and the relative tolerance on the step itself
    bound = ctx.tolerance(torch.float32) * wanted.abs() + 2 * torch.finfo(new.dtype).eps * (old.abs() + wanted.abs())
    wrong = (moved - wanted).abs() > bound
    if not bool(wrong.any()):
        return
    index = tuple(int(i) for i in wrong.nonzero()[0])
    still = bool((moved == 0).all())
    why = ("it did not move at all: the optimizer stepped another tensor than the one the layer now holds (a "
           "parameter created anew in forward, self.w = nn.Parameter(...)?). Fix: compute derived values from "
           "the parameter instead of reassigning it" if still else
           "something else moved it too (a forward that writes into the parameter?)")
    raise CheckFailed(f"after one SGD step (lr={_LR:g}), {tensor} moved by {float(moved[index]):.6g} at index {index} "
                      f"where -lr·grad is {float(wanted[index]):.6g} ({int(wrong.sum())} of {wrong.numel()} elements); "
                      f"{why}", tensor=tensor, index=list(index))


def _assert_finite_after(subject: Subject, inputs: list[torch.Tensor]) -> None:
    assert subject.module is not None
    _assert_finite_state(subject.module, "after the training step")
    with failing("in the forward after the training step"):
        outputs = Outputs.of(subject.forward(inputs, grad=False)).floating
    for name, out in zip(output_names(outputs), outputs):
        problem = nonfinite(out)
        if problem is not None:
            raise CheckFailed(f"after the training step, forward {name} has {problem}", tensor=name)
    _assert_finite_state(subject.module, "after the training step and another forward")


def _assert_finite_state(module: nn.Module, when: str) -> None:
    for name, buf in module.named_buffers():
        problem = nonfinite(buf) if buf.is_floating_point() else None
        if problem is not None:
            raise CheckFailed(f"{when}, state {name!r} has {problem}", tensor=f"state {name!r}")
