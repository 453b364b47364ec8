"""The reference a target names, and the reference built with the layer's parameter values."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import nn

from layercheck.parent.errors import LoadError
from layercheck.parent.spec import AUTOGRAD
from layercheck.target.loading import resolve
from layercheck.target.replay import Replay
from layercheck.target.subject import Subject, Target, display_name, kind_of


@dataclass(frozen=True)
class Reference:
    """What a target is judged against: a layer (a class, an instance, an ``autograd.Function``,
    an operator or a function) or ``"autograd"``; its constructor arguments (None: the layer's);
    ``mapping``: the layer's state_dict keys renamed to the reference's (``reference_map``)."""

    layer: Any
    name: str
    args: tuple[Any, ...] | None = None
    kwargs: Mapping[str, Any] | None = None
    mapping: Mapping[str, str] = field(default_factory=dict)

    @property
    def autograd(self) -> bool:
        """``reference: autograd``: the layer's own forward differentiated by autograd."""
        return isinstance(self.layer, str) and self.layer == AUTOGRAD

    def target(self, of: Target) -> Target:
        """The reference as a target with ``of``'s inputs, seed, call constants and device."""
        layer = of.instance if self.autograd and of.instance is not None else of.cls if self.autograd else self.layer
        module = kind_of(layer) == "module"
        args: tuple[Any, ...]
        kwargs: Mapping[str, Any]
        if self.autograd:
            args, kwargs = of.args, of.kwargs
        else:
            args = (self.args if self.args is not None else of.args) if module else ()
            kwargs = (self.kwargs if self.kwargs is not None else of.kwargs) if module else {}
        if isinstance(of.instance, Replay) and not self.autograd and (
                module or kind_of(layer) == "function"):  # Note [a captured layer's reference]
            try:
                inner = layer(*args, **kwargs) if isinstance(layer, type) and module else layer
            except Exception as exc:
                raise LoadError(f"reference {self.name}: constructing it raised {type(exc).__name__}: {exc}") from None
            layer = Replay(inner, of.instance.template)
        if isinstance(layer, nn.Module):
            args, kwargs = (), {}
        return Target(layer, of.specs, args=args, kwargs=dict(kwargs), seed=of.seed, name=self.name,
                      invocation=of.invocation, constants=of.constants, on=of.home)

    # Note [a captured layer's reference]
    #     A layer `layercheck scan` captured runs as a Replay: the captured call's template puts the
    #     generated tensors back among its other arguments, and the layer's parameters are the
    #     Replay's under "layer.". Its reference (references: in the model spec) is constructed
    #     (with reference_args/reference_kwargs, none by default: the captured instance's own
    #     constructor arguments are not known) and replayed with the same template, so that it is
    #     called as the layer was and its state_dict keys are named as the layer's.

    def check(self, of: Target) -> None:
        """Raise LoadError, one clear line, when the reference cannot take the layer's parameter
        values: a name or a size that does not match (through ``mapping``). Run once, after the
        layer is constructed and before any check."""
        if self.autograd:
            return
        ref = self.target(of)
        layer_state = _state(of.pristine())
        try:
            ref_state = _state(ref.pristine())
        except LoadError as exc:
            raise LoadError(f"reference {self.name}: {exc}") from None
        except Exception as exc:  # initialize of the reference raised (LayerRaised)
            inner = getattr(exc, "exc", exc)
            raise LoadError(f"reference {self.name}: building it raised {type(inner).__name__}: {inner}") from None
        problem = mismatch(layer_state, ref_state, self.mapping)
        if problem is not None:
            raise LoadError(f"reference {self.name} does not take the layer's parameter values: {problem}")

    def build(self, of: Target, layer: Subject, dtype: torch.dtype) -> Subject:
        """The reference in ``dtype`` on ``layer``'s device, holding ``layer``'s parameter and
        buffer values (cast to ``dtype``): the same function, computed the reference's way."""
        subject = self.target(of).build(dtype=dtype, device=layer.device)
        if subject.module is not None and layer.module is not None and not self.autograd:
            renamed = {self.mapping.get(key, key): value for key, value in layer.module.state_dict().items()}
            with torch.no_grad():
                subject.module.load_state_dict(renamed, strict=True)
        elif subject.module is not None and layer.module is not None:
            with torch.no_grad():
                subject.module.load_state_dict(layer.module.state_dict(), strict=True)
        return subject


def _state(layer: nn.Module | None) -> dict[str, torch.Tensor]:
    return {} if layer is None else dict(layer.state_dict())


def mismatch(layer: Mapping[str, torch.Tensor], reference: Mapping[str, torch.Tensor],
             mapping: Mapping[str, str]) -> str | None:
    """Why the layer's state_dict ``layer``, renamed by ``mapping``, is not loadable into the
    reference's ``reference`` (every key once, each of its size), or None."""
    unknown = [key for key in mapping if key not in layer]
    if unknown:
        return (f"reference_map names {', '.join(map(repr, unknown))}, which the layer does not have "
                f"(its parameters and buffers: {_listed(layer)})")
    renamed = {mapping.get(key, key): key for key in layer}
    if len(renamed) != len(layer):
        return "reference_map maps two of the layer's tensors to one name of the reference"
    missing = [key for key in renamed if key not in reference]
    extra = [key for key in reference if key not in renamed]
    if missing or extra:
        said = []
        if missing:
            said.append(f"the layer's {', '.join(repr(renamed[key]) for key in missing)} "
                        f"{'has' if len(missing) == 1 else 'have'} no counterpart in the reference")
        if extra:
            said.append(f"the reference's {', '.join(map(repr, extra))} {'gets' if len(extra) == 1 else 'get'} "
                        "no value from the layer")
        hint = ""
        if len(missing) == 1 and len(extra) == 1:
            hint = f"; if they are the same tensor, reference_map: {{{renamed[missing[0]]}: {extra[0]}}}"
        return (f"{' and '.join(said)} (layer: {_listed(layer)}; reference: {_listed(reference)}){hint}")
    for key, name in renamed.items():
        if tuple(layer[name].shape) != tuple(reference[key].shape):
            return (f"the layer's {name!r} has size {list(layer[name].shape)}, the reference's {key!r} "
                    f"{list(reference[key].shape)}")
    return None


def _listed(state: Mapping[str, torch.Tensor]) -> str:
    return ", ".join(list(state)[:8]) + (", ..." if len(state) > 8 else "") if state else "none"


def reference_of(given: Any, *, name: str | None = None, args: Any = None, kwargs: Any = None,
                 mapping: Mapping[str, str] | None = None, base_dir: Path | None = None) -> Reference:
    """The Reference a target names: a string (``file.py:Class``, ``module:Class``,
    ``"autograd"``) resolved from ``base_dir``, or a layer object (the Python API). Raises
    LoadError when it names nothing that can be checked."""
    if isinstance(given, str):
        text = given.strip()
        if text == AUTOGRAD:
            return Reference(AUTOGRAD, "autograd (the layer's own forward)")
        try:
            layer = resolve(text, base_dir=base_dir)
        except LoadError as exc:
            raise LoadError(f"reference: {exc}") from None
        label = text
    else:
        if kind_of(given) is None:
            raise LoadError(f"reference: {given!r} is not a torch.nn.Module, an autograd.Function, a custom "
                            "operator or a function, nor 'autograd'")
        layer = given
        label = name or display_name(type(given) if isinstance(given, nn.Module) else given)
    return Reference(layer, label, None if args is None else tuple(args), None if kwargs is None else dict(kwargs),
                     dict(mapping or {}))
