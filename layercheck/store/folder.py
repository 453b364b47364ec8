"""The failure store, ``.layercheck/`` beside the spec (else the working directory), as hypothesis
keeps ``.hypothesis/``: each target's shrunk failing inputs, replayed first on its next run. No torch.

One JSON file per target (``.layercheck/failures/KEY.json``, KEY a hash of the layer reference,
its constructor call and its inputs). A saved failure that passes KEEP_PASSING runs in a row is
dropped; a target keeps at most MAX_PER_TARGET failures, a file at most MAX_FILE_BYTES, the store
at most MAX_FILES files (the oldest go first). A file that is not one of ours (corrupt, or
another tool's) is ignored with one warning and never overwritten.
"""

from __future__ import annotations

import datetime
import hashlib
import json
import os
from dataclasses import replace
from pathlib import Path
from typing import Any

from layercheck.store.settings import Exploration, Saved

SCHEMA = "layercheck.failures/1"
KEEP_PASSING = 3
MAX_PER_TARGET = 16
MAX_FILE_BYTES = 1 << 20
MAX_FILES = 256
FOLDER = ".layercheck"


def default_folder(source: Path | None) -> Path:
    """Where a target's failures are kept: ``.layercheck/`` beside its spec, else in the working directory."""
    return (source.parent if source is not None else Path.cwd()) / FOLDER


def key_of(plan: Any) -> str:
    """The store's name for a target (``plan``: a TargetPlan): the same layer, constructor call and
    inputs give the same key."""
    identity = json.dumps([plan.layer, str(Path(plan.base_dir).resolve()), [repr(i) for i in plan.inputs],
                           repr(tuple(plan.args)), repr(sorted(dict(plan.kwargs).items())),
                           repr(sorted(dict(plan.constants).items()))])
    return hashlib.sha256(identity.encode()).hexdigest()[:20]


def path_of(folder: Path, key: str) -> Path:
    return folder / "failures" / f"{key}.json"


def load(path: Path) -> tuple[tuple[Saved, ...], str | None]:
    """The failures kept in ``path`` (none where there is no file), and a warning where the file
    is not a store file of this version (then nothing is replayed from it)."""
    if not path.exists():
        return (), None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} file")
        return tuple(Saved.from_dict(entry) for entry in data["failures"]), None
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError) as exc:
        return (), f"ignoring {path}: not a layercheck failure store file ({type(exc).__name__}: {exc})"


def with_saved(exploration: Exploration, key: str) -> tuple[Exploration, str | None]:
    """``exploration`` with its target's saved failures to replay, and a warning line or None."""
    if exploration.store is None:
        return exploration, None
    saved, warning = load(path_of(exploration.store, key))
    return replace(exploration, saved=saved), warning


def update(exploration: Exploration, key: str, target: str, run: Any) -> str | None:
    """Keep a run's shrunk failures (``run``: a RunReport) in the store, count the saved ones that
    passed, drop those that passed KEEP_PASSING runs in a row; a warning line or None."""
    if exploration.store is None or run.error is not None:
        return None
    path = path_of(exploration.store, key)
    saved, warning = load(path)
    if warning is not None:
        return None  # said when it was read; another tool's file is left alone
    outcomes = {item.get("index"): item.get("outcome") for item in (run.explore or {}).get("replayed", [])}
    kept = []
    for index, entry in enumerate(saved):
        outcome = outcomes.get(index)
        if outcome == "passes":
            entry = replace(entry, passes=entry.passes + 1)
        elif outcome == "fails":
            entry = replace(entry, passes=0)
        if entry.passes < KEEP_PASSING:
            kept.append(entry)
    today = datetime.date.today().isoformat()
    for result in run.results:
        shrunk = result.details.get("shrunk") if result.status.value == "failed" else None
        if not shrunk or shrunk.get("text") is None or any(v is None for v in shrunk.get("values", [None])):
            continue
        entry = Saved(result.check, result.variant, int(shrunk.get("seed", 0)), tuple(shrunk["inputs"]),
                      tuple(shrunk["values"]), found=today)
        if not any((e.check, e.variant, e.inputs, e.values) == (entry.check, entry.variant, entry.inputs, entry.values)
                   for e in kept):
            kept.append(entry)
    if kept == list(saved):
        return None
    return _write(path, target, kept[-MAX_PER_TARGET:])


def _write(path: Path, target: str, entries: list[Saved]) -> str | None:
    while True:
        text = json.dumps({"schema": SCHEMA, "target": target, "failures": [e.to_dict() for e in entries]})
        if len(text) <= MAX_FILE_BYTES or not entries:
            break
        entries = entries[1:]  # the oldest go first
    try:
        if not entries:
            path.unlink(missing_ok=True)
            return None
        path.parent.mkdir(parents=True, exist_ok=True)
        temporary = path.with_suffix(".tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
        _bound(path.parent)
    except OSError as exc:
        return f"could not keep failures in {path}: {exc.strerror or exc}"
    return None


def _bound(folder: Path) -> None:
    """At most MAX_FILES target files: the least recently written go."""
    files = sorted(folder.glob("*.json"), key=lambda p: p.stat().st_mtime)
    for old in files[:-MAX_FILES]:
        old.unlink(missing_ok=True)
