"""Exceptions that separate "you called us wrong" from "your layer is wrong"."""

from __future__ import annotations

import contextlib
import difflib
import re
from collections.abc import Iterable, Iterator
from typing import Any


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``; did you mean 'Conv2d'?`` for the closest of ``known`` (a spelling or a case away),
    else nothing: every "unknown NAME" message offers it."""
    known = list(known)
    close = difflib.get_close_matches(name, known, n=1, cutoff=0.6)
    if not close:
        close = [key for key in known if key.lower() == name.lower()][:1]
    return f"; did you mean {close[0]!r}?" if close else ""


class UsageError(ValueError):
    """The command line, a spec or a layout is invalid: nothing is checked (exit 2)."""


class LayoutError(UsageError):
    """A layout string or record that does not describe a valid layout."""


class SpecError(UsageError):
    """A spec file that cannot be read or does not follow SPEC section 4."""


class LoadError(Exception):
    """A layer that exists but could not be imported or constructed (exit 1)."""


class LayerRaised(Exception):
    """The layer under test raised; carries the phase and the layer's own traceback."""

    def __init__(self, phase: str, exc: BaseException, trace: str, *, device: str | None = None) -> None:
        super().__init__(f"{phase} raised {type(exc).__name__}: {exc}")
        self.phase = phase
        self.exc = exc
        self.trace = trace
        self.device = device  # the device type the layer ran on, where known


class CheckFailed(AssertionError):
    """Raised by a check when the layer is wrong; `details` go into the report.

    ``blocking``: the failure leaves checks that need this one nothing to run (the layer
    raised, or returned nothing to compare), so they are skipped naming it. A failure of a
    property (a size, a dtype, one tensor without a gradient) is not blocking: checks that
    need this one still run, and the report of a broken layer differs from a correct one's."""

    def __init__(self, message: str, *, blocking: bool = False, **details: Any) -> None:
        super().__init__(message)
        self.message = message
        self.blocking = blocking
        self.details = details


class CheckSkipped(Exception):
    """Raised by a check that does not apply, or that cannot judge this layer; the message is
    the reason.

    By default the check does not apply: no GPU, no state, no custom operator, nothing that
    takes a gradient. ``applies=True`` says it applies but could not give a verdict (rounding
    noise swamps the derivative, the point sits on kinks, a dtype no kernel here supports, a
    cause another check reports): the summary counts such a skip as not judged, and
    ``--strict`` fails it (Note [no silent pass] in numerics/reference.py).
    """

    def __init__(self, message: str = "", *, applies: bool = False) -> None:
        super().__init__(message)
        self.applies = applies


class CheckError(Exception):
    """The check itself could not complete (not the layer's fault): an ``error`` result.

    Raised for a check that misuses the SDK (reads a shared run or a tolerance it did not
    declare) and for failures of the machinery around the layer (torch's compiler crashing
    at no line of the layer, a layer module that cannot be re-imported by name)."""


class CheckTimeout(BaseException):
    """A check ran past its time limit.

    A BaseException, like KeyboardInterrupt: it is raised wherever the check happens to be,
    often inside the layer's own code, and must not be caught there (by a layer's
    ``except Exception`` or by the subject turning a layer's exception into LayerRaised)."""


def layer_failure(exc: LayerRaised, what: str = "", *, hint: str = "", blocking: bool = False,
                  **details: Any) -> CheckFailed:
    """The layer's exception as this check's failure: ``"{what}, {phase} raised X: ...{hint}"``,
    with the phase and the layer's own traceback in the details."""
    prefix = f"{what}, " if what else ""
    if not hint and exc.device == "cpu" and _NEEDS_GPU.search(str(exc.exc)):
        hint = (". The layer seems to run only on a GPU: layercheck runs it on the CPU unless told otherwise. Fix: "
                "check it there with --on cuda (a spec's on: cuda)")
        if "triton" in str(exc.exc).lower():
            hint += ", or, where its Triton kernels take CPU tensors, under Triton's interpreter with --interpret"
    if not hint and _NEEDS_BOOL.search(str(exc.exc)):  # a mask generated as float: inputs are unless declared
        hint = (". The layer wants a bool (or integer) tensor where it was given a float one: generated inputs are "
                "float unless their layout declares a dtype. Fix: declare the mask's dtype, --layout '8,10:BT "
                "dtype=bool' (a spec's dtype: bool; check_layer's '8,10:BT dtype=bool')")
    shown = str(exc).rstrip(".") if hint[:1] in (";", ":", ",") else str(exc)  # no ".;" where the hint follows
    return CheckFailed(f"{prefix}{shown}{hint}", blocking=blocking, phase=exc.phase, traceback=exc.trace, **details)


# What a layer that needs a GPU raises on the CPU: torch without CUDA, a CUDA tensor made inside
# forward meeting a CPU input, Triton refusing a CPU pointer, a CUDA extension's own check.
_NEEDS_GPU = re.compile(r"cuda|triton|nvidia|expected all tensors to be on the same device", re.IGNORECASE)


# What torch raises where a mask or an index must be bool or integer and is a float tensor.
_NEEDS_BOOL = re.compile(r"only supports boolean masks|expected BoolTensor|condition to be a boolean tensor|"
                         r"only implemented on integer and Boolean|tensors used as indices must be long, int, byte or "
                         r"bool|not implemented for '(Float|Double|Half|BFloat16)'", re.IGNORECASE)


@contextlib.contextmanager
def failing(what: str = "", *, hint: str = "", **details: Any) -> Iterator[None]:
    """Inside the block, the layer raising is this check's failure (see :func:`layer_failure`)."""
    try:
        yield
    except LayerRaised as exc:
        raise layer_failure(exc, what, hint=hint, **details) from exc
