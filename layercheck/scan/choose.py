"""Which captured calls are checked, and once per kind: one check per distinct (class, constructor
configuration and parameter sizes, input signature), with the count and paths of the calls it
stands for; blocks after the layers inside them. A call whose arguments cannot be replayed is
kept with that reason, to be reported as skipped."""

from __future__ import annotations

import enum
import fnmatch
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from layercheck.scan.capture import Call
from layercheck.target.replay import Replay, leaves, replay

# Attributes that number a layer's place in the model (transformers' layer_idx): two decoder
# layers that differ only there are one kind.
_PLACE = re.compile(r"(^|_)(idx|index|layer_id|layer_number|layer_num)$")

# Values a captured call may hold besides its tensor inputs: written as they are and passed again.
_PLAIN = (type(None), bool, int, float, complex, str, bytes, torch.dtype, torch.device, torch.layout,
          torch.memory_format, slice, type(Ellipsis), enum.Enum)


@dataclass
class Kind:
    """One layer to check: the first call of its kind, and every path that kind was called at."""

    call: Call
    paths: list[str] = field(default_factory=list)
    skipped: str | None = None  # why it cannot be checked (arguments that cannot be replayed)
    replay: Replay | None = None
    tensors: list[torch.Tensor] = field(default_factory=list)

    @property
    def path(self) -> str:
        return self.call.path

    @property
    def count(self) -> int:
        return len(self.paths)

    @property
    def class_name(self) -> str:
        return class_name(self.call.cls)


def class_name(cls: type) -> str:
    """``module.Qualname``; a class from a file the loader imported is named by the file's stem."""
    module = cls.__module__
    if module.startswith("layercheck_user_"):  # loading._import_file's name: layercheck_user_STEM_DIGEST
        module = module.removeprefix("layercheck_user_").rpartition("_")[0]
    return f"{module}.{cls.__qualname__}"


def is_custom(cls: type) -> bool:
    """A class defined outside torch: the user's or a third party's."""
    return not (cls.__module__ == "torch" or cls.__module__.startswith("torch."))


def matches(call: Call, pattern: str) -> bool:
    """``pattern`` names the call's class (``RMSNorm``, ``mypkg.layers.RMSNorm``, a module prefix
    such as ``torch.nn``, or a glob of these) or its path (``layers.*.mlp``)."""
    name = class_name(call.cls)
    return (fnmatch.fnmatchcase(call.path, pattern) or fnmatch.fnmatchcase(name, pattern)
            or name.startswith(pattern + ".") or call.cls.__name__ == pattern)


def chosen(calls: Sequence[Call], include: Sequence[str] = (), exclude: Sequence[str] = ()) -> list[Call]:
    """The calls to check: of classes defined outside torch and of ``include``, less ``exclude``."""
    return [call for call in calls
            if (is_custom(call.cls) or any(matches(call, p) for p in include))
            and not any(matches(call, p) for p in exclude)]


def kinds(calls: Sequence[Call]) -> list[Kind]:
    """One Kind per distinct layer and input signature, the deepest first (a block after the
    layers inside it), else in call order."""
    found: dict[Any, Kind] = {}
    for call in calls:
        key = _key(call)
        if key in found:
            if call.path not in found[key].paths:
                found[key].paths.append(call.path)
            continue
        kind = found[key] = Kind(call, [call.path])
        kind.skipped = _not_replayable(call)
        if kind.skipped is None:
            kind.replay, kind.tensors = replay(call.layer, call.args, call.kwargs)
            if not kind.tensors:
                kind.skipped = "called with no tensor of at least one dimension: nothing to check it on"
    order = {id(kind): i for i, kind in enumerate(found.values())}
    return sorted(found.values(), key=lambda kind: (-depth(kind.path), order[id(kind)]))


def depth(path: str) -> int:
    """How deep a path lies (the model 0; a Function one below the module it ran in)."""
    if not path:
        return 0
    module, _, function = path.partition("/")
    return (module.count(".") + 1 if module else 0) + (1 if function else 0)


def _key(call: Call) -> Any:
    signature = tuple(_signature(v) for v in (*call.args, *sorted(call.kwargs.items())))
    if call.function is not None:
        return ("function", call.function, signature)
    module = call.module
    # the configuration of the module and of every module inside it (a block's layers' flags)
    config = tuple((name, type(m), m.extra_repr(),
                    tuple(sorted((k, repr(v)) for k, v in vars(m).items()
                                 if not k.startswith("_") and k != "training" and isinstance(v, _PLAIN)
                                 and not _PLACE.search(k))))
                   for name, m in module.named_modules())
    tensors = tuple((name, tuple(t.shape), t.dtype, t.requires_grad)
                    for name, t in [*module.named_parameters(), *module.named_buffers()])
    return ("module", config, tensors, signature)


def _signature(value: Any) -> Any:
    if isinstance(value, torch.Tensor):
        return ("tensor", tuple(value.shape), value.dtype)
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[0], str):  # a keyword argument
        return (value[0], _signature(value[1]))
    if isinstance(value, (tuple, list)):
        return tuple(_signature(v) for v in value)
    if isinstance(value, dict):
        return tuple((k, _signature(v)) for k, v in value.items())
    return repr(value)


def _not_replayable(call: Call) -> str | None:
    _, tensors = replay(call.layer, call.args, call.kwargs)
    template = (call.args, call.kwargs)
    for value in leaves(template):
        if isinstance(value, torch.Tensor):
            continue  # a 0-dimensional tensor is kept as a value
        if not isinstance(value, _PLAIN):
            return (f"called with a {type(value).__module__}.{type(value).__qualname__} argument, which cannot be "
                    "replayed (an object with its own state); check it with layercheck run and a spec")
    for tensor in tensors:
        if tensor.is_complex() or tensor.layout is not torch.strided or tensor.is_quantized:
            return f"called with a {tensor.dtype} {tensor.layout} tensor, which layercheck does not generate"
    return None
