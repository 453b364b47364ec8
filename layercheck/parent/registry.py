"""The ``@check`` decorator and the catalogue.

Built-in checks register exactly as a third party's would: a module under ``checks/`` (or
an entry point in the ``layercheck.checks`` group) decorates functions with :func:`check`.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from layercheck.parent import plugins
from layercheck.parent.errors import UsageError, did_you_mean
from layercheck.parent.inputs import FLOATING

if TYPE_CHECKING:
    from layercheck.target.subject import Target

# Catalogue order: the SPEC's tables. Third-party checks follow in registration order.
SPEC_ORDER = (
    "signatures", "initialize", "predict_runs", "forward_runs", "forward_predict_agree",
    "backward_runs", "backward_size", "gradients", "dtype", "device", "state_valid",
    "reset_state", "observations", "needs_input_grad", "input_unchanged", "deterministic",
    "finite", "noncontiguous", "meta_device", "registered_tensors", "state_dict",
    "backward_pure", "factory_kwargs", "copy", "grad_output", "reference",
    "op_schema", "op_fake", "op_autograd_registration", "op_aot_dispatch",
    "export", "compile", "gradgrad", "forward_ad", "autocast", "vmap", "train_step", "distributed",
)

# A check receives a layercheck.support.context.Context; the registry sits below the context (which reads
# checks from it) and does not name it.
CheckFn = Callable[[Any], Any]
Applies = Callable[["Target"], "str | None"]

DTYPE_NAMES = FLOATING
GRADIENTS = "gradients"
"""The check a bare ``DTYPE=VALUE`` tolerance belongs to: the numerical-gradient comparison."""


@dataclass(frozen=True)
class Tolerance:
    """One tolerance a check uses: for which dtype, its default, and what it bounds. A user
    overrides it as ``CHECK.DTYPE=VALUE`` (``tolerance:`` in a spec, ``--tolerance``)."""

    dtype: str
    default: float
    bounds: str

    def __post_init__(self) -> None:
        if self.dtype not in DTYPE_NAMES:
            raise ValueError(f"tolerance dtype {self.dtype!r} is not one of {', '.join(DTYPE_NAMES)}")


@dataclass(frozen=True)
class SharedRun:
    """A run of the layer computed once per target and read by several checks, with the
    checks whose success it presupposes. A check declares the shared runs it reads
    (``@check(uses=...)``) and so requires what they require: declared, not remembered."""

    name: str
    requires: tuple[str, ...]


# The fix a check's docstring gives: "Fix:" to the end of its sentence (a full stop before a
# capital or a blank line) or of the docstring.
_FIX = re.compile(r"\bFix:\s*(.+?\.)(?=\s+[A-Z`]|\s*\n\s*\n|\s*$)", re.S)


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
    uses: tuple[SharedRun, ...] = ()
    tolerances: tuple[Tolerance, ...] = ()
    any_batch: bool = False
    doc: str = field(default="", compare=False)

    @property
    def fix(self) -> str:
        """The first sentence after ``Fix:`` in the docstring, as plain text (what a failure
        ends with); empty where the docstring gives none."""
        found = _FIX.search(self.doc)
        return " ".join(re.sub(r"``(.+?)``", r"\1", found.group(1), flags=re.S).split()) if found else ""

    def explained(self, message: str, backward: Mapping[str, Any] | None = None, *, lead: bool = False) -> str:
        """A failure's message as a user reads it: where the layer's code is at fault (``backward``:
        its hand-written backward, ``{"name", "file", "line"}``, given its file and line where the
        message names it, or named in front where ``lead``: the check judges the backward), the
        message, then the docstring's fix (unless the message gives its own ``Fix:``) and where
        to read more."""
        if backward is not None:
            name = str(backward["name"])
            where = f"{name} ({backward['file']}:{backward['line']})"
            if name in message:
                message = message.replace(name, where, 1)
            elif lead:
                message = f"in {where}: {message}"
        message = message.rstrip().rstrip(".")
        if "Fix:" not in message and self.fix:
            message += f". Fix: {self.fix.rstrip('.')}"
        return f"{message} (more: layercheck checks {self.id})."

    def skip_reason(self, target: Target) -> str | None:
        """Why this check does not apply to the target, or None when it does."""
        return self.applies(target) if self.applies is not None else None

    def tolerance(self, dtype: str) -> Tolerance | None:
        """The declared tolerance for ``dtype``, or None."""
        return next((t for t in self.tolerances if t.dtype == dtype), None)


def modules_only(reason: str) -> Applies:
    """An ``applies`` rule: the check applies to modules; for an operation (an
    ``autograd.Function``, a custom operator, a plain function) it is skipped with ``reason``."""

    def applies(target: Target) -> str | None:
        return reason if target.kind != "module" else None

    return applies


def needs_batch(target: Target) -> str | None:
    """An ``applies`` rule: the check needs a B (batch) dimension, of one size in every input
    that has one; else it is skipped saying so."""
    sizes = target.batch_sizes
    if not sizes:
        return "no input has a B (batch) dimension"
    if len(sizes) > 1:
        return f"the inputs' B dimensions differ in size ({', '.join(map(str, sorted(sizes)))})"
    return None


def selector(check_id: str, variant: str) -> str:
    """``check:variant`` (or ``check``): how ``--check`` and ``--skip`` name a result."""
    return f"{check_id}:{variant}" if variant else check_id


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
    uses: Sequence[SharedRun] = (),
    tolerances: Sequence[Tolerance] = (),
    any_batch: bool = False,
) -> Callable[[CheckFn], CheckFn]:
    """Register a check. The function receives a :class:`~layercheck.support.context.Context`; it
    returns (optionally a message, or a ``(message, details)`` pair) when the layer passes,
    raises :class:`~layercheck.parent.errors.CheckFailed` when it is wrong and
    :class:`~layercheck.parent.errors.CheckSkipped` when the check does not apply.

    ``requires``: checks that must not have failed blockingly first (their failure skips this
    one, naming them). ``uses``: the shared runs it reads (their prerequisites are added to
    ``requires``). ``tolerances``: every tolerance it compares with, one per dtype.
    ``any_batch``: its verdict does not depend on how many observations the batch holds (it
    tests the layer's logic, not its numbers at scale), so at large sizes it runs on a few of
    them (``Target.sampled``), with shared runs of their own."""

    def register(func: CheckFn) -> CheckFn:
        if id in _REGISTRY and _REGISTRY[id].func is not func:
            raise ValueError(f"check id {id!r} registered twice")
        needed = list(dict.fromkeys([*requires, *(req for run in uses for req in run.requires)]))
        dtypes = [t.dtype for t in tolerances]
        if len(set(dtypes)) != len(dtypes):
            raise ValueError(f"check {id!r} declares a tolerance twice for one dtype")
        _REGISTRY[id] = CheckInfo(
            id=id,
            title=title,
            func=func,
            matlab=matlab,
            default=default,
            requires=tuple(needed),
            applies=applies,
            variants=tuple(variants),
            optional_variants=tuple(optional_variants),
            needs_subject=needs_subject,
            timeout=timeout,
            uses=tuple(uses),
            tolerances=tuple(tolerances),
            any_batch=any_batch,
            doc=inspect.cleandoc(func.__doc__ or ""),
        )
        return func

    return register


def load_checks() -> None:
    """Import the built-in check modules and third-party entry points (once)."""
    plugins.load("layercheck.checks", plugins.CHECKS)


def catalogue() -> list[CheckInfo]:
    """Every registered check, in SPEC order."""
    load_checks()
    return plugins.ordered(_REGISTRY, SPEC_ORDER)


def readers_of(run: SharedRun) -> frozenset[str]:
    """The checks that declare they read a shared run (``@check(uses=...)``)."""
    load_checks()
    return frozenset(info.id for info in _REGISTRY.values() if run in info.uses)


def get(check_id: str) -> CheckInfo:
    load_checks()
    if check_id not in _REGISTRY:
        plugins.check_loaded(plugins.CHECKS)  # the check may have been a broken plug-in's
        hint = did_you_mean(check_id, _REGISTRY) or "; `layercheck checks` lists them"
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
                f"check {info.id!r} has no variant {variant!r}; "
                f"its variants: {', '.join(v for v in known if v) or 'none'}"
            )
        return info.id, variant
    return info.id, None


def select(only: Iterable[str] = (), skip: Iterable[str] = (), enable: Iterable[str] = ()) -> list[Planned]:
    """The checks to run, in catalogue order.

    ``only`` restricts to those checks (or single variants, ``dtype:float16``) plus
    everything they require (which run too);
    ``skip`` drops checks or single variants (``dtype:float64``); ``enable`` adds opt-in checks
    or opt-in variants (``dtype:float16``). Unknown ids raise UsageError, and so does a check
    plug-in that failed to load (its checks would be missing from the run).
    """
    load_checks()
    plugins.check_loaded(plugins.CHECKS)
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


def resolve_tolerances(overrides: Mapping[str, float], where: str) -> dict[tuple[str, str], float]:
    """``{"gradients.float32": 1e-3, "float64": 1e-5}`` as ``{(check, dtype): value}``; a bare
    dtype means the gradient check. Raises UsageError naming ``where`` and the key for a check
    that does not exist or declares no tolerance for that dtype."""
    resolved: dict[tuple[str, str], float] = {}
    for key, value in overrides.items():
        check_id, _, dtype = key.rpartition(".")
        check_id = check_id or GRADIENTS
        try:
            info = get(check_id)
        except UsageError as exc:
            raise UsageError(f"{where}: {key}: {exc}") from None
        if info.tolerance(dtype) is None:
            declared = ", ".join(f"{info.id}.{t.dtype}" for t in info.tolerances) or "none"
            raise UsageError(f"{where}: {key}: check {info.id!r} has no {dtype} tolerance; its tolerances: {declared}")
        resolved[(info.id, dtype)] = value
    return resolved
