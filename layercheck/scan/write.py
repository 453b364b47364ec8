"""One spec per kind of layer, written to a folder with its captured inputs (``NAME.inputs.pt``)
and its layer (``NAME.pt``) beside it: ``layercheck run`` checks each alone."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import yaml

from layercheck.parent.layout import Layout
from layercheck.reporting.scan_tree import ScanEntry
from layercheck.scan.choose import Kind
from layercheck.target.replay import save_layer

# A floating input holding values this large (an additive attention mask's -3.4e38) or not finite
# is a constant of the call: finite differences cannot step through it.
MASK_MAGNITUDE = 1e30


def write_specs(kinds: Sequence[Kind], layouts: Sequence[Sequence[Layout] | None], folder: Path, *,
                imports: Sequence[str] = (), seed: int | None = None,
                references: Callable[[str], dict[str, Any]] | None = None) -> list[ScanEntry]:
    """Write a spec for every kind not skipped; every kind's entry of the scan tree. ``references``:
    the reference keys (``reference:``, ...) a kind's spec carries, by its class name."""
    folder.mkdir(parents=True, exist_ok=True)
    entries = []
    width = len(str(len(kinds)))
    for number, (kind, kind_layouts) in enumerate(zip(kinds, layouts), 1):
        entry = ScanEntry(path=kind.path, cls=kind.class_name, paths=tuple(kind.paths),
                          layouts=tuple(str(layout) for layout in kind_layouts or ()), skipped=kind.skipped)
        if kind.skipped is None:
            assert kind.replay is not None and kind_layouts is not None
            stem = f"{number:0{width}d}_{_file_name(kind.path)}"
            try:
                entry = entry.written(str(folder / f"{stem}.yaml"))
                reference = references(kind.class_name) if references else {}
                _write(kind, kind_layouts, folder, stem, imports, seed, reference)
            except _NotSaved as exc:
                entry = ScanEntry(path=kind.path, cls=kind.class_name, paths=tuple(kind.paths), layouts=entry.layouts,
                                  skipped=str(exc))
        entries.append(entry)
    return entries


class _NotSaved(Exception):
    pass


def _write(kind: Kind, layouts: Sequence[Layout], folder: Path, stem: str, imports: Sequence[str],
           seed: int | None, reference: dict[str, Any]) -> None:
    inputs = []
    for tensor, layout in zip(kind.tensors, layouts):
        entry: dict[str, Any] = {"layout": str(layout)}
        if tensor.is_floating_point():
            if not bool(torch.isfinite(tensor).all()) or float(tensor.abs().max()) >= MASK_MAGNITUDE:
                entry["requires_grad"] = False
        elif str(tensor.dtype).removeprefix("torch.") in ("int64", "int32", "bool"):
            entry["dtype"] = str(tensor.dtype).removeprefix("torch.")
        else:
            raise _NotSaved(f"called with a {tensor.dtype} tensor; layercheck generates int64, int32 and bool only")
        inputs.append(entry)
    try:
        save_layer(kind.replay, folder / f"{stem}.pt", imports)  # type: ignore[arg-type]
    except Exception as exc:
        raise _NotSaved(f"the layer cannot be saved for its check ({type(exc).__name__}: {exc})") from None
    torch.save([t.contiguous() for t in kind.tensors], folder / f"{stem}.inputs.pt")
    spec: dict[str, Any] = {"layer": f"{stem}.pt", "inputs_file": f"{stem}.inputs.pt", "inputs": inputs}
    if seed is not None:
        spec["seed"] = seed
    spec.update({key: list(value) if isinstance(value, tuple) else value for key, value in reference.items()})
    if reference.get("reference_map"):  # the layer and its reference run as Replays: their keys under "layer."
        spec["reference_map"] = {f"layer.{k}": f"layer.{v}" for k, v in reference["reference_map"].items()}
    calls = f"{kind.count} call{'s' * (kind.count != 1)}: {', '.join(p or '(model)' for p in kind.paths)}"
    header = (f"# layercheck scan: {kind.path or '(model)'} ({kind.class_name}), {calls}\n"
              f"# the layer and the inputs the model gave it are saved beside this file; check it alone with\n"
              f"#   layercheck run {folder / (stem + '.yaml')}\n")
    (folder / f"{stem}.yaml").write_text(header + yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")


def _file_name(path: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", path or "model")[:80]
