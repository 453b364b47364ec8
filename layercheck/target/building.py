"""How the layer every check starts from is made: its ``initialize(*layouts)`` hook or a lazy
module's first call, a first training call that initialises it from the data (Note
[data-dependent initialisation]), and another layer given its parameters and buffers."""

from __future__ import annotations

import copy
import inspect
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch
from torch import nn

from layercheck.parent.errors import LayerRaised
from layercheck.parent.inputs import InputSpec
from layercheck.parent.layout import Layout
from layercheck.target.frames import user_trace
from layercheck.target.seeding import seeded


class Target(Protocol):
    """What building a layer reads of its target (layercheck.target.subject.Target, which imports this
    module: a protocol, not an import, keeps the two out of a circle)."""

    seed: int
    home: torch.device
    specs: tuple[InputSpec, ...]

    @property
    def positional(self) -> tuple[Layout, ...]: ...

    def inputs(self, dtype: torch.dtype = ..., device: torch.device | str | None = ..., *,
               requires_grad: bool = ..., seed: int | None = ..., share: bool = ...,
               observations: int | None = ...) -> list[torch.Tensor]: ...

    def split(self, inputs: Sequence[Any]) -> tuple[list[Any], dict[str, Any]]: ...


def initialize_hook(layer: Any) -> Callable[..., Any] | None:
    """The layer's (or its class's) ``initialize(*layouts)`` hook: an ``initialize`` that takes
    a layout, as a positional parameter without a default or as ``*layouts``. One that takes
    none (segmentation_models_pytorch's models have an ``initialize()`` that initialises their
    decoder and head, and call it themselves) or only options with defaults is the layer's own
    method, which layercheck leaves alone."""
    hook = getattr(layer, "initialize", None)
    if not callable(hook):
        return None
    try:
        params = list(inspect.signature(hook).parameters.values())
    except (TypeError, ValueError):
        return hook
    if isinstance(layer, type) and params and not isinstance(inspect.getattr_static(layer, "initialize"),
                                                             (staticmethod, classmethod)):
        params = params[1:]  # the class's function: self first
    takes = any(p.kind is p.VAR_POSITIONAL or (p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)
                                               and p.default is p.empty) for p in params)
    return hook if takes else None


def initialize(layer: nn.Module, target: Target, seed: int) -> None:
    """Run the layer's ``initialize(*layouts)`` hook (one layout per positional input), or a
    lazy module's first call on the generated float32 inputs."""
    hook = initialize_hook(layer)
    if hook is not None:
        with seeded(seed):
            try:
                hook(*target.positional)
            except Exception as exc:
                raise LayerRaised("initialize", exc, user_trace(exc)) from exc
    if has_uninitialized_parameters(layer):
        was_training = layer.training
        layer.eval()
        positional, keywords = target.split(target.inputs(torch.float32))
        with seeded(seed), torch.no_grad():
            try:
                layer(*positional, **keywords)
            except Exception as exc:
                raise LayerRaised("initialize", exc, user_trace(exc)) from exc
        layer.train(was_training)


# Note [data-dependent initialisation]
#     Glow's ActNorm (normflows', nflows') sets its scale and shift from the statistics of the
#     first batch it sees, in its first call, through ``.data`` (autograd holds them constant):
#     a user's first training batch initialises it, and from then on it is an elementwise affine
#     map. Every check starting from the constructed layer would see that first call instead: the
#     finite differences move the initialisation with the input (the gradient "wrong"), one
#     observation alone initialises from a batch of one (the standard deviation of one value is
#     NaN). So a layer whose first training call changes its parameters, and whose second call
#     does not, is taken to initialise itself from the data: asked once per target on a copy, on
#     a few observations, and then the pristine layer (and every layer built from it) is given
#     that first call on the generated float32 inputs, as a user's first batch, before any check
#     runs. The initialize check says so. A layer that changes its parameters in every call (fast
#     weights) is not one: nothing is done for it.
_PROBE_OBSERVATIONS = 4


def initialises_on_first_call(layer: nn.Module, target: Target) -> bool:
    """Note [data-dependent initialisation]: whether the first training call (no grad) of a
    copy of ``layer`` changes its parameters and a second one does not."""
    if not any(True for _ in layer.parameters()):
        return False
    try:
        probe = copy.deepcopy(layer)
    except Exception:
        return False
    inputs = target.inputs(torch.float32, observations=_PROBE_OBSERVATIONS)

    def values() -> list[torch.Tensor]:
        return [p.detach().clone() for p in probe.parameters()]

    def same(a: list[torch.Tensor], b: list[torch.Tensor]) -> bool:
        return len(a) == len(b) and all(x.shape == y.shape and torch.equal(x, y) for x, y in zip(a, b))

    try:
        before = values()
        first_call(probe, target, inputs)
        after = values()
        if same(before, after):
            return False  # the first call leaves the parameters: every ordinary layer stops here
        first_call(probe, target, inputs)
        return same(after, values())
    except Exception:  # a layer that raises: the checks report it
        return False


def first_call(layer: nn.Module, target: Target, inputs: list[torch.Tensor] | None = None) -> None:
    """The layer's first training call (no grad, seeded), as a user's first batch makes it:
    Note [data-dependent initialisation]."""
    inputs = target.inputs(torch.float32) if inputs is None else inputs
    positional, keywords = target.split(inputs)
    was_training = layer.training
    layer.train()
    try:
        with seeded(target.seed, target.home), torch.no_grad():  # the device's stream too (--on cuda)
            layer(*positional, **keywords)
    except Exception as exc:  # on the whole batch, where the probe's few observations ran
        raise LayerRaised("initialize", exc, user_trace(exc)) from exc
    finally:
        layer.train(was_training)


def same_tensors(layer: nn.Module, source: nn.Module) -> bool:
    """Whether two layers hold the same parameters and buffers: names, sizes, types, values."""
    def held(module: nn.Module) -> dict[str, torch.Tensor]:
        return {**dict(module.named_parameters(remove_duplicate=False)),
                **dict(module.named_buffers(remove_duplicate=False))}

    mine, theirs = held(layer), held(source)
    return mine.keys() == theirs.keys() and all(
        a.shape == b.shape and a.dtype == b.dtype and (a.is_meta or b.is_meta or torch.equal(a.detach(), b.detach()))
        for a, b in ((mine[name], theirs[name]) for name in mine))


def load_tensors(layer: nn.Module, source: nn.Module) -> None:
    """Give ``layer`` the values of ``source``'s parameters and buffers (non-persistent ones
    too), by name: a constructor that draws from another random stream than torch's, or keeps
    a counter, still yields the same layer for every check."""
    with torch.no_grad():
        values = dict(source.named_parameters(remove_duplicate=False))
        for name, p in layer.named_parameters(remove_duplicate=False):
            if name in values and values[name].shape == p.shape:
                p.copy_(values[name])
        buffers = dict(source.named_buffers(remove_duplicate=False))
        for prefix, mod in layer.named_modules():
            for key, buf in mod._buffers.items():
                value = buffers.get(f"{prefix}.{key}" if prefix else key)
                if value is None or buf is None:
                    continue
                if buf.shape == value.shape and buf.dtype == value.dtype:
                    buf.copy_(value)
                else:
                    mod._buffers[key] = value.clone()


def has_uninitialized_parameters(layer: nn.Module) -> bool:
    from torch.nn.parameter import is_lazy

    return any(is_lazy(p) for p in layer.parameters()) or any(is_lazy(b) for b in layer.buffers())
