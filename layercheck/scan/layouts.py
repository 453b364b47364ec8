"""Which dimension of each captured input is the batch (and the time): the sample forward run
again with the model's batch (and time) one longer, and the dimensions that followed it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from layercheck.parent.layout import Layout
from layercheck.scan.capture import Call
from layercheck.target.replay import replay


def grown(value: Any, dims: int | tuple[int, ...], *, double: bool = False) -> Any:
    """A model input one longer along ``dims`` (its first entry there repeated at the end), or
    twice as long (``double``: spatial dimensions, which a strided layer divides)."""
    for dim in (dims,) if isinstance(dims, int) else dims:
        if isinstance(value, torch.Tensor) and dim < value.dim():
            value = torch.cat([value, value if double else value.narrow(dim, 0, 1)], dim)
    return value


def inferred(call: Call, followed: dict[str, tuple[int, Call | None]]) -> list[Layout]:
    """The layout of every tensor input of ``call``: ``followed`` maps a label (B, T, S) to the
    model's size along it and the same call in the forward where that size was one longer (S:
    twice as long; None where that forward did not make the call). A dimension of that size
    that grew by one there is labelled so (the first only; S: every dimension that changed);
    another that changed is U; of those that did not
    change, the last longer than one is C and the rest U."""
    _, tensors = replay(call.layer, call.args, call.kwargs)
    others = {label: (size, None if other is None else replay(other.layer, other.args, other.kwargs)[1])
              for label, (size, other) in followed.items()}
    layouts = []
    for index, tensor in enumerate(tensors):
        labels: list[str] = []
        for dim, size in enumerate(tensor.shape):
            label = None
            for name, (model_size, their) in others.items():
                if their is None or len(their) != len(tensors) or their[index].dim() != tensor.dim():
                    continue
                now = their[index].shape[dim]
                if now != size:
                    if name == "S":  # any size that followed the model's spatial ones
                        label = "S"
                    else:
                        label = name if size == model_size and now == size + 1 and name not in labels else "U"
                    break
            labels.append(label or "?")
        fixed = [dim for dim, label in enumerate(labels) if label == "?" and tensor.shape[dim] > 1]
        for dim, label in enumerate(labels):
            if label == "?":
                labels[dim] = "C" if fixed and dim == fixed[-1] else "U"
        layouts.append(Layout(size=tuple(tensor.shape), format="".join(labels)))
    return layouts


def matching(calls: Sequence[Call]) -> dict[tuple[str, int], Call]:
    """Calls by (path, occurrence): how the same call is found in another forward."""
    return {(call.path, call.occurrence): call for call in calls}
