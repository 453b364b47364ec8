"""The report of a scan as a tree of module paths: each kind of layer with its verdict, count,
paths, inferred layouts and the spec written for it (the JSON ``scan`` section); a block whose
failure a layer inside it shares says which. No torch here."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layercheck.parent.result import Report, RunReport, Status


@dataclass(frozen=True)
class ScanEntry:
    """One kind of layer found in the model."""

    path: str  # the first path it was called at ("" for the model)
    cls: str  # module.Qualname
    paths: tuple[str, ...]
    layouts: tuple[str, ...]  # inferred, one per tensor input
    spec: str | None = None  # the spec written for it
    skipped: str | None = None  # why it was not checked

    def written(self, spec: str) -> ScanEntry:
        return dataclasses.replace(self, spec=spec)


def arrange(report: Report, entries: Sequence[ScanEntry]) -> Report:
    """``report`` (one run per spec written) with its ``scan`` section: an entry per kind in tree
    order (by path), with its run's status, and for a failed block the failed layers inside it."""
    runs = {str(Path(run.target).resolve()): run for run in report.runs}
    rows: list[dict[str, Any]] = []
    for entry in entries:
        run = runs.get(str(Path(entry.spec).resolve())) if entry.spec is not None else None
        status = "skipped" if entry.skipped is not None else (run.status.value if run is not None else "not run")
        rows.append({"path": entry.path, "class": entry.cls, "count": len(entry.paths), "paths": list(entry.paths),
                     "layouts": list(entry.layouts), "spec": entry.spec, "target": run.target if run else None,
                     "status": status, "reason": entry.skipped, "failed": _failed(run), "inside": []})
    for row in rows:
        if row["status"] in ("failed", "error"):
            row["inside"] = [other["path"] for other in rows if other is not row and other["status"] in
                             ("failed", "error") and any(_below(p, q) for p in other["paths"] for q in row["paths"])]
    rows.sort(key=lambda row: _order(row["path"]))
    # every report format names each layer by its path in the model, not by its spec file
    names = {row["target"]: label(row) for row in rows if row["target"] is not None}
    for row in rows:
        row["target"] = names.get(row["target"])
    renamed = [dataclasses.replace(run, target=names.get(run.target, run.target)) for run in report.runs]
    return dataclasses.replace(report, runs=renamed, scan=rows)


def _failed(run: RunReport | None) -> list[str]:
    if run is None:
        return []
    return [r.check + (f"[{r.variant}]" if r.variant else "") for r in run.results
            if r.status in (Status.FAILED, Status.ERROR)]


def _below(path: str, block: str) -> bool:
    """Whether ``path`` lies inside ``block`` (a Function inside the module it ran in)."""
    if path == block:
        return False
    module = path.partition("/")[0]
    return block == "" or module == block or module.startswith(block + ".")


def _order(path: str) -> tuple[Any, ...]:
    module, _, function = path.partition("/")
    parts = [(int(p) if p.isdigit() else -1, p) for p in module.split(".") if p]
    return (*parts, *([(1 << 30, function)] if function else []))  # a Function after the module's layers


def label(row: dict[str, Any]) -> str:
    """How a row's layer is named: its path (or ``(model)``) and class."""
    return f"{row['path'] or '(model)'} ({row['class'].rpartition('.')[2]})"


def lines(report: Report) -> list[tuple[int, str, str]]:
    """The tree as (depth, status, text) lines, for the reporters."""
    out = []
    for row in report.scan or []:
        path = row["path"]
        depth = 0 if not path else path.partition("/")[0].count(".") + 1 + ("/" in path)
        text = label(row)
        if row["count"] > 1:
            text += f" x{row['count']}"
        if row["layouts"]:
            text += "  " + " ".join(row["layouts"])
        if row["status"] == "skipped":
            text += f"  skipped: {row['reason']}"
        elif row["failed"]:
            text += f"  {', '.join(row['failed'])}"
        if row["inside"]:
            inside = ", ".join(p or "(model)" for p in row["inside"])
            text += f"  (where {inside} inside it fails too: look there first)"
        out.append((depth, row["status"], text))
    return out


@dataclass
class Branch:
    """A row of the tree with the rows below it (a block's layers, a module's Functions)."""

    row: dict[str, Any]
    status: str
    text: str
    below: list[Branch] = dataclasses.field(default_factory=list)

    @property
    def fails(self) -> bool:
        """Whether this row or one below it failed or raised: the branch the HTML report opens."""
        return self.status in ("failed", "error") or any(branch.fails for branch in self.below)


def branches(report: Report) -> list[Branch]:
    """The tree's rows nested: each under the nearest row before it at a smaller depth (rows are
    in tree order, so that is the block it lies in)."""
    top: list[Branch] = []
    stack: list[tuple[int, Branch]] = []
    for row, (depth, status, text) in zip(report.scan or [], lines(report)):
        branch = Branch(row, status, text)
        while stack and stack[-1][0] >= depth:
            stack.pop()
        (stack[-1][1].below if stack else top).append(branch)
        stack.append((depth, branch))
    return top


def summary(report: Report) -> str:
    """``N kinds of layer (M calls): N passed, N failed, N skipped``."""
    rows = report.scan or []
    counts: dict[str, int] = {}
    for row in rows:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    said = ", ".join(f"{n} {status}" for status, n in counts.items())
    return f"{len(rows)} kind{'s' * (len(rows) != 1)} of layer ({sum(r['count'] for r in rows)} calls): {said}"
