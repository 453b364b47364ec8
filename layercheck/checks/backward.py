"""What a backward pass must leave alone, and what it must compose with: a backward that writes
into the tensors it is given passes every gradient comparison made on a fresh graph, and
corrupts the training step of everything that shares them."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from layercheck.sdk import (
    EXACT,
    FORWARD,
    CheckFailed,
    Context,
    Outputs,
    Subject,
    assert_close,
    check,
    cotangents,
    failing,
    mismatch,
    path_allowance,
    path_tolerances,
    reference_forward,
    seeded,
)
from layercheck.subject import backpropagate, backward_nodes


@dataclass
class _Pass:
    """One forward of a fresh layer with inputs that require grad, and copies of everything a
    backward is handed, taken before it runs."""

    subject: Subject
    inputs: list[torch.Tensor]
    outputs: list[torch.Tensor]  # floating outputs that require grad
    cotangents: list[torch.Tensor]
    kept: dict[str, torch.Tensor]  # name -> copy of the tensor before backward
    live: dict[str, torch.Tensor]  # name -> the tensor itself


def _forward(ctx: Context, subject: Subject, inputs: list[torch.Tensor]) -> _Pass:
    with failing("before backward"):
        outputs = [y for y in Outputs.of(subject.forward(inputs)).floating if y.requires_grad]
    ws = cotangents(ctx, outputs)
    live: dict[str, torch.Tensor] = {}
    for i, x in enumerate(subject.fed):  # the inputs as the layer got them
        if isinstance(x, torch.Tensor):
            live[f"input {i}"] = x
    for k, (y, w) in enumerate(zip(outputs, ws)):
        live[f"output {k}"] = y
        live[f"grad_output {k}"] = w
    for node in backward_nodes(outputs):
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            name = type(node).__name__.removesuffix("Backward")
            for j, saved in enumerate(_saved(node)):
                live.setdefault(f"tensor {j} that {name} saved for backward", saved)
    kept = {name: t.detach().clone() for name, t in live.items()}
    return _Pass(subject, inputs, outputs, ws, kept, live)


def _saved(node: Any) -> Sequence[torch.Tensor]:
    try:
        return [t for t in node.saved_tensors if isinstance(t, torch.Tensor)]
    except RuntimeError:  # already freed, or saved tensors that cannot be unpacked here
        return []


def _backward(run: _Pass, *, retain: bool) -> list[torch.Tensor | None]:
    leaves = [*run.inputs, *(p for _, p in run.subject.parameters())]
    with seeded(run.subject.target.seed), failing("in backward"):
        if retain:
            for leaf in leaves:
                leaf.grad = None
            torch.autograd.backward(run.outputs, run.cotangents, retain_graph=True)
            grads = [None if leaf.grad is None else leaf.grad.detach().clone() for leaf in leaves]
            for leaf in leaves:
                leaf.grad = None
            return grads
        return backpropagate(list(zip(run.outputs, run.cotangents)), leaves)


_HINTS = {
    "grad_output": "clone it before changing it (grad = grad.clone()), or use out-of-place operations: autograd "
                   "hands the same grad_output to every use of an output",
    "output": "an output is the caller's tensor: compute from a clone, or save the input and recompute",
    "input": "an input is the caller's tensor: it may feed other layers",
    "tensor": "a saved tensor may be the caller's input or output, and a second backward reads it again",
}


@check(
    "backward_pure",
    title="backward leaves what it is given unchanged, repeats, and composes",
    requires=("forward_runs", "backward_runs"),
    uses=(FORWARD,),  # the rounding floor of the float32 gradients
    tolerances=path_tolerances("relative difference between the gradients of two uses of the layer summed and of "
                               "each use alone, and between two backward passes over one graph"),
)
def backward_pure(ctx: Context) -> str:
    """Runs forward and backward and requires the backward to leave unchanged what it is
    given: the incoming gradient (grad_output), the inputs, the outputs the forward returned
    and the tensors a hand-written backward saved; then back-propagates a second time over the
    same graph (``retain_graph=True``) and requires the same gradients; then applies the layer
    to two inputs, sums the outputs and requires each input to get the gradient it gets alone.

    A backward that masks grad_output in place returns the right gradient and corrupts the
    gradient of everything else that shares that grad_output: for ``f(x1) + f(x2)``, x1's
    gradient comes out wrong. One that updates a saved output in place (``y.sqrt_()``) changes
    the user's output and breaks a second backward (gradient penalties, ``retain_graph``). Fix:
    out-of-place operations in backward, or ``.clone()`` what you change.
    """
    subject = ctx.fresh()
    run = _forward(ctx, subject, subject.inputs(requires_grad=True))
    if not run.outputs:
        raise CheckFailed("no floating output requires grad: there is no backward to look at", blocking=False)
    first = _backward(run, retain=True)
    _assert_unchanged(run)
    second = _backward(run, retain=True)
    names = [*(f"gradient of input {i}" for i in range(len(run.inputs))),
             *(f"gradient of parameter {n!r}" for n, _ in run.subject.parameters())]
    pairs = [(name, a, b) for name, a, b in zip(names, first, second) if a is not None or b is not None]
    assert_close([a if a is not None else torch.zeros(()) for _, a, _ in pairs],
                 [b if b is not None else torch.zeros(()) for _, _, b in pairs], names=[n for n, _, _ in pairs],
                 what="a second backward over the same graph (retain_graph=True) vs the first",
                 labels=("first", "second"), allowance=path_allowance(ctx, FORWARD))
    uses = _compose(ctx)
    return (f"backward leaves grad_output, {len(run.inputs)} input(s), {len(run.outputs)} output(s) and "
            f"{sum(1 for n in run.live if n.startswith('tensor'))} saved tensor(s) unchanged, repeats over one graph, "
            f"and {uses}")


def _assert_unchanged(run: _Pass) -> None:
    for name, before in run.kept.items():
        now = run.live[name].detach()
        if now.shape != before.shape or now.dtype != before.dtype:
            raise CheckFailed(f"backward changed {name} in place: {tuple(before.shape)} became {tuple(now.shape)}",
                              tensor=name)
        found = mismatch(before, now, EXACT)
        if found is not None:
            hint = _HINTS[name.split(" ")[0]]
            raise CheckFailed(
                f"backward modified {name} in place: at index {tuple(found['index'])} {found['expected']:.6g} became "
                f"{found['actual']:.6g} ({found['mismatched']} of {found['elements']} elements); {hint}",
                tensor=name, **found)


def _compose(ctx: Context) -> str:
    """f(x1) + f(x2) on one layer: each input's gradient equals the one it gets alone, and the
    parameters get the sum of both (the second use runs after the first, as in the sum)."""
    both = ctx.fresh()
    inputs1 = both.inputs(requires_grad=True)
    inputs2 = [_rolled(x) for x in inputs1]
    with failing("applied twice with the outputs summed"):
        out1 = Outputs.of(both.forward(inputs1)).floating
        out2 = Outputs.of(both.forward(inputs2)).floating
    if [y.shape for y in out1] != [y.shape for y in out2]:
        return "its two uses give outputs of other sizes: their sum was not tried"
    summed = [a + b for a, b in zip(out1, out2) if a.requires_grad or b.requires_grad]
    ws = cotangents(ctx, summed)
    params = [p for _, p in both.parameters()]
    with failing("applied twice with the outputs summed"):
        grads = backpropagate(list(zip(summed, ws)), [*inputs1, *inputs2, *params])
    alone1 = _first_alone(ctx, both, len(inputs1), out1, summed) or _alone(ctx, None, ws)
    alone2 = _alone(ctx, inputs2, ws)
    n = len(inputs1)
    names, expected, actual = [], [], []
    for i in range(n):
        for label, composed, alone in ((f"input {i} of the first use", grads[i], alone1[i]),
                                       (f"input {i} of the second use", grads[n + i], alone2[i])):
            if composed is not None and alone is not None:
                names.append(f"gradient of {label}")
                expected.append(alone)
                actual.append(composed)
    for j, (name, _) in enumerate(both.parameters()):
        a, b, composed = alone1[n + j], alone2[n + j], grads[2 * n + j]
        if composed is not None and (a is not None or b is not None):
            names.append(f"gradient of parameter {name!r}")
            expected.append(_zero_if_none(a, composed) + _zero_if_none(b, composed))
            actual.append(composed)
    assert_close(expected, actual, names=names, labels=("alone", "summed"), allowance=path_allowance(ctx, FORWARD),
                 what="two uses of the layer with their outputs summed vs each use alone (a backward that changes "
                      "grad_output in place corrupts the other use's)")
    return f"two uses with their outputs summed each get their own gradient ({len(names)} tensor(s) compared)"


def _alone(ctx: Context, second: list[torch.Tensor] | None, ws: list[torch.Tensor]) -> list[torch.Tensor | None]:
    """The gradients of one use on its own: the first use, or (``second``) the second one after
    a first call without grad, so that a layer with state sees what it sees in the sum."""
    subject = ctx.fresh()
    inputs = subject.inputs(requires_grad=True)
    with failing("used once"):
        if second is not None:
            subject.forward(inputs)
            inputs = [x.detach().clone().requires_grad_(x.requires_grad) for x in second]
        outputs = Outputs.of(subject.forward(inputs)).floating
    pairs = [(y, w) for y, w in zip(outputs, ws) if y.requires_grad]
    with failing("used once"):
        return backpropagate(pairs, [*inputs, *(p for _, p in subject.parameters())])


def _first_alone(ctx: Context, subject: Subject, n_inputs: int, outputs: list[torch.Tensor],
                 summed: list[torch.Tensor]) -> list[torch.Tensor | None] | None:
    """The first use alone is the shared forward run (a fresh layer, the generated inputs, the
    same cotangents), when every floating output takes part in the sum; else None."""
    if len(summed) != len(outputs) or not all(y.requires_grad for y in outputs):
        return None
    grads = dict(reference_forward(ctx).grads)
    return [*(grads.get(f"input {i}") for i in range(n_inputs)),
            *(grads.get(f"parameter {name!r}") for name, _ in subject.parameters())]


def _rolled(x: torch.Tensor, fraction: float = 1 / 3) -> torch.Tensor:
    """Another input (or grad_output) of the same size and distribution: the values rolled along
    the flattened tensor by about ``fraction`` of its length, which costs no random draw (a
    constant input stays as it is)."""
    if not x.is_floating_point() or x.numel() < 2:
        return x.detach().clone().requires_grad_(x.requires_grad) if x.is_floating_point() else x
    shift = int(x.numel() * fraction) or 1
    other = x.detach().reshape(-1).roll(shift).reshape(x.shape).clone()
    return other.requires_grad_(x.requires_grad)


def _zero_if_none(grad: torch.Tensor | None, like: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(like) if grad is None else grad
