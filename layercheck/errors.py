"""Exceptions that separate "you called us wrong" from "your layer is wrong"."""

from __future__ import annotations


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

    def __init__(self, phase: str, exc: BaseException, trace: str) -> None:
        super().__init__(f"{phase} raised {type(exc).__name__}: {exc}")
        self.phase = phase
        self.exc = exc
        self.trace = trace


class CheckFailed(AssertionError):
    """Raised by a check when the layer is wrong; `details` go into the report."""

    def __init__(self, message: str, **details: object) -> None:
        super().__init__(message)
        self.message = message
        self.details = details


class CheckSkipped(Exception):
    """Raised by a check that does not apply; the message is the reason."""


class CheckTimeout(BaseException):
    """A check ran past its time limit.

    A BaseException, like KeyboardInterrupt: it is raised wherever the check happens to be,
    often inside the layer's own code, and must not be caught there (by a layer's
    ``except Exception`` or by the subject turning a layer's exception into LayerRaised)."""
