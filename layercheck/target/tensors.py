"""Walks over what a layer returns and over its autograd graph: the tensors of an output in
order, the floating ones, the graph's nodes and the hand-written Functions among them."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch


def tensors_in(obj: Any) -> list[torch.Tensor]:
    """Every tensor in an output: tuples, lists and dict values, depth first, in order."""
    return [leaf for leaf in leaves_in(obj) if leaf is not None]


def leaves_in(obj: Any) -> list[torch.Tensor | None]:
    """The tensors and the Nones of an output (``return y, None``), in the order of :func:`tensors_in`."""
    if obj is None or isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, dict):
        return [leaf for v in obj.values() for leaf in leaves_in(v)]
    if isinstance(obj, (tuple, list)):
        return [leaf for v in obj for leaf in leaves_in(v)]
    return []


def floating(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """The floating-point ones (integer outputs are ignored by numerical checks)."""
    return [t for t in tensors if t.is_floating_point()]


def backward_nodes(outputs: Sequence[torch.Tensor], limit: int = 100_000) -> Iterator[Any]:
    """Every node of the outputs' autograd graph, once each (at most ``limit``)."""
    # Node objects are made on demand by torch and freed when no one holds them: an id seen
    # before may come back as another node's. Holding every node seen keeps the ids apart (on
    # torch 2.11 the walk stopped short of a once_differentiable node that way).
    seen: dict[int, Any] = {}
    stack = [t.grad_fn for t in outputs if t.grad_fn is not None]
    while stack and len(seen) < limit:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen[id(node)] = node
        yield node
        stack.extend(fn for fn, _ in node.next_functions if fn is not None)


def custom_backward_nodes(outputs: Sequence[torch.Tensor], limit: int = 100_000) -> list[str]:
    """Names of the hand-written ``autograd.Function`` backward nodes in the outputs' graph."""
    names: list[str] = []
    for node in backward_nodes(outputs, limit):
        if isinstance(node, torch.autograd.function.BackwardCFunction):
            name = type(node).__name__.removesuffix("Backward")
            if name not in names:
                names.append(name)
    return names


def custom_functions(outputs: Sequence[torch.Tensor], limit: int = 100_000) -> list[type[torch.autograd.Function]]:
    """The user's ``autograd.Function`` classes in the outputs' graph (torch's own excluded)."""
    classes: list[type[torch.autograd.Function]] = []
    for node in backward_nodes(outputs, limit):
        cls = getattr(type(node), "_forward_cls", None)
        if cls is not None and not cls.__module__.startswith("torch") and cls not in classes:
            classes.append(cls)
    return classes


@dataclass(frozen=True)
class Outputs:
    """A layer call's result, with its tensors pulled out in order."""

    raw: Any
    tensors: list[torch.Tensor]

    @classmethod
    def of(cls, raw: Any) -> Outputs:
        return cls(raw, tensors_in(raw))

    @property
    def floating(self) -> list[torch.Tensor]:
        return floating(self.tensors)
