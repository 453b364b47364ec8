"""Which dimension of each captured input is the batch (and the time): the sample forward run
again with the model's batch (and time) one longer, and the dimensions that followed it."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from layercheck.layout import Layout
from layercheck.scan.capture import Call
from layercheck.scan.replay import replay


def grown(value: Any, dim: int) -> Any:
    """A model input one longer along ``dim``: its first entry there repeated at the end."""
    if not isinstance(value, torch.Tensor) or dim >= value.dim():
        return value
    return torch.cat([value, value.narrow(dim, 0, 1)], dim)


def inferred(call: Call, followed: dict[str, tuple[int, Call | None]]) -> list[Layout]:
    """The layout of every tensor input of ``call``: ``followed`` maps a label (B, T) to the
    model's size along it and the same call in the forward where that size was one longer
    (None where that forward did not make the call). A dimension of that size that grew by one
    there is labelled so (the first only); another that changed is U; of those that did not
    change, the last is C and the rest U."""
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
                    label = name if size == model_size and now == size + 1 and name not in labels else "U"
                    break
            labels.append(label or "?")
        fixed = [dim for dim, label in enumerate(labels) if label == "?"]
        for dim in fixed:
            labels[dim] = "C" if dim == fixed[-1] else "U"
        layouts.append(Layout(size=tuple(tensor.shape), format="".join(labels)))
    return layouts


def matching(calls: Sequence[Call]) -> dict[tuple[str, int], Call]:
    """Calls by (path, occurrence): how the same call is found in another forward."""
    return {(call.path, call.occurrence): call for call in calls}
