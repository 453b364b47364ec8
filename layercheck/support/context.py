"""What a check receives: the target, fresh layers, shared runs, its tolerances, notes."""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from layercheck.parent.errors import CheckError
from layercheck.parent.registry import CheckInfo, SharedRun, get, selector

if TYPE_CHECKING:
    import torch

    from layercheck.parent.invocation import Invocation
    from layercheck.parent.layout import Layout
    from layercheck.target.subject import Subject, Target


class Context:
    """One check's view of its target.

    ``fresh()`` builds a new layer for every use, so nothing one check does leaks into
    another; ``shared()`` holds what is computed once per target (the reference runs);
    ``tolerance()`` reads this check's declared tolerances with the user's overrides."""

    def __init__(self, target: Target, info: CheckInfo, variant: str, *, invocation: Invocation,
                 tolerances: Mapping[tuple[str, str], float], devices: Sequence[str], shared: dict[Any, Any],
                 facts: dict[str, Any], planned: frozenset[str] = frozenset(),
                 readers: dict[Any, frozenset[str]] | None = None,
                 sampler: Callable[[], Target | None] | None = None) -> None:
        self.target = target
        self.info = info
        self.variant = variant
        self.invocation = invocation
        self.devices = tuple(devices)
        self.notes: list[str] = []
        self._tolerances = tolerances
        self._shared = shared
        self._facts = facts
        self._planned = planned
        self._readers = readers if readers is not None else {}
        self._sampler = sampler

    @property
    def seed(self) -> int:
        return self.target.seed

    @property
    def layouts(self) -> tuple[Layout, ...]:
        return self.target.layouts

    def fresh(self, dtype: torch.dtype | None = None, device: torch.device | str | None = None, *,
              sample: bool = False) -> Subject:
        """A new layer, built from the same constructor call, ``initialize`` and seed as every other.
        ``sample``: the layer of the runner's sample of the batch where it has made one (a few of
        the batch's observations, see ``any_batch``; its ``inputs()`` are the sample's), for a part
        of a check whose outcome does not depend on the batch size; else the whole target's."""
        target = self._sampler() if sample and self._sampler is not None else None
        return (target or self.target).build(dtype=dtype, device=device)

    def tolerance(self, dtype: torch.dtype | str) -> float:
        """This check's tolerance for ``dtype``: the user's override (``CHECK.DTYPE`` in a spec or
        on the command line) or the declared default. Raises CheckError for a dtype the check
        did not declare: every tolerance a check uses is one a user can reach."""
        name = dtype if isinstance(dtype, str) else str(dtype).removeprefix("torch.")
        declared = self.info.tolerance(name)
        if declared is None:
            raise CheckError(f"check {self.info.id!r} compares with a {name} tolerance it does not declare "
                             "(@check(tolerances=...))")
        return self._tolerances.get((self.info.id, name), declared.default)

    def tolerance_of(self, check_id: str, dtype: str) -> float:
        """Another check's tolerance, for a shared result judged by that check (the gradient
        check's verdict on the float64 reference, whichever check builds it first)."""
        declared = get(check_id).tolerance(dtype)
        if declared is None:
            raise CheckError(f"check {check_id!r} declares no {dtype} tolerance")
        return self._tolerances.get((check_id, dtype), declared.default)

    def shared(self, key: Any, compute: Callable[[], Any], *, readers: Collection[str] = ()) -> Any:
        """A value computed once per target and shared between checks (treat as read-only).
        ``readers``: the checks that read it, where they are known: the runner lets it go once
        none of them is left to run (full-size runs must not outlive their use), and a check
        that reads it after all computes it again."""
        if key not in self._shared:
            self._shared[key] = compute()
            if readers:
                self._readers[key] = frozenset(readers)
        return self._shared[key]

    def take(self, key: Any) -> Any:
        """A value shared for one reader, which takes it: it is no one's to read again (None when
        no check left one under ``key``)."""
        self._readers.pop(key, None)
        return self._shared.pop(key, None)

    def use(self, run: SharedRun) -> None:
        """Assert that this check declared the shared run it is about to read (``uses=``): its
        prerequisites then gate this check, as they must."""
        if run not in self.info.uses:
            raise CheckError(f"check {self.info.id!r} reads the shared {run.name} run without declaring it "
                             f"(@check(uses=...)); it needs {', '.join(run.requires)}")

    def fact(self, key: str, value: Any) -> None:
        """Record a fact about the target for the run report (e.g. ``custom_backward``)."""
        self._facts[key] = value

    def note(self, text: str) -> None:
        """A fact worth the user's attention that is not a failure (shown in every report)."""
        if text not in self.notes:
            self.notes.append(text)

    def planned(self, check_id: str) -> bool:
        """Whether ``check_id`` (or one variant, ``check:variant``) runs for this target: a
        message may point at it only then."""
        return check_id in self._planned

    def reported_by(self, check_id: str) -> str:
        """`` (CHECK reports it)`` when that check runs for this target, else nothing: a
        message never points at a check the user skipped."""
        return f" ({check_id} reports it)" if self.planned(check_id) else ""

    @property
    def reproduce(self) -> str:
        """How to rerun only this check (and variant), with this seed."""
        return self.invocation.reproduce(selector(self.info.id, self.variant))
