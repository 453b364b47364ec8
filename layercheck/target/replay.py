"""Replaying a captured call: the saved layer (:class:`Replay`, the module or ``autograd.Function``
with the call's non-tensor arguments and its arguments' structure) and the captured tensors a
spec's ``inputs_file:`` holds. Imports torch and :mod:`layercheck.parent.inputs` only: ``subject`` and
``loading`` read through it."""

from __future__ import annotations

import io
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from layercheck.parent.inputs import InputSpec

_FORMAT = "layercheck.scan.layer/1"


class Slot:
    """Where the ``index``-th tensor input goes in a captured call's arguments."""

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<input {self.index}>"


class Replay(nn.Module):
    """A captured call made a layer of tensors only: ``forward(*tensors)`` puts the tensors back
    into the call's arguments (nested tuples, lists, dicts; keyword arguments) beside its other,
    plain values and calls the layer (a module) or ``Fn.apply`` (an autograd.Function)."""

    def __init__(self, layer: nn.Module | type, template: tuple[tuple[Any, ...], dict[str, Any]]) -> None:
        super().__init__()
        self.function: type | None = None
        if isinstance(layer, nn.Module):
            self.layer = layer
        else:
            self.function = layer
        self.template = template  # (args, kwargs) with a Slot where each tensor input goes

    def forward(self, *tensors: Any) -> Any:
        args, kwargs = fill(self.template, tensors)
        if self.function is not None:
            return self.function.apply(*args, **kwargs)  # type: ignore[attr-defined]
        return self.layer(*args, **kwargs)

    def extra_repr(self) -> str:
        return f"function={self.function.__qualname__}" if self.function is not None else ""


def replay(layer: nn.Module | type, args: Sequence[Any], kwargs: dict[str, Any]) -> tuple[Replay, list[torch.Tensor]]:
    """The Replay of one captured call and its tensor inputs (every tensor of at least one
    dimension, in argument order; a 0-dimensional one is kept as a value of the call)."""
    tensors: list[torch.Tensor] = []
    template = (slotted(tuple(args), tensors), slotted(dict(kwargs), tensors))
    return Replay(layer, template), tensors


def slotted(value: Any, tensors: list[torch.Tensor]) -> Any:
    """``value`` with a Slot for each tensor input, appended to ``tensors``."""
    if isinstance(value, torch.Tensor) and value.dim() > 0:
        tensors.append(value)
        return Slot(len(tensors) - 1)
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return type(value)(slotted(v, tensors) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return {k: slotted(v, tensors) for k, v in value.items()}
    return value


def fill(value: Any, tensors: Sequence[Any]) -> Any:
    """The inverse of :func:`slotted`."""
    if isinstance(value, Slot):
        return tensors[value.index]
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return type(value)(fill(v, tensors) for v in value)
    if isinstance(value, dict) and type(value) is dict:
        return {k: fill(v, tensors) for k, v in value.items()}
    return value


def leaves(value: Any) -> list[Any]:
    """The values of a template that are neither containers nor Slots."""
    if isinstance(value, Slot):
        return []
    if isinstance(value, (tuple, list)) and type(value) in (tuple, list):
        return [leaf for v in value for leaf in leaves(v)]
    if isinstance(value, dict) and type(value) is dict:
        return [leaf for v in value.values() for leaf in leaves(v)]
    return [value]


def save_layer(layer: nn.Module, path: Path, imports: Sequence[str]) -> None:
    """Save a layer instance with the user files its classes live in (imported before loading)."""
    buffer = io.BytesIO()
    torch.save(layer, buffer)
    torch.save({"format": _FORMAT, "imports": list(imports), "layer": buffer.getvalue()}, path)


def load_layer(path: Path, *, import_file: Callable[[Path, str], object]) -> nn.Module:
    """A layer saved by :func:`save_layer`: its user files imported (``import_file``, as a
    ``file.py:Class`` reference imports them), then the instance."""
    from layercheck.parent.errors import LoadError

    try:
        saved = torch.load(path, weights_only=True)
    except FileNotFoundError:
        raise LoadError(f"{path}: no such file") from None
    except Exception as exc:
        raise LoadError(f"{path}: not a layer saved by layercheck scan ({type(exc).__name__}: {exc})") from None
    if not isinstance(saved, dict) or saved.get("format") != _FORMAT:
        raise LoadError(f"{path}: not a layer saved by layercheck scan")
    for name in saved["imports"]:
        import_file(Path(name), name)
    try:
        layer = torch.load(io.BytesIO(saved["layer"]), weights_only=False)
    except Exception as exc:
        raise LoadError(f"{path}: loading the saved layer raised {type(exc).__name__}: {exc}") from None
    if not isinstance(layer, nn.Module):
        raise LoadError(f"{path}: holds a {type(layer).__name__}, not a layer")
    return layer


_loaded: dict[str, tuple[float, list[torch.Tensor]]] = {}


def captured_value(spec: InputSpec, seed: int) -> torch.Tensor:
    """The captured tensor of ``spec`` as :func:`layercheck.target.subject.draw` returns a drawn one
    (floating ones in float64), cut to the spec's layout: where the layout is smaller than what
    was captured (the runner's sample of the batch, a batch of one), the first entries; a
    single observation is the ``seed``-th (modulo the batch), so that further draws differ."""
    assert spec.captured is not None
    file, index = spec.captured
    mtime = Path(file).stat().st_mtime
    if file not in _loaded or _loaded[file][0] != mtime:
        tensors = torch.load(file, weights_only=True)
        if not isinstance(tensors, (list, tuple)) or not all(isinstance(t, torch.Tensor) for t in tensors):
            raise ValueError(f"{file}: expected a list of tensors (inputs_file:)")
        _loaded[file] = (mtime, list(tensors))
    tensors = _loaded[file][1]
    if index >= len(tensors):
        raise ValueError(f"{file}: holds {len(tensors)} tensors; the spec's input {index + 1} has none")
    x = tensors[index]
    size = spec.layout.size
    if x.dim() != len(size):
        raise ValueError(f"{file}: tensor {index} has {x.dim()} dimensions, its layout {spec.layout} {len(size)}")
    batch = spec.layout.batch_dim
    for dim, (want, have) in enumerate(zip(size, x.shape)):
        if want > have:
            raise ValueError(f"{file}: tensor {index} has size {tuple(x.shape)}, smaller than its layout {spec.layout}")
        if want == have:
            continue
        start = seed % have if dim == batch and want == 1 else 0
        x = x.narrow(dim, start, want)
    x = x.detach().clone()
    return x.to(torch.float64) if x.is_floating_point() else x
