"""What the command line and the Python API do around a run to keep its failures, no torch:
before it, each target's saved failures are read from the store; after it, its shrunk failures
are kept there and, with ``--emit-test``, written as pytest files."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from layercheck.store import emit
from layercheck.store import folder as store


def prepare(plans: Sequence[Any]) -> tuple[list[Any], list[str]]:
    """The plans with their saved failures to replay, and the lines to say: a store file ignored,
    "replaying 2 saved failures"."""
    made, lines = [], []
    for plan in plans:
        if plan.exploration is not None:
            exploration, warning = store.with_saved(plan.exploration, store.key_of(plan))
            if warning is not None:
                lines.append(f"layercheck: {warning}")
            if exploration.saved:
                count = len(exploration.saved)
                lines.append(f"{plan.name}: replaying {count} saved failure{'s' * (count != 1)} from "
                             f"{exploration.store}")
            plan = replace(plan, exploration=exploration)
        made.append(plan)
    return made, lines


def keep(plans: Sequence[Any], runs: Sequence[Any], emit_to: Path | None = None) -> list[str]:
    """Keep each run's shrunk failures in the store (``runs`` in the plans' order) and write their
    tests into ``emit_to``; the lines to say."""
    lines = []
    for plan, run in zip(plans, runs):
        if plan.exploration is None:
            continue
        warning = store.update(plan.exploration, store.key_of(plan), plan.name, run)
        if warning is not None:
            lines.append(f"layercheck: {warning}")
        if emit_to is not None:
            written, said = emit.emit(emit_to, plan, run)
            lines += said + [f"{plan.name}: wrote {path}" for path in written]
    return lines
