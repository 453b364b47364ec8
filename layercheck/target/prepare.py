"""A plan made into a ready target: the engine's one way into this package (:func:`prepare`).

The layer reference is resolved and imported (:mod:`~layercheck.target.loading`), the Target
made from the plan (the constructor call, its inputs, the seed), and where Triton's interpreter
is asked for or there is no GPU, the layer's Triton kernels found and the target moved to the
sizes they are checked at (:mod:`~layercheck.target.triton_interpret`). Constructing, seeding
and initialising the layer is the Target's own (``Target.pristine``: :mod:`building`,
:mod:`seeding`), once the runner starts the checks under its time limit. The Python API and
the pytest plugin, which hold a layer or a plan of their own, use :func:`target_of`,
:func:`interpreting` and :func:`put_back_interpreter`.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from layercheck.parent.arguments import arguments_problem
from layercheck.parent.errors import LoadError, UsageError
from layercheck.parent.plan import TargetPlan
from layercheck.target.calling import backpropagate
from layercheck.target.loading import resolve
from layercheck.target.subject import Target
from layercheck.target.tensors import Outputs


def prepare(plan: TargetPlan, *, announce: bool = True) -> Target:
    """The plan's target, ready to check: its layer imported, the Target made from the plan, and
    where Triton's interpreter is asked for or there is no GPU (Note [triton interpreter]), its
    kernels found and the target at the sizes they are checked at. Raises LoadError
    (TargetNotFound when the file, module or class does not exist); ``announce``: say on stderr
    that kernels run interpreted when it was not asked for. The caller holds the time limit."""
    asked = plan.interpret
    interpreter = prepare_interpreter(asked)
    if interpreter is None:
        return make_target(plan)
    before = set(sys.modules)
    target = make_target(plan)
    # the modules the import added, and those of the layer's classes (imported before: --no-isolate)
    modules = set(sys.modules) - before | {getattr(c, "__module__", "") for c in getattr(
        target.cls, "__mro__", [target.cls])}
    kernels = KERNELS.setdefault(plan.name, interpreter.kernels_defined(modules))
    if not kernels and not asked:
        return target
    target = interpreted(target, kernels, plan.interpret_sizes)
    if announce and kernels and (not asked or target.specs != target.given):
        shown = ", ".join(name.rpartition(".")[2] for name in kernels[:4]) + (", ..." * (len(kernels) > 4))
        why = "" if asked else " and no GPU here"
        print(f"{plan.name}: Triton kernels ({shown}){why}: they run under Triton's interpreter, on CPU tensors"
              f"{'' if asked else ' (as with --interpret)'}; {_interpreter_message(target)}", file=sys.stderr)
    return target


def make_target(plan: TargetPlan) -> Target:
    """Resolve the plan's layer class; raises LoadError when it cannot be imported."""
    return target_of(resolve(plan.layer, base_dir=plan.base_dir), plan)


def target_of(layer: Any, plan: TargetPlan) -> Target:
    """The target of ``plan`` with ``layer``: a class, or an instance given to the Python API.
    Raises UsageError where the constructor arguments cannot fit the class's constructor; binds
    the reference the plan names (raises LoadError where it names nothing)."""
    target = Target(layer, plan.inputs, args=plan.args, kwargs=dict(plan.kwargs), seed=plan.seed, name=plan.name,
                    invocation=plan.invocation, constants=plan.constants, on=plan.on)
    if target.kind == "module" and target.instance is None:
        problem = arguments_problem(target.cls, plan.args, plan.kwargs)
        if problem is not None:  # the user's mistake, not the layer's: nothing is built
            where = (f"{plan.source}: args and kwargs" if plan.source is not None else
                     "the constructor arguments (--arg and --kwarg; check_layer's args and kwargs)")
            raise UsageError(f"{where}: {problem}")
    if plan.reference is not None:
        from layercheck.target.reference import reference_of

        target.reference = reference_of(plan.reference, args=plan.reference_args, kwargs=plan.reference_kwargs,
                                        mapping=plan.reference_map, base_dir=plan.reference_dir)
    return target


INTERPRET = "TRITON_INTERPRET"  # Triton's switch for its interpreter (Note [triton interpreter])
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
KERNELS: dict[str, list[str]] = {}  # target name -> the Triton kernels its import defined, in this process


def prepare_interpreter(asked: bool) -> Any:
    """Before a layer is imported: switch Triton's interpreter on where it is asked for or there
    is no GPU, and return layercheck.target.triton_interpret then (Note [triton interpreter]); None where
    it stays off, or Triton is not installed or cannot be imported (a LoadError where asked for)."""
    if not asked and not TRITON_INSTALLED:
        return None
    try:
        from layercheck.target import triton_interpret
    except Exception as exc:
        if asked:
            raise LoadError(f"Triton's interpreter was asked for (--interpret, interpret: true), and importing Triton "
                            f"raised {type(exc).__name__}: {exc}") from None
        return None
    return triton_interpret if triton_interpret.wanted(asked) else None


def interpreted(target: Target, kernels: Sequence[str], sizes: str | None) -> Target:
    """``target`` at the sizes its kernels are checked at under Triton's interpreter (reduced
    unless ``sizes`` is "full"; Note [interpreted sizes] in target/triton_interpret.py), recording how
    they ran (Target.interpreter: the report's runs[].interpreter)."""
    from layercheck.target import triton_interpret

    reduced, why = tuple(triton_interpret.interpreted_sizes(target.specs)), ""
    if sizes == "full":
        reduced, why = target.specs, "full sizes asked for (--interpret-sizes full, interpret_sizes: full)"
    elif not kernels:
        reduced, why = target.specs, "no Triton kernel was found when the layer was imported"
    checked: Target | None = target
    if reduced != target.specs:
        try:
            checked = target.with_inputs(reduced)
            if checked is None:
                why = f"its parameters follow the sizes (at {_layouts(reduced)} they differ)"
            else:
                try_once(checked)
        except Exception as exc:  # the layer's trouble with smaller inputs: checked as given
            raised = getattr(exc, "exc", None) or exc  # the layer's own exception (LayerRaised.exc)
            first = (str(raised).strip().splitlines() or [""])[0]
            checked, why = None, f"at {_layouts(reduced)} it raised {type(raised).__name__}: {first}"
    result = checked if checked is not None else target
    result.interpreter = {"kernels": [name.rpartition(".")[2] for name in kernels],
                          "sizes": "reduced" if result.specs != target.given else "given",
                          "inputs": [spec.to_dict() for spec in result.specs], "why": why or None}
    return result


@contextlib.contextmanager
def interpreting(target: Target, asked: bool | None, sizes: str | None = None) -> Iterator[Target]:
    """For a layer imported already (the Python API): its Triton kernels run under Triton's
    interpreter while the checks run where ``asked`` (True), or by themselves (None) where
    Triton is imported and there is no GPU, at the sizes :func:`interpreted` picks; yields the
    target to check. ``TRITON_INTERPRET`` is put back afterwards. Raises LoadError where the
    interpreter is asked for and Triton cannot be imported."""
    previous = os.environ.get(INTERPRET)
    try:
        interpreter = None
        if asked or (asked is None and "triton" in sys.modules):
            interpreter = prepare_interpreter(bool(asked))
        modules = {getattr(c, "__module__", "") for c in getattr(target.cls, "__mro__", [target.cls])}
        kernels = interpreter.kernels_defined(modules) if interpreter is not None else []
        yield interpreted(target, kernels, sizes) if interpreter is not None and (kernels or asked) else target
    finally:
        put_back_interpreter(previous)


def put_back_interpreter(value: str | None) -> None:
    """``TRITON_INTERPRET`` as it was (``value``, None for unset) before a layer was imported or
    checked under Triton's interpreter: the rest of the process's kernels run as before."""
    if value is None:
        os.environ.pop(INTERPRET, None)
    else:
        os.environ[INTERPRET] = value


def _layouts(specs: Sequence[Any]) -> str:
    return " ".join(str(spec.layout) for spec in specs)


def _interpreter_message(target: Target) -> str:
    """Where a target's kernels ran under the interpreter: the sizes checked, and why."""
    record = target.interpreter or {}
    if target.specs != target.given:
        return (f"checked at {_layouts(target.specs)}, reduced from {_layouts(target.given)} (interpreted kernels are "
                "slow; --interpret-sizes full checks the sizes given)")
    return "checked at the sizes given" + (f": {record['why']}" if record.get("why") else "")


def try_once(target: Target) -> None:
    """Predict, then forward and backward once, on the target's inputs; raises what the layer raises."""
    subject = target.build()
    subject.predict(subject.inputs())
    inputs = subject.inputs(requires_grad=True)
    outputs = [y for y in Outputs.of(subject.forward(inputs)).floating if y.requires_grad]
    if outputs:
        backpropagate([(y, torch.ones_like(y)) for y in outputs],
                      [*(x for x in inputs if x.requires_grad), *(p for _, p in subject.parameters())])
