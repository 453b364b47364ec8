"""What exploring one target is asked to do: plain data, no torch (the parent hands it to a worker)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

DEFAULT_SECONDS = 45.0
"""--explore-time's default: the explored draws of one target stop after this long."""

DEFAULT_SHRINK_SECONDS = 20.0
"""The time shrinking one target's failures may take; past it the input found so far is shown."""


@dataclass(frozen=True)
class Saved:
    """A failure kept in the store: the check that failed, the run's seed, and its (shrunk)
    inputs: one ``{"size", "format", "dtype"?, "name"?}`` per input and their values as nested lists."""

    check: str
    variant: str
    seed: int
    inputs: tuple[dict[str, Any], ...]
    values: tuple[Any, ...]
    found: str = ""  # when it was first found (ISO date)
    passes: int = 0  # runs in a row it has passed since (dropped after store.KEEP_PASSING)

    def to_dict(self) -> dict[str, Any]:
        return {"check": self.check, "variant": self.variant, "seed": self.seed, "inputs": list(self.inputs),
                "values": list(self.values), "found": self.found, "passes": self.passes}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Saved:
        """Raises KeyError, TypeError or ValueError on an entry that is not one."""
        inputs = tuple(dict(item) for item in data["inputs"])
        values = tuple(data["values"])
        if len(values) != len(inputs) or not isinstance(data["check"], str):
            raise ValueError("inputs and values differ in number")
        for item in inputs:
            if not all(isinstance(n, int) and n > 0 for n in item["size"]) or not isinstance(item["format"], str):
                raise ValueError("bad input size")
        return cls(check=data["check"], variant=str(data.get("variant", "")), seed=int(data.get("seed", 0)),
                   inputs=inputs, values=values, found=str(data.get("found", "")), passes=int(data.get("passes", 0)))

    @property
    def label(self) -> str:
        return f"{self.check}[{self.variant}]" if self.variant else self.check


@dataclass(frozen=True)
class Exploration:
    """One target's exploring, shrinking and replaying: ``draws`` extra draws after the default
    ones pass (``--explore N``) within ``seconds`` (``--explore-time``); failures shrunk within
    ``shrink_seconds`` (0: not shrunk); ``saved``: the store's failures of this target, replayed
    first; ``store``: where they are kept (None: ``--no-store``)."""

    draws: int = 0
    seconds: float = DEFAULT_SECONDS
    shrink_seconds: float = DEFAULT_SHRINK_SECONDS
    store: Path | None = None
    saved: tuple[Saved, ...] = ()
