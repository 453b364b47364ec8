"""One sample forward of a model, every submodule's call recorded (forward pre-hooks with keyword
arguments) and every ``autograd.Function`` applied inside it; the model left exactly as it was."""

from __future__ import annotations

import contextlib
import traceback
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn
from torch.autograd.function import Function
from torch.utils._pytree import tree_map

from layercheck.parent.errors import LoadError


@dataclass
class Call:
    """One call the sample forward made: a module's (``function`` None) or an autograd.Function's
    ``apply`` (``module`` the innermost module it was applied in)."""

    path: str  # the module's path in the model ("" for the model itself); a Function's: PATH/Name
    module: nn.Module
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    function: type | None = None
    occurrence: int = 0  # how many calls of the same path came before it

    @property
    def layer(self) -> nn.Module | type:
        return self.function if self.function is not None else self.module

    @property
    def cls(self) -> type:
        return self.function if self.function is not None else type(self.module)


class ForwardRaised(LoadError):
    """The model's sample forward raised: the module path where, and the traceback."""

    def __init__(self, message: str, trace: str) -> None:
        super().__init__(message)
        self.trace = trace


@dataclass
class _Recorder:
    names: dict[int, str]
    calls: list[Call] = field(default_factory=list)
    stack: list[str] = field(default_factory=list)
    counts: dict[str, int] = field(default_factory=dict)

    def add(self, path: str, module: nn.Module, args: Any, kwargs: Any, function: type | None = None) -> None:
        occurrence = self.counts.get(path, 0)
        self.counts[path] = occurrence + 1
        self.calls.append(Call(path, module, tree_map(_kept, tuple(args)), tree_map(_kept, dict(kwargs)), function,
                               occurrence))


def _kept(value: Any) -> Any:
    return value.detach().clone() if isinstance(value, torch.Tensor) else value


def capture(model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> list[Call]:
    """Every call of one forward of ``model`` in predict mode (eval, no grad) on ``args`` and
    ``kwargs``, in call order. Raises ForwardRaised naming the innermost module running when the
    forward raised. The model's modes, parameters, buffers and hooks are as they were after it."""
    recorder = _Recorder({id(m): name for name, m in model.named_modules(remove_duplicate=False)})
    with _restored(model), _hooked(model, recorder), _functions_recorded(recorder), torch.no_grad():
        model.eval()
        try:
            model(*args, **kwargs)
        except Exception as exc:
            where = recorder.stack[-1] if recorder.stack else ""
            cls = type(model.get_submodule(where)).__name__
            raise ForwardRaised(f"the model's sample forward raised in {where or 'the model itself'} ({cls}): "
                                f"{type(exc).__name__}: {exc}", traceback.format_exc()) from None
    return recorder.calls


@contextlib.contextmanager
def _hooked(model: nn.Module, recorder: _Recorder) -> Iterator[None]:
    handles = []

    def before(module: nn.Module, args: Any, kwargs: Any) -> None:
        path = recorder.names.get(id(module), "?")
        recorder.stack.append(path)
        recorder.add(path, module, args, kwargs)

    def after(module: nn.Module, args: Any, output: Any) -> None:
        recorder.stack.pop()

    try:
        for module in model.modules():
            handles.append(module.register_forward_pre_hook(before, with_kwargs=True))
            handles.append(module.register_forward_hook(after))
        yield
    finally:
        for handle in handles:
            handle.remove()


@contextlib.contextmanager
def _functions_recorded(recorder: _Recorder) -> Iterator[None]:
    """``Function.apply`` records the Functions defined outside torch while the forward runs
    (what their graph nodes are made of, with the arguments that made them)."""
    original = Function.__dict__["apply"]

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        if not cls.__module__.startswith("torch.") and recorder.stack:
            where = recorder.stack[-1]
            recorder.add(f"{where}/{cls.__name__}" if where else cls.__name__, _module_at(recorder, where),
                         args, kwargs, cls)
        return original.__func__(cls, *args, **kwargs)

    Function.apply = classmethod(apply)  # type: ignore[assignment, method-assign]
    try:
        yield
    finally:
        Function.apply = original  # type: ignore[method-assign]


def _module_at(recorder: _Recorder, path: str) -> nn.Module:
    for call in reversed(recorder.calls):
        if call.path == path and call.function is None:
            return call.module
    raise AssertionError(path)


@contextlib.contextmanager
def _restored(model: nn.Module) -> Iterator[None]:
    """Put back the modes, parameters and buffers of every module (a forward may write a buffer)."""
    modes = [(m, m.training) for m in model.modules()]
    tensors = [(t, t.detach().clone()) for t in [*model.parameters(), *model.buffers()]]
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training
        with torch.no_grad():
            for tensor, saved in tensors:
                if tensor.shape == saved.shape and not torch.equal(tensor, saved):
                    tensor.copy_(saved)
