"""What ``layercheck scan`` does before its specs run as ``layercheck run DIR`` runs a folder:
the model resolved (a reference, or a model spec's ``model:``), built, its weights loaded, its
sample inputs made, surveyed and its specs written. Imports torch (inside the scan command only)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layercheck.parent.errors import UsageError
from layercheck.parent.inputs import InputSpec
from layercheck.parent.result import Report
from layercheck.reporting.scan_tree import ScanEntry, arrange
from layercheck.scan.modelspec import ModelSpec


class Unscannable(Exception):
    """The model cannot be built, or its sample forward raises: the message (with the traceback)."""


@dataclass(frozen=True)
class Prepared:
    """The kinds of layer found and the specs written for them."""

    entries: list[ScanEntry]
    notes: list[str]

    def lines(self, folder: Path) -> list[str]:
        """What the command line prints before the checks: notes, each layer's inferred layouts."""
        checked = [entry for entry in self.entries if entry.skipped is None]
        return [*(f"note: {note}" for note in self.notes),
                *(f"{e.path or '(model)'} ({e.cls.rpartition('.')[2]}): {' '.join(e.layouts)}" for e in checked),
                f"specs written to {folder}"]

    def arrange(self, report: Report) -> Report:
        """The report of the specs' run with the scan's tree."""
        return arrange(report, self.entries)


def prepare(spec: ModelSpec, folder: Path, *, seed: int) -> Prepared:
    """Build the model of ``spec``, survey it and write its specs into ``folder``. Raises
    UsageError for inputs that do not fit or a model with nothing to check, Unscannable where
    the model cannot be built or its forward raises."""
    from layercheck.parent.errors import LoadError

    try:
        prepared = _prepare(spec, folder, seed=seed)
    except LoadError as exc:
        trace = getattr(exc, "trace", "")
        raise Unscannable((trace.rstrip() + "\n" if trace else "") + f"layercheck: error: {exc}") from None
    if not any(entry.spec for entry in prepared.entries):
        skipped = sum(entry.skipped is not None for entry in prepared.entries)
        raise UsageError(f"{spec.model}: nothing to check: the model holds no layer defined outside torch"
                         + (f" that can be replayed ({skipped} skipped)" if skipped else "")
                         + "; --include torch.nn checks torch's own layers too")
    return prepared


def _prepare(spec: ModelSpec, folder: Path, *, seed: int) -> Prepared:
    from layercheck.parent.sources import is_file_reference, split_reference
    from layercheck.scan.model import (
        build_model,
        drawn_inputs,
        guessed_labels,
        load_weights,
        model_dims,
        read_inputs,
        scan_to_folder,
    )
    from layercheck.target.loading import TargetNotFound, resolve

    try:
        factory = resolve(spec.model, base_dir=spec.base_dir)
    except TargetNotFound as exc:
        raise UsageError(str(exc)) from None
    model = build_model(factory, spec.args, spec.kwargs, seed=seed, reference=spec.model)
    if spec.weights is not None:
        load_weights(model, spec.weights)
    specs: Sequence[InputSpec] | None
    if spec.inputs_file is not None:
        args, kwargs = read_inputs(spec.inputs_file)
        specs = None
    else:
        specs = spec.inputs
        args, kwargs = drawn_inputs(specs, seed)
    dims = model_dims(specs, args, kwargs)
    where, _ = split_reference(spec.model)
    imports = [str((spec.base_dir / where).resolve())] if is_file_reference(where) else []
    survey, entries = scan_to_folder(model, args, kwargs, folder, dims=dims, include=spec.include,
                                     exclude=spec.exclude, guessed=guessed_labels(specs), imports=imports,
                                     seed=seed, references=spec.reference_for)
    named = {cls for e in entries if e.spec for cls in (e.cls, e.cls.rpartition(".")[2])}
    unmatched = [cls for cls in spec.references if cls not in named]
    notes = [*survey.notes, *(f"references: {cls} names no layer this scan checks (its classes: "
                              f"{', '.join(sorted({e.cls.rpartition('.')[2] for e in entries if e.spec}))})"
                              for cls in unmatched)]
    return Prepared(entries, notes)


def model_spec(target: str, *, inputs: Sequence[InputSpec], inputs_file: Path | None, weights: Path | None,
               include: Sequence[str], exclude: Sequence[str], args: Sequence[Any],
               kwargs: dict[str, Any]) -> ModelSpec:
    """The command line's model as a ModelSpec: a model spec file (the options add to it), or a
    reference with ``--input``/``--inputs``. Raises UsageError."""
    from layercheck.parent.errors import SpecError
    from layercheck.parent.sources import check_reference
    from layercheck.parent.spec import is_spec_path
    from layercheck.scan.modelspec import load_model_spec

    path = Path(target)
    if is_spec_path(path):
        if not path.is_file():
            raise UsageError(f"{target}: no such spec file")
        if args or kwargs:
            raise UsageError("--arg and --kwarg build a model given by reference; a model spec has args: and kwargs:")
        try:
            spec = load_model_spec(path)
        except SpecError as exc:
            raise UsageError(str(exc)) from None
        check_reference(spec.model, base_dir=spec.base_dir)
        for keys in spec.references.values():
            if keys["reference"] != "autograd":
                check_reference(keys["reference"], base_dir=spec.base_dir)
        if inputs or inputs_file is not None:
            spec = ModelSpec(**{**spec.__dict__, "inputs": tuple(inputs), "inputs_file": inputs_file})
        return ModelSpec(**{**spec.__dict__, "weights": weights or spec.weights,
                            "include": (*spec.include, *include), "exclude": (*spec.exclude, *exclude)})
    check_reference(target, base_dir=Path.cwd())
    if bool(inputs) == (inputs_file is not None):
        raise UsageError(f"{target}: give the model's sample inputs, --input SIZES:FORMAT once per input "
                         "(e.g. --input 2,16:BT dtype=int64 values=0:100) or --inputs FILE.pt, one of the two")
    return ModelSpec(model=target, args=tuple(args), kwargs=dict(kwargs), inputs=tuple(inputs),
                     inputs_file=inputs_file, weights=weights, include=tuple(include), exclude=tuple(exclude))
