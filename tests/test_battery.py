"""A battery of correct and deliberately odd custom Functions nobody on the team wrote: PyTorch's
own ``torch.testing._internal.autograd_function_db``. Each must pass the default suite, or fail
exactly as written here, with the diagnosis next to it: the known wrong backward passes there
are true findings (gradcheck agrees on every one), and a change that stops seeing them fails."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from torch import nn

import layercheck
from layercheck.support.accelerators import accelerators

pytest.importorskip("expecttest")  # torch.testing._internal imports it
from torch.testing._internal.autograd_function_db import autograd_function_db

# name -> (checks that must fail, why)
FINDINGS: dict[str, tuple[set[str], str]] = {
    "NumpyCubeNotComposableAutogradFunction": (
        {"gradients", "grad_output"}, "backward ignores grad_output: it returns 3x² whatever gradient comes in"),
    "NumpySortAutogradFunction": (
        {"gradients"}, "forward returns its input unsorted, backward permutes the gradient as if it had sorted"),
    "CubeGenVmapAutogradFunction": (
        {"gradients", "grad_output"},
        "backward adds 6·dinput where 6·grad_saved·input belongs (misuses the second gradient: not linear in it)"),
    "ScaleGradGenVmapAutogradFunction": (
        {"gradients"}, "backward scales the gradient of an identity by 3.14 (a fixture for vmap, wrong on purpose)"),
    "ZeroGradientsGenVmapAutogradFunction": (
        {"gradients"}, "backward returns zeros (a fixture for vmap, wrong on purpose)"),
}
# name -> (checks that must fail, why), where an accelerator is present too: the device check
# then runs (without one it is skipped)
ON_ACCELERATORS: dict[str, tuple[set[str], str]] = {
    "NumpyExpMarkDirtyAutogradFunction": (
        {"device"}, "forward exps x.cpu().numpy() in place: the same memory as x on the CPU, a copy of it on a GPU, "
                    "so on CUDA it returns its input unchanged (seen on an H100)"),
}
# name -> why it cannot be expressed as a layercheck target (none now: NumpyTake's two index
# tensors, an argsort and its inverse, cannot be drawn independently, so they stay the sample's
# own values, fixed in the layer like a lookup table; see _fixed)
NOT_EXPRESSIBLE: dict[str, str] = {}


class _Sample(nn.Module):
    """One sample of an OpInfo as a layer: its floating tensors are the inputs, everything else
    (integer index tensors included) is fixed."""

    def __init__(self, op: Any, template: list[Any], kwargs: dict[str, Any]) -> None:
        super().__init__()
        self.op, self.kwargs = op, kwargs
        # fixed tensors are buffers, as a layer's lookup table must be (registered_tensors)
        self.template = [f"fixed{i}" if isinstance(a, torch.Tensor) else a for i, a in enumerate(template)]
        for i, a in enumerate(template):
            if isinstance(a, torch.Tensor):
                self.register_buffer(f"fixed{i}", a.detach().clone())

    def forward(self, *tensors: torch.Tensor) -> Any:
        given = iter(tensors)
        fixed = dict(self.named_buffers())
        return self.op(*[next(given) if a is None else fixed[a] if isinstance(a, str) and a in fixed else a
                         for a in self.template], **self.kwargs)


def _drawn(argument: Any) -> bool:
    """Whether layercheck draws this argument: a floating tensor. Integer tensors of these
    samples are coupled (an argsort and its inverse), so they stay the sample's own."""
    return isinstance(argument, torch.Tensor) and argument.is_floating_point()


def _samples() -> list[tuple[str, Any, Any]]:
    return [(op.name, op, sample) for op in autograd_function_db
            for sample in op.sample_inputs_func(op, device="cpu", dtype=torch.float32, requires_grad=True)]


@pytest.mark.parametrize(("name", "op", "sample"), _samples(), ids=lambda v: v if isinstance(v, str) else "")
def test_pytorchs_own_autograd_functions_are_judged_right(name: str, op: Any, sample: Any) -> None:
    arguments = [sample.input, *sample.args]
    if name in NOT_EXPRESSIBLE:
        pytest.skip(NOT_EXPRESSIBLE[name])
    template = [None if _drawn(a) else a for a in arguments]
    layouts = [f"{','.join(map(str, a.shape))}:{'U' * a.dim()}" for a in arguments if _drawn(a)]
    # copy judges the wrapper, which holds torch's op, often a lambda that cannot be pickled; the
    # Function itself has nothing to copy (copy skips operations)
    report = layercheck.check_layer(_Sample(op.op, template, sample.kwargs), *layouts, skip=["copy"])
    assert report.runs[0].error is None, report.runs[0].error
    failed = {r.check for r in report.results if r.status.value in ("failed", "error")}
    expected, why = FINDINGS.get(name, (set(), "correct"))
    if name in ON_ACCELERATORS and accelerators():
        more, because = ON_ACCELERATORS[name]
        expected, why = expected | more, f"{why}; {because}" if name in FINDINGS else because
    messages = [f"{r.check}[{r.variant}]: {r.message[:300]}" for r in report.results if r.check in failed]
    assert failed == expected, f"{name} ({why}): failed {sorted(failed)}\n" + "\n".join(messages)


def test_the_findings_agree_with_gradcheck() -> None:
    for name, op, sample in _samples():
        if name in NOT_EXPRESSIBLE:
            continue
        inputs = tuple(t.detach().to(torch.float64).requires_grad_() for t in [sample.input])
        rest = [a.detach().to(torch.float64) if _drawn(a) else a for a in sample.args]
        agrees = torch.autograd.gradcheck(lambda x, rest=rest, op=op, sample=sample: op.op(x, *rest, **sample.kwargs),
                                          inputs, raise_exception=False, check_undefined_grad=False)
        assert agrees == (name not in FINDINGS), name
