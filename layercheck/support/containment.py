"""What a layer may not change around it: the process's output, warnings and global settings.

Each check runs inside :func:`contained`. Warnings are recorded and listed in the result's
details (never printed); the process-wide settings a layer can change — default dtype and
device, grad mode, anomaly detection, deterministic algorithms, the number of threads, the
working directory, ``warnings`` filters, the random states of torch, Python and NumPy,
``sys.stdout`` and ``sys.stderr`` — are put back afterwards, and the ones that changed are
named, so the check's message can say so and the next check starts from the same state. In
a worker process (``capture``), what the layer prints — to stdout or stderr, from Python or
native code — is captured into the result's details too, so that it never mixes with a
report written to stdout.
"""

from __future__ import annotations

import contextlib
import os
import random
import sys
import tempfile
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import numpy as np
import torch

from layercheck.parent.limits import OUTPUT_LIMIT, shortened

WARNINGS_LIMIT = 20

_capture_file: IO[bytes] | None = None


@dataclass(frozen=True)
class _Setting:
    """One global setting: how to read it, put it back, compare and show it."""

    name: str
    get: Callable[[], Any]
    put: Callable[[Any], None]
    same: Callable[[Any, Any], bool] = lambda a, b: bool(a == b)
    show: Callable[[Any], str] | None = str  # None: the values mean nothing to a reader


def _put_default_device(device: torch.device) -> None:
    # The CPU is the default without a device context; setting it explicitly would add one.
    torch.set_default_device(None if device.type == "cpu" else device)


def _same_numpy_state(a: Any, b: Any) -> bool:
    return a[0] == b[0] and bool(np.array_equal(a[1], b[1])) and a[2:] == b[2:]


SETTINGS: tuple[_Setting, ...] = (
    _Setting("default dtype", torch.get_default_dtype, torch.set_default_dtype),
    *((_Setting("default device", torch.get_default_device, _put_default_device),)
      if hasattr(torch, "get_default_device") else ()),
    _Setting("grad mode", torch.is_grad_enabled, torch._C._set_grad_enabled,
             show=lambda on: "enabled" if on else "disabled"),
    _Setting("anomaly detection", torch.is_anomaly_enabled, torch.set_anomaly_enabled),
    _Setting("deterministic algorithms",
             lambda: (torch.are_deterministic_algorithms_enabled(),
                      torch.is_deterministic_algorithms_warn_only_enabled()),
             lambda v: torch.use_deterministic_algorithms(v[0], warn_only=v[1]),
             show=lambda v: ("on, warn only" if v[1] else "on") if v[0] else "off"),
    _Setting("number of threads", torch.get_num_threads, torch.set_num_threads),
    _Setting("working directory", os.getcwd, os.chdir),
    _Setting("torch's random state", torch.get_rng_state, torch.set_rng_state,
             same=lambda a, b: bool(torch.equal(a, b)), show=None),
    _Setting("Python's random state", random.getstate, random.setstate, show=None),
    _Setting("NumPy's random state", np.random.get_state, np.random.set_state, same=_same_numpy_state, show=None),
    _Setting("sys.stdout", lambda: sys.stdout, lambda v: setattr(sys, "stdout", v), same=lambda a, b: a is b,
             show=lambda v: type(v).__name__),
    _Setting("sys.stderr", lambda: sys.stderr, lambda v: setattr(sys, "stderr", v), same=lambda a, b: a is b,
             show=lambda v: type(v).__name__),
)


@dataclass
class SideEffects:
    """What a block did around it: output, warnings, settings it changed (restored)."""

    output: str = ""
    warnings: list[str] = field(default_factory=list)
    changed: list[str] = field(default_factory=list)

    def describe_changes(self) -> str:
        """``the layer changed global settings, restored after this check: grad mode (enabled → disabled)``."""
        return f"the layer changed global settings, restored after this check: {', '.join(self.changed)}"

    def annotate(self, message: str, details: dict[str, Any]) -> tuple[str, dict[str, Any]]:
        """A result's message and details with these side effects added."""
        if self.changed:
            message = f"{message}; {self.describe_changes()}" if message else self.describe_changes()
            details["changed_settings"] = list(self.changed)
        if self.warnings:
            details["warnings"] = list(self.warnings)
        if self.output:
            details["output"] = self.output
        return message, details


@contextlib.contextmanager
def contained(*, capture: bool = False, echo: bool = False) -> Iterator[SideEffects]:
    """Run a block with warnings recorded and global settings put back afterwards; with
    ``capture``, file descriptors 1 and 2 go to a file for the block (and with ``echo``, what
    was captured to stderr afterwards: output of a step that has no result to hold it). The
    yielded record is filled when the block ends, however it ends."""
    effects = SideEffects()
    saved = [(setting, setting.get()) for setting in SETTINGS]
    try:
        with warnings.catch_warnings(record=True) as caught, _added_at_import() as excused:
            warnings.simplefilter("always")  # every warning of this block, whatever ran before it
            filters = list(warnings.filters)
            try:
                try:
                    with _captured(effects) if capture else contextlib.nullcontext():
                        yield effects
                finally:
                    if echo and effects.output:
                        sys.stderr.write(effects.output)
                        _flush()
            finally:
                # catch_warnings puts the filters back; a module imported for the first time
                # adding its own is not the layer changing them
                if (any(f not in filters and f not in excused for f in warnings.filters)
                        or any(f not in warnings.filters for f in filters)):
                    effects.changed.append("warnings filters")
                effects.warnings = _listed(caught)
    finally:
        for setting, before in saved:
            now = setting.get()
            if setting.same(now, before):
                continue
            try:
                setting.put(before)
            except Exception:  # e.g. a working directory removed since: nothing to go back to
                pass
            shown = f" ({setting.show(before)} → {setting.show(now)})" if setting.show is not None else ""
            effects.changed.append(f"{setting.name}{shown}")


@contextlib.contextmanager
def _added_at_import() -> Iterator[list[Any]]:
    """Collect the warnings filters that module-level code (a module being imported) adds
    through ``warnings.filterwarnings`` or ``warnings.simplefilter`` during the block."""
    added: list[Any] = []
    originals = warnings.filterwarnings, warnings.simplefilter

    def watched(add: Callable[..., None]) -> Callable[..., None]:
        def wrapper(*args: Any, **kwargs: Any) -> None:
            before = list(warnings.filters)
            add(*args, **kwargs)
            if sys._getframe(1).f_code.co_name == "<module>":
                added.extend(f for f in warnings.filters if f not in before)

        return wrapper

    warnings.filterwarnings, warnings.simplefilter = watched(originals[0]), watched(originals[1])
    try:
        yield added
    finally:
        warnings.filterwarnings, warnings.simplefilter = originals


def capture_into(path: str) -> None:
    """Capture every contained block's output into this file (a worker's, which its parent
    reads when the worker dies in the middle of a check); truncated at each block."""
    global _capture_file
    _capture_file = open(path, "w+b")  # noqa: SIM115  # open for the worker's lifetime


@contextlib.contextmanager
def _captured(effects: SideEffects) -> Iterator[None]:
    """File descriptors 1 and 2 (Python's prints and native ones) into the capture file."""
    with contextlib.ExitStack() as stack:
        sink = _capture_file if _capture_file is not None else stack.enter_context(tempfile.TemporaryFile())
        sink.truncate(0)
        sink.seek(0)
        _flush()
        saved = [os.dup(1), os.dup(2)]
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield
        finally:
            _flush()
            os.dup2(saved[0], 1)
            os.dup2(saved[1], 2)
            for fd in saved:
                os.close(fd)
            sink.seek(0)
            effects.output = shortened(sink.read(4 * OUTPUT_LIMIT).decode("utf-8", "replace"))


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            if stream is not None:
                stream.flush()
        except Exception:  # a stream the layer closed or replaced with something odd
            pass


def _listed(caught: list[warnings.WarningMessage]) -> list[str]:
    """``UserWarning: text (file.py:12)``, each once in the order first seen, with a count."""
    counts: dict[str, int] = {}
    for w in caught:
        key = f"{w.category.__name__}: {w.message} ({os.path.basename(w.filename)}:{w.lineno})"
        counts[key] = counts.get(key, 0) + 1
    listed = [f"{key} ×{n}" if n > 1 else key for key, n in counts.items()]
    if len(listed) > WARNINGS_LIMIT:
        listed = [*listed[:WARNINGS_LIMIT], f"... and {len(listed) - WARNINGS_LIMIT} more"]
    return listed
