"""Custom operators (``torch.library.custom_op``): what ``torch.library.opcheck`` tests, as checks.

opcheck is PyTorch's anchor for operators — schema and mutation declarations, the fake-tensor
kernel, the autograd registration, AOT dispatch — but it does not compare gradients with finite
differences: an operator whose registered backward is off by a factor of 2 passes every one of
its tests. layercheck runs them as checks of their own, beside ``gradients`` and the rest, on
the operator itself or on every custom operator a function or module calls, with the arguments
that call gave it. The three default ones pass the short way where it passes, without opcheck's
imports (layercheck/support/optests.py, Note [opcheck without its imports]); anything else is
opcheck's verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch
from torch.overrides import TorchFunctionMode
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten, tree_map

from layercheck._sdk_internal import failing
from layercheck.sdk import CheckError, CheckFailed, CheckSkipped, Context, check
from layercheck.support import optests

# namespaces of PyTorch's own operators: what is not one of these is a custom operator
_BUILTIN_NAMESPACES = {"aten", "prim", "prims", "_c10d_functional", "c10d", "profiler", "higher_order", "inductor",
                       "quantized", "_quantized", "rngprims", "debugprims"}


@dataclass(frozen=True)
class Call:
    """One custom operator as the layer calls it, with the arguments of its first call.
    ``recorded``: whether autograd records some call of it (Note [calls autograd records])."""

    op: Any
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    recorded: bool = True

    @property
    def name(self) -> str:
        schema = getattr(self.op, "_schema", None)
        return str(schema.name) if schema is not None else str(self.op)


class _Calls(TorchDispatchMode):
    """Records the custom operators called below autograd, with copies of their arguments."""

    def __init__(self) -> None:
        super().__init__()
        self.found: dict[str, Call] = {}

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        namespace = getattr(func, "namespace", "aten")
        if namespace not in _BUILTIN_NAMESPACES and str(func) not in self.found:
            self.found[str(func)] = Call(func, tree_map(_copy, tuple(args)), tree_map(_copy, dict(kwargs)))
        return func(*args, **kwargs)


# Note [calls autograd records]
# An operator needs a backward of its own only where autograd records its call: grad mode on and
# an argument that requires grad. Called inside an autograd.Function's forward (grad mode off:
# the Function gives the gradient, as bitsandbytes' int8 matmul does with its quantisation
# operators), under no_grad, or on tensors that need no gradient (a buffer, a detached
# statistic), it needs none, and opcheck's test_autograd_registration, handed arguments that
# require grad, would fail a correct layer. Below autograd every call looks alike (an operator's
# own registered backward runs its kernel with grad mode off too), so the calls are watched above
# it, as the layer makes them, by a TorchFunctionMode beside the dispatch mode that records
# them. An operator this mode never sees (called from C++) counts as recorded: it is tested.


class _Recorded(TorchFunctionMode):
    """Names the custom operators that some call makes where autograd records it, and those called."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: set[str] = set()
        self.recorded: set[str] = set()

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _custom_name(func)
        if name is not None:
            self.seen.add(name)
            if torch.is_grad_enabled() and any(isinstance(leaf, torch.Tensor) and leaf.requires_grad
                                               for leaf in tree_flatten((args, kwargs))[0]):
                self.recorded.add(name)
        return func(*args, **kwargs)


def _custom_name(func: Any) -> str | None:
    """``ns::name`` of a custom operator (an OpOverload or its packet), None for anything else."""
    if not isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
        return None
    name = getattr(func, "_qualified_op_name", None) or str(func._schema.name)
    return None if name.split("::")[0] in _BUILTIN_NAMESPACES else name


def _copy(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        copy = value.detach().clone()
        return copy.requires_grad_(copy.is_floating_point())
    return value


def calls(ctx: Context) -> list[Call]:
    """The custom operators the target is or calls (once per target)."""

    def find() -> list[Call]:
        subject = ctx.fresh()
        inputs = subject.inputs(requires_grad=True)
        if ctx.target.kind == "operator":
            positional, keywords = ctx.target.split(inputs)
            op = ctx.target.cls
            overload = getattr(op, "_opoverload", None) or getattr(op, "default", None) or op
            return [Call(overload, tuple(positional), dict(keywords))]
        recorder, above = _Calls(), _Recorded()
        with failing("while looking for the custom operators it calls"), above, recorder:
            subject.forward(inputs)
        return [replace(call, recorded=call.name in above.recorded or call.name not in above.seen)
                for call in recorder.found.values()]

    return ctx.shared("layercheck.operators.calls", find)


_WHY = {
    "test_schema": "the operator mutates or aliases an argument differently from what its schema declares "
                   "(custom_op's mutates_args). Fix: declare every argument it writes to, and return no input itself",
    "test_faketensor": "the fake kernel (register_fake) does not give the real kernel's output sizes, dtypes or "
                       "strides: torch.compile and export trace with the fake kernel, so they see another output",
    "test_autograd_registration": "the operator takes tensors that require grad but has no backward registered "
                                  "(register_autograd), or one registered for the wrong dispatch key",
    "test_aot_dispatch_dynamic": "the operator does not trace under AOT dispatch with dynamic shapes "
                                 "(torch.compile's backward path)",
}


def _opcheck(ctx: Context, test: str) -> str:
    found = calls(ctx)
    if not found:
        raise CheckSkipped("the layer calls no custom operator (torch.library.custom_op)")
    opcheck = getattr(torch.library, "opcheck", None)
    if opcheck is None:
        raise CheckSkipped(f"torch {torch.__version__} has no torch.library.opcheck", applies=True)
    unrecorded = [call.name for call in found if not call.recorded]
    if test == "test_autograd_registration":
        found = [call for call in found if call.recorded]
        if not found:
            raise CheckSkipped(f"{', '.join(unrecorded)}: called only where autograd does not record the call (inside "
                               "an autograd.Function's forward, under no_grad, or on tensors that need no gradient), "
                               "so no backward of its own is needed")
    short: list[str] = []  # the operators whose pass the short way gave
    for call in found:
        # an operator called only where autograd does not record it is tested as it is called
        args, kwargs = (call.args, call.kwargs) if call.recorded else tree_map(_detached, (call.args, call.kwargs))
        if optests.passes(test, call.op, args, kwargs):  # Note [opcheck without its imports]
            short.append(call.name)
            continue
        try:
            outcome = opcheck(call.op, args, kwargs, test_utils=[test], raise_exception=False)[test]
        except Exception as exc:  # opcheck itself broke on these arguments
            raise CheckError(f"torch.library.opcheck({call.name}, {test}) could not run: {type(exc).__name__}: "
                             f"{exc}") from exc
        if outcome != "SUCCESS":
            text = f"{type(outcome).__name__}: {outcome}" if isinstance(outcome, BaseException) else str(outcome)
            first = next((line.strip() for line in text.splitlines() if line.strip()), text)
            if len(first) > 300:  # the whole text is in the details
                first = first[:300].rsplit(" ", 1)[0] + " …"
            why, _, fix = _WHY[test].partition(". Fix: ")
            raise CheckFailed(f"{call.name}: {why} (opcheck {test}: {first})" + (f". Fix: {fix}" if fix else ""),
                              operator=call.name, opcheck=test, error=text[-4000:])
    names = ", ".join(call.name for call in found)
    how = " (as opcheck judges it, without opcheck's imports)" if len(short) == len(found) else ""
    if test == "test_autograd_registration" and unrecorded:
        return (f"{names}: opcheck's {test} passes{how}; not tested: {', '.join(unrecorded)}, called only where "
                "autograd does not record the call")
    return f"{names}: opcheck's {test} passes{how}"


def _detached(value: Any) -> Any:
    return value.detach() if isinstance(value, torch.Tensor) else value


@check(
    "op_schema",
    title="a custom operator mutates and aliases only what its schema declares",
    requires=("forward_runs",),
    any_batch=True,
)
def op_schema(ctx: Context) -> str:
    """Judges the custom operator (or every one the layer calls) by ``torch.library.opcheck``'s
    ``test_schema``: the operator must write only into the arguments its schema declares
    (``mutates_args``) and return no alias of an input. The test's ``SchemaCheckMode`` runs
    without opcheck's imports (a second of CPU); where it does not pass, opcheck runs, and its
    outcome is the verdict and the message.

    An undeclared mutation is invisible to torch.compile, functionalization and autograd: they
    reorder or drop the write, and results differ from eager. Fix: list the argument in
    ``mutates_args``, or compute out of place.
    """
    return _opcheck(ctx, "test_schema")


@check(
    "op_fake",
    title="a custom operator's fake kernel gives the real kernel's sizes, dtypes and strides",
    requires=("forward_runs",),
    any_batch=True,
)
def op_fake(ctx: Context) -> str:
    """Judges by ``torch.library.opcheck``'s ``test_faketensor``: the fake kernel registered with
    ``register_fake`` (what torch.compile, export and meta tensors run) must give outputs of the
    real kernel's size, dtype, device, strides and aliasing. The fake kernel runs on ``meta``
    tensors, compared with the real call as the test compares (no fake mode, which imports
    ``torch._dynamo`` and sympy); where that does not pass (a difference, a kernel that asks
    ``get_ctx()``), opcheck runs, and its outcome is the verdict and the message. Not seen
    this way: a fake kernel that branches on its inputs' device (it sees ``meta``).

    A wrong fake kernel makes compiled and exported models allocate and plan for another
    output: they fail far from the operator, or compute garbage. Fix: make the fake kernel
    build its output exactly as the real one does (``x.new_empty(...)``, the same dtype rules).
    """
    return _opcheck(ctx, "test_faketensor")


@check(
    "op_autograd_registration",
    title="a differentiable custom operator has its backward registered",
    requires=("forward_runs",),
    any_batch=True,
)
def op_autograd_registration(ctx: Context) -> str:
    """Judges by ``torch.library.opcheck``'s ``test_autograd_registration`` (its lines, without
    opcheck's imports; opcheck's own outcome where they do not pass): an operator called with
    tensors that require grad must have a backward registered (``register_autograd``).

    Without one, autograd either raises at backward or silently treats the operator as a
    constant. Fix: ``torch.library.register_autograd(name, backward, setup_context=...)`` for
    the operator, or call it inside an ``autograd.Function``. ``gradients`` judges the
    registered backward's values against finite differences.
    An operator called only where autograd does not record the call (inside an
    ``autograd.Function``'s forward, under ``no_grad``) needs none and is not tested (Note [calls
    autograd records]).
    """
    return _opcheck(ctx, "test_autograd_registration")


@check(
    "op_aot_dispatch",
    title="a custom operator traces under AOT dispatch (torch.compile's backward)",
    default=False,
    requires=("forward_runs",),
    any_batch=True,
)
def op_aot_dispatch(ctx: Context) -> str:
    """Runs ``torch.library.opcheck``'s ``test_aot_dispatch_dynamic``: the operator, with its
    fake kernel and its backward, must trace under AOT autograd with dynamic shapes, as
    torch.compile traces a training step. Opt-in: it is slow (a second or more per operator).
    Fix: a fake kernel that builds its outputs from the inputs' sizes (no fixed sizes, no
    reads of values) and a backward made of traceable torch operations.
    """
    return _opcheck(ctx, "test_aot_dispatch_dynamic")
