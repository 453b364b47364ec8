"""``layercheck run --shard K/N``: one of N deterministic parts of the targets, for CI matrix jobs."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath
from typing import Protocol, TypeVar

from layercheck.parent.errors import UsageError


class Named(Protocol):
    """A target as a spec or a plan names it."""

    @property
    def source(self) -> Path | None: ...

    @property
    def layer(self) -> str: ...


T = TypeVar("T", bound=Named)

_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


@dataclass(frozen=True)
class Shard:
    """The K-th (1-based) of N shards. Targets are sorted by name (a spec file's path as given,
    with / as separator, or the layer reference), and shard K takes the K-th, the K+N-th, ... of
    them: every target lands in exactly one shard, shard sizes differ by at most one, and the
    split depends on the names only, never on the machine."""

    index: int
    count: int

    @classmethod
    def parse(cls, text: str) -> Shard:
        """``"2/3"``; raises UsageError unless K and N are integers with 1 <= K <= N."""
        match = _SHARD.fullmatch(text)
        if match is None:
            raise UsageError(f"--shard {text!r}: expected K/N, two integers with 1 <= K <= N, e.g. --shard 1/3")
        index, count = int(match.group(1)), int(match.group(2))
        if not 1 <= index <= count:
            raise UsageError(f"--shard {text!r}: K must be between 1 and N (1 <= K <= N), "
                             f"e.g. --shard 1/{max(count, 1)}")
        return cls(index, count)

    def select(self, specs: Sequence[T]) -> list[T]:
        """This shard's targets, in the order given."""
        order = sorted(range(len(specs)), key=lambda i: _sort_key(specs[i]))
        mine = set(order[self.index - 1::self.count])
        return [spec for i, spec in enumerate(specs) if i in mine]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _sort_key(spec: Named) -> str:
    """The target's name with / as separator, so that Windows and POSIX runners sort alike."""
    return PurePath(spec.source).as_posix() if spec.source is not None else spec.layer
