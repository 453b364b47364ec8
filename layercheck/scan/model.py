"""A model to scan: built from its reference (a module class or a factory function), its weights
loaded, its sample inputs drawn from layouts or read from a file; then surveyed: captured,
its layers chosen and grouped, their layouts inferred."""

from __future__ import annotations

import inspect
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from layercheck.parent.errors import LoadError, UsageError
from layercheck.parent.inputs import InputSpec
from layercheck.parent.layout import Layout
from layercheck.reporting.scan_tree import ScanEntry
from layercheck.scan.capture import ForwardRaised, capture
from layercheck.scan.choose import Kind, chosen, kinds
from layercheck.scan.layouts import grown, inferred, matching
from layercheck.scan.write import write_specs
from layercheck.target.seeding import seeded
from layercheck.target.subject import draw, input_dtype


def build_model(factory: Any, args: Sequence[Any], kwargs: dict[str, Any], *, seed: int, reference: str) -> nn.Module:
    """The model a class or factory function makes (seeded). Raises LoadError."""
    try:
        with seeded(seed):
            model = factory(*args, **kwargs)
    except Exception as exc:
        raise LoadError(f"{reference}: building the model raised {type(exc).__name__}: {exc}") from None
    if not isinstance(model, nn.Module):
        raise LoadError(f"{reference}: made a {type(model).__name__}, not a torch.nn.Module")
    return model


def load_weights(model: nn.Module, path: Path) -> None:
    """Load a state_dict (or a checkpoint holding one under ``state_dict``). Raises UsageError."""
    state = _saved(path, "--weights", "not a saved state_dict")
    if isinstance(state, dict) and isinstance(state.get("state_dict"), dict):
        state = state["state_dict"]
    try:
        model.load_state_dict(state)
    except Exception as exc:
        raise UsageError(f"--weights {path}: does not fit the model: {str(exc).splitlines()[0]}") from None


def _saved(path: Path, option: str, unreadable: str) -> Any:
    """What ``torch.load`` reads from ``path`` (tensors only); a missing or unreadable file is one
    UsageError naming ``option``."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise UsageError(f"{option} {path}: no such file") from None
    except Exception as exc:
        raise UsageError(f"{option} {path}: {unreadable} ({type(exc).__name__}: {exc})") from None


def drawn_inputs(specs: Sequence[InputSpec], seed: int) -> tuple[list[Any], dict[str, Any]]:
    """Sample inputs drawn from ``--input`` layouts (floating ones in float32)."""
    tensors = [draw(spec, seed * 1_000_003 + i).to(input_dtype(spec, torch.float32)) for i, spec in enumerate(specs)]
    return ([x for spec, x in zip(specs, tensors) if spec.name is None],
            {spec.name: x for spec, x in zip(specs, tensors) if spec.name is not None})


def read_inputs(path: Path) -> tuple[list[Any], dict[str, Any]]:
    """Saved sample inputs: a tensor, a tuple or list (positional), or a dict (keyword). Raises UsageError."""
    saved = _saved(path, "--inputs", "cannot read it")
    if isinstance(saved, torch.Tensor):
        return [saved], {}
    if isinstance(saved, (tuple, list)):
        return list(saved), {}
    if isinstance(saved, dict) and all(isinstance(k, str) for k in saved):
        return [], dict(saved)
    raise UsageError(f"--inputs {path}: holds a {type(saved).__name__}; expected a tensor, a tuple of inputs or a "
                     "dict of keyword inputs")


@dataclass
class Survey:
    """What the sample forwards found: the kinds to check and each one's inferred layouts."""

    kinds: list[Kind]
    layouts: list[list[Layout] | None]
    notes: list[str] = field(default_factory=list)


Dims = dict[int | str, tuple[int, ...]]  # model input (position or keyword) -> its dimensions of one label


def survey(model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any], *, dims: dict[str, Dims],
           include: Sequence[str] = (), exclude: Sequence[str] = (), guessed: Sequence[str] = ()) -> Survey:
    """Capture the sample forward, choose and group the layers, infer their layouts from the
    forwards at a batch and a time one longer and at spatial sizes twice as large (``dims``:
    label -> each model input's dimensions of that label; ``guessed``: the labels whose
    dimensions were guessed, not given, so that a forward raising there says only that they
    are not so labelled). Raises UsageError where the inputs do not fit the model's forward, ForwardRaised where the
    forward raises."""
    _check_signature(model, args, kwargs)
    calls = capture(model, args, kwargs)
    found = kinds(chosen(calls, include, exclude))
    notes: list[str] = []
    followed: dict[str, tuple[int, dict[tuple[str, int], Any] | None]] = {}
    for label, of_label in dims.items():
        if not of_label:
            continue
        sizes = {_size(args, kwargs, key, dim) for key, positions in of_label.items() for dim in positions}
        if len(sizes) != 1 and label != "S":
            raise UsageError(f"the model's inputs disagree on their {label} size ({sorted(sizes)}): give them one")
        double = label == "S"
        more_args = [grown(x, of_label[i], double=double) if i in of_label else x for i, x in enumerate(args)]
        more_kwargs = {k: grown(x, of_label[k], double=double) if k in of_label else x for k, x in kwargs.items()}
        try:
            followed[label] = (sizes.pop(), matching(capture(model, more_args, more_kwargs)))
        except ForwardRaised as exc:
            if label in guessed:
                continue
            notes.append(f"the model's forward with its {label} dimensions {'doubled' if double else 'one longer'} "
                         f"raised ({exc}): no dimension of its layers' inputs is labelled {label}")
    layouts: list[list[Layout] | None] = []
    for kind in found:
        if kind.skipped is not None:
            layouts.append(None)
            continue
        key = (kind.call.path, kind.call.occurrence)
        layouts.append(inferred(kind.call, {label: (size, None if calls_there is None else calls_there.get(key))
                                            for label, (size, calls_there) in followed.items()}))
    return Survey(found, layouts, notes)


def _size(args: Sequence[Any], kwargs: dict[str, Any], key: int | str, dim: int) -> int:
    value = args[key] if isinstance(key, int) else kwargs[key]
    return int(value.shape[dim])


def _check_signature(model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any]) -> None:
    try:
        signature = inspect.signature(model.forward)
    except (TypeError, ValueError):
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        given = f"{len(args)} positional input{'s' * (len(args) != 1)}" + (
            f" and {', '.join(kwargs)}" if kwargs else "")
        raise UsageError(f"the model's forward{signature} does not take {given} ({exc}); give one --input per "
                         "input it needs") from None


def scan_to_folder(model: nn.Module, args: Sequence[Any], kwargs: dict[str, Any], folder: Path, *,
                   dims: dict[str, Dims], include: Sequence[str] = (), exclude: Sequence[str] = (),
                   guessed: Sequence[str] = (), imports: Sequence[str] = (), seed: int | None = None,
                   references: Callable[[str], dict[str, Any]] | None = None) -> tuple[Survey, list[ScanEntry]]:
    """Survey the model and write a spec for each kind of layer into ``folder`` (``references``: the
    reference keys of a layer class's spec)."""
    found = survey(model, args, kwargs, dims=dims, include=include, exclude=exclude, guessed=guessed)
    return found, write_specs(found.kinds, found.layouts, folder, imports=imports, seed=seed, references=references)


def guessed_labels(specs: Sequence[InputSpec] | None) -> tuple[str, ...]:
    """The labels :func:`model_dims` guesses where no layouts are given."""
    return ("T",) if specs is None else ()


def model_dims(specs: Sequence[InputSpec] | None, args: Sequence[Any], kwargs: dict[str, Any]) -> dict[str, Dims]:
    """Each model input's B, T and S dimensions: from its layout, or (inputs read from a file or
    given as tensors, no layouts) guessed: the first dimension of the first tensor is the batch,
    and the first of every other tensor of that size; the second dimension of those (of the
    size the first one's has, more than one) the time. A guess is what the forwards at a batch
    and a time one longer try (:func:`survey`'s ``guessed``): a time the forward does not take
    (it was a width) labels nothing."""
    dims: dict[str, Dims] = {"B": {}, "T": {}, "S": {}}
    if specs is None:
        named: list[tuple[int | str, Any]] = [*enumerate(args), *kwargs.items()]
        tensors = [(name, value) for name, value in named if isinstance(value, torch.Tensor) and value.dim() > 0]
        if tensors:
            batch = tensors[0][1].shape[0]
            dims["B"] = {name: (0,) for name, value in tensors if value.shape[0] == batch}
        longer = [(name, value) for name, value in tensors if value.dim() > 1 and name in dims["B"]]
        if longer and longer[0][1].shape[1] > 1:
            time = longer[0][1].shape[1]
            dims["T"] = {name: (1,) for name, value in longer if value.shape[1] == time}
        return dims
    position = 0
    for spec in specs:
        key: int | str = spec.name if spec.name is not None else position
        position += spec.name is None
        for label in dims:
            if spec.layout.finddim(label):
                dims[label][key] = spec.layout.finddim(label)[:1] if label != "S" else spec.layout.finddim(label)
    return dims
