"""The ``@check`` decorator and the catalogue.

Built-in checks register exactly as a third party's would: a module under ``checks/`` (or
an entry point in the ``layercheck.checks`` group) decorates functions with :func:`check`.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import pkgutil
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib.metadata import entry_points
from typing import TYPE_CHECKING, Any

from layercheck.errors import UsageError

if TYPE_CHECKING:
    from layercheck.runner import Context
    from layercheck.subject import Target

# Catalogue order: the SPEC's tables. Third-party checks follow in registration order.
SPEC_ORDER = (
    "signatures", "initialize", "predict_runs", "forward_runs", "forward_predict_agree",
    "backward_runs", "backward_size", "gradients", "dtype", "device", "state_valid",
    "reset_state", "observations", "needs_input_grad", "input_unchanged", "deterministic",
    "finite", "noncontiguous", "meta_device", "registered_tensors", "state_dict",
    "export", "compile", "gradgrad", "forward_ad",
)

CheckFn = Callable[["Context"], Any]
Applies = Callable[["Target"], "str | None"]


@dataclass(frozen=True)
class CheckInfo:
    """One check's identity and rules, declared in one place."""

    id: str
    title: str
    func: CheckFn
    matlab: str = ""
    default: bool = True
    requires: tuple[str, ...] = ()
    applies: Applies | None = None
    variants: tuple[str, ...] = ("",)
    optional_variants: tuple[str, ...] = ()
    needs_subject: bool = True
    timeout: float | None = None
    doc: str = field(default="", compare=False)

    def skip_reason(self, target: Target) -> str | None:
        """Why this check does not apply to the target, or None when it does."""
        return self.applies(target) if self.applies is not None else None


_REGISTRY: dict[str, CheckInfo] = {}


def check(
    id: str,
    *,
    title: str,
    matlab: str = "",
    default: bool = True,
    requires: Sequence[str] = (),
    applies: Applies | None = None,
    variants: Sequence[str] = ("",),
    optional_variants: Sequence[str] = (),
    needs_subject: bool = True,
    timeout: float | None = None,
) -> Callable[[CheckFn], CheckFn]:
    """Register a check. The function receives a :class:`~layercheck.runner.Context`; it
    returns (optionally a message, or a ``(message, details)`` pair) when the layer passes,
    raises :class:`~layercheck.errors.CheckFailed` when it is wrong and
    :class:`~layercheck.errors.CheckSkipped` when the check does not apply."""

    def register(func: CheckFn) -> CheckFn:
        if id in _REGISTRY and _REGISTRY[id].func is not func:
            raise ValueError(f"check id {id!r} registered twice")
        _REGISTRY[id] = CheckInfo(
            id=id,
            title=title,
            func=func,
            matlab=matlab,
            default=default,
            requires=tuple(requires),
            applies=applies,
            variants=tuple(variants),
            optional_variants=tuple(optional_variants),
            needs_subject=needs_subject,
            timeout=timeout,
            doc=inspect.cleandoc(func.__doc__ or ""),
        )
        return func

    return register


_loaded = False


def load_checks() -> None:
    """Import the built-in check modules and third-party entry points (once)."""
    global _loaded
    if _loaded:
        return
    import layercheck.checks as package

    for info in pkgutil.iter_modules(package.__path__):
        importlib.import_module(f"{package.__name__}.{info.name}")
    for ep in entry_points(group="layercheck.checks"):
        ep.load()
    _loaded = True


def catalogue() -> list[CheckInfo]:
    """Every registered check, in SPEC order."""
    load_checks()
    rank = {cid: i for i, cid in enumerate(SPEC_ORDER)}
    order = list(_REGISTRY)
    return sorted(_REGISTRY.values(), key=lambda c: (rank.get(c.id, len(rank)), order.index(c.id)))


def get(check_id: str) -> CheckInfo:
    load_checks()
    if check_id not in _REGISTRY:
        close = difflib.get_close_matches(check_id, list(_REGISTRY), n=1)
        hint = f"; did you mean {close[0]!r}?" if close else "; `layercheck checks` lists them"
        raise UsageError(f"unknown check id {check_id!r}{hint}")
    return _REGISTRY[check_id]


@dataclass(frozen=True)
class Planned:
    """A check to run with the variants chosen for it."""

    info: CheckInfo
    variants: tuple[str, ...]


def parse_selector(text: str) -> tuple[str, str | None]:
    """``"dtype:float16"`` -> (``"dtype"``, ``"float16"``); validates both parts."""
    check_id, _, variant = text.partition(":")
    info = get(check_id.strip())
    if variant:
        known = info.variants + info.optional_variants
        if variant not in known:
            raise UsageError(
                f"check {info.id!r} has no variant {variant!r}; its variants: {', '.join(v for v in known if v) or 'none'}"
            )
        return info.id, variant
    return info.id, None


def select(only: Iterable[str] = (), skip: Iterable[str] = (), enable: Iterable[str] = ()) -> list[Planned]:
    """The checks to run, in catalogue order.

    ``only`` restricts to those checks (or single variants, ``dtype:float16``) plus
    everything they require (which run too);
    ``skip`` drops checks or single variants (``dtype:float64``); ``enable`` adds opt-in checks
    or opt-in variants (``dtype:float16``). Unknown ids raise UsageError.
    """
    only_parsed = [parse_selector(s) for s in only]
    only_ids = {cid for cid, _ in only_parsed}
    # --check dtype:float16 runs just that variant; --check dtype runs the check's usual ones
    only_variants = {cid: {v for c, v in only_parsed if c == cid} for cid in only_ids
                     if all(v is not None for c, v in only_parsed if c == cid)}
    skipped = [parse_selector(s) for s in skip]
    enabled = [parse_selector(s) for s in enable]
    wanted: set[str] = set()
    if only_ids:
        stack = list(only_ids)
        while stack:
            cid = stack.pop()
            if cid not in wanted:
                wanted.add(cid)
                stack.extend(get(cid).requires)
    else:
        wanted = {c.id for c in catalogue() if c.default} | {cid for cid, _ in enabled}
    wanted -= {cid for cid, variant in skipped if variant is None and cid not in only_ids}
    plan = []
    for info in catalogue():
        if info.id not in wanted:
            continue
        variants = list(info.variants)
        variants += [v for cid, v in enabled if cid == info.id and v and v not in variants]
        if info.id in only_variants:
            variants = [v for v in info.variants + info.optional_variants if v in only_variants[info.id]]
        variants = [v for v in variants if (info.id, v) not in skipped]
        if variants:
            plan.append(Planned(info, tuple(variants)))
    return plan
