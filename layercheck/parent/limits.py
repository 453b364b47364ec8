"""Memory limits: what a target's layouts will need, what the machine can give, and the
limit a worker process runs under.

Before anything runs, every target's layouts are priced (:func:`estimate`) and a target
priced beyond the limit is refused as a usage error (exit 2): a typo such as
``1000000,1000000:BC`` should not take the machine down. The limit is ``--max-memory``,
else half of the memory the machine has available. A worker process also runs under an
operating-system limit on its writable memory (:func:`limit_worker_memory`), so a layer that
allocates without bound gets an allocation error, which the runner reports as an ``error``
result (:func:`out_of_memory`), instead of the machine swapping or the whole tool being killed.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import sys
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from layercheck.parent.errors import UsageError
from layercheck.parent.layout import Layout

DEFAULT_TIMEOUT = 300.0
"""Each check's time limit in seconds unless ``--timeout`` says otherwise."""

_clock: tuple[float, float] | None = None  # the running check's start and end, in time.monotonic()


@contextlib.contextmanager
def deadline(seconds: float | None) -> Iterator[None]:
    """While the block runs, :func:`check_clock` says how much of ``seconds`` (a check's time
    limit) is spent and left, so that work a check may cut short (narrowing a wrong gradient
    down) stays inside it."""
    global _clock
    before = _clock
    now = time.monotonic()
    _clock = None if seconds is None or seconds <= 0 else (now, now + seconds)
    try:
        yield
    finally:
        _clock = before


def check_clock() -> tuple[float, float] | None:
    """(seconds spent, seconds left) of the running check's time limit (:func:`deadline`), None without one."""
    if _clock is None:
        return None
    now = time.monotonic()
    return now - _clock[0], max(0.0, _clock[1] - now)


# Note [memory estimate]
# The estimate is one float64 forward+backward of the layer times the multiple of it the
# default suite holds at its peak, both measured (benchmarks/cost.py, bundled SReLU at
# 24,24,20,128 and 48,48,20,128, each check's peak_memory as a multiple of one forward+backward
# measured beside it). One float64 forward+backward of an elementwise layer holds about 42 bytes
# per input element at its peak: the input, the copy the layer is given, the output, the
# output's gradient, the input's gradient and what backward computes on the way (5.25 float64
# copies; 60.3 and 247.6 MB at the two sizes). The suite's peak is SUITE_MULTIPLE of that (1.8
# and 1.9 measured): the float64 gradient run's own peak (backward_size: 1.4) on top of what
# is held while it runs (the inputs, the seeded output gradients and the float32 gradients:
# about 0.5); the checks that hold more of their own run on a sample of the batch at these
# sizes (Target.sampled). Parameters and a layer whose activations are much larger than
# its input (a convolution to many channels, attention over a long sequence) are not known
# before the layer is built: the worker's own limit (limit_worker_memory) catches what the
# estimate misses.
FORWARD_BACKWARD_BYTES_PER_ELEMENT = 42
SUITE_MULTIPLE = 2.0
BYTES_PER_ELEMENT = math.ceil(FORWARD_BACKWARD_BYTES_PER_ELEMENT * SUITE_MULTIPLE)

# The default limit: this share of the memory the machine has available when the run starts.
DEFAULT_SHARE = 0.5

# Beyond the budget, a worker may map this much more: thread stacks (8 MiB each) and malloc's
# per-thread arenas count as writable memory before anything is stored in them.
HEADROOM = 256 << 20

_UNITS = {
    "": 1, "b": 1,
    "kb": 10**3, "mb": 10**6, "gb": 10**9, "tb": 10**12,
    "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40,
    "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30, "tib": 1 << 40,
}
_SIZE = re.compile(r"\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-zA-Z]*)\s*")


@dataclass(frozen=True)
class MemoryLimit:
    """A limit in bytes (None: no limit) and where it comes from, for messages."""

    bytes: int | None
    source: str


def parse_size(text: str, option: str = "--max-memory") -> int | None:
    """``2GB`` (10^9 bytes), ``512MiB`` or ``512M`` (2^20 bytes), ``1500000000``; ``0`` or
    ``none``: no limit (None). Raises UsageError for anything else."""
    if text.strip().lower() in ("0", "none"):
        return None
    match = _SIZE.fullmatch(text)
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise UsageError(f"{option} {text!r}: expected a size such as 2GB, 512MiB or 1500000000 (bytes), "
                         "or 0 for no limit")
    value = float(match.group(1)) * _UNITS[unit]
    if not math.isfinite(value) or value < 1:
        raise UsageError(f"{option} {text!r}: expected a size of at least one byte, or 0 for no limit")
    return int(value)


def format_size(n: int) -> str:
    """``8.0 TB``, ``512.0 MB``: decimal units, as ``--max-memory 2GB`` reads them; beyond
    petabytes, a power of ten (a layout may hold numbers of any size)."""
    if n >= 1000 * 10**15:
        return f"10^{len(str(n)) - 1} bytes"
    for unit, scale in (("PB", 10**15), ("TB", 10**12), ("GB", 10**9), ("MB", 10**6), ("kB", 10**3)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


def _count(n: int) -> str:
    return f"{n:,}" if n < 10**18 else f"10^{len(str(n)) - 1}"


def elements(layouts: Iterable[Layout]) -> int:
    return sum(math.prod(layout.size) for layout in layouts)


def estimate(layouts: Iterable[Layout]) -> int:
    """Bytes a target with these input layouts needs, roughly (Note [memory estimate])."""
    return elements(layouts) * BYTES_PER_ELEMENT


def available_memory() -> int | None:
    """Bytes the machine can give now: MemAvailable, or less where a cgroup (a container)
    allows less; None where neither can be read."""
    candidates: list[int] = []
    meminfo = _read("/proc/meminfo")
    found = re.search(r"^MemAvailable:\s+(\d+) kB", meminfo or "", re.MULTILINE)
    if found:
        candidates.append(int(found.group(1)) * 1024)
    elif hasattr(os, "sysconf") and "SC_AVPHYS_PAGES" in os.sysconf_names:
        candidates.append(os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"))
    for limit_file, usage_file in (("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"),
                                   ("/sys/fs/cgroup/memory/memory.limit_in_bytes",
                                    "/sys/fs/cgroup/memory/memory.usage_in_bytes")):
        limit, usage = (_read(limit_file) or "").strip(), (_read(usage_file) or "").strip()
        # cgroup v2 writes "max" for no limit, v1 a huge number
        if limit.isdigit() and usage.isdigit() and int(limit) < 1 << 60:
            candidates.append(max(0, int(limit) - int(usage)))
    return min(candidates) if candidates else None


def memory_limit(max_memory: str | None) -> MemoryLimit:
    """The limit of this run: ``--max-memory``'s, else DEFAULT_SHARE of the available memory."""
    if max_memory is not None:
        return MemoryLimit(parse_size(max_memory), "--max-memory")
    available = available_memory()
    if available is None:
        return MemoryLimit(None, "no limit: the available memory is unknown")
    return MemoryLimit(int(available * DEFAULT_SHARE),
                       f"half of the {format_size(available)} this machine has available; --max-memory SIZE sets it")


def refuse_oversized(name: str, layouts: Iterable[Layout], limit: MemoryLimit) -> None:
    """Raise UsageError when a target's layouts are priced beyond the limit."""
    layouts = list(layouts)
    needed = estimate(layouts)
    if limit.bytes is None or needed <= limit.bytes:
        return
    raise UsageError(f"{name}: its inputs need about {format_size(needed)} ({_count(elements(layouts))} elements × "
                     f"{BYTES_PER_ELEMENT} bytes for the copies, outputs and finite differences the checks make), "
                     f"more than the limit of {format_size(limit.bytes)} ({limit.source}); check a smaller layout")


def limit_worker_memory(budget: int | None) -> int | None:
    """Limit this process's writable memory (RLIMIT_DATA) to what it holds now plus
    ``budget`` and HEADROOM; the limit set, or None where there is none to set.

    RLIMIT_DATA (Linux 4.7 on) counts private writable mappings — the heap and every tensor
    torch allocates — but not code, files mapped read-only, or address space reserved and
    never made writable: torch maps about 0.7 GB of address space at import, of which 0.3 GB
    is writable, and an accelerator's driver reserves far more without using it, so
    RLIMIT_AS would have to be set so high that it limits little."""
    if budget is None:
        return None
    try:
        import resource
    except ImportError:  # not on this platform
        return None
    held = _writable_bytes()
    if held is None:
        return None
    limit = held + budget + HEADROOM
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (limit, hard))
    except (ValueError, OSError):
        return None
    return limit


def out_of_memory(exc: BaseException) -> BaseException | None:
    """The allocation failure behind ``exc`` (a MemoryError, or torch's "can't allocate
    memory" / "out of memory"), following causes and a layer's wrapped exception; else None."""
    seen: set[int] = set()
    stack: list[BaseException | None] = [exc]
    while stack:
        current = stack.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, MemoryError) or (
                isinstance(current, RuntimeError) and any(text in str(current) for text in _OOM_TEXTS)):
            return current
        stack.extend([current.__cause__, current.__context__, getattr(current, "exc", None)])
    return None


_OOM_TEXTS = ("can't allocate memory", "out of memory", "std::bad_alloc", "Cannot allocate memory")


# -- measuring what a check used ------------------------------------------------------------------


@dataclass
class Peak:
    """What one block of code used at most, above what the process held when it began: its
    resident memory (``host``) and, where it used an accelerator, the accelerator's allocated
    memory (``device``); None where it could not be measured."""

    host: int | None = None
    device: int | None = None

    @property
    def total(self) -> int | None:
        if self.host is None and self.device is None:
            return None
        return (self.host or 0) + (self.device or 0)


# The highest resident memory seen by any measurement in this process (bytes): measuring a
# block resets the kernel's own high-water mark (VmHWM), so the process's peak is kept here.
_highest = 0


@contextlib.contextmanager
def measure_peak() -> Iterator[Peak]:
    """Measure the block's peak memory. On Linux the kernel's high-water mark of this process's
    resident set is reset (``/proc/self/clear_refs``) and read back after the block (the growth
    above the resident set at its start: memory the process holds from before and reuses does
    not count, see :func:`track_freed_memory`); an accelerator's peak is torch's allocated
    peak (``torch.cuda.max_memory_allocated``), when CUDA is in use."""
    peak = Peak()
    start = _reset_high_water()
    cuda = _cuda()
    held = {}
    if cuda is not None:
        for index in range(cuda.device_count()):
            held[index] = cuda.memory_allocated(index)
            cuda.reset_peak_memory_stats(index)
    try:
        yield peak
    finally:
        high = _high_water()
        if start is not None and high is not None:
            peak.host = max(0, high - start)
        cuda = _cuda()  # initialised by the block, maybe
        if cuda is not None:
            peak.device = max(0, sum(cuda.max_memory_allocated(index) - held.get(index, 0)
                                     for index in range(cuda.device_count())))


def highest_resident() -> int | None:
    """The highest resident memory of this process (bytes) since it began or since
    :func:`reset_highest`, measurements included."""
    high = _high_water()
    return None if high is None else max(high, _highest)


def reset_highest() -> None:
    """Start :func:`highest_resident` afresh from the resident memory now."""
    global _highest
    _reset_high_water()
    _highest = resident() or 0


def resident() -> int | None:
    """This process's resident memory now (bytes); None where it cannot be read."""
    return _status_bytes("VmRSS")[0]


# glibc's mallopt parameter for the size from which an allocation is mapped on its own
_M_MMAP_THRESHOLD = -3


def track_freed_memory(threshold: int = 1 << 20) -> bool:
    """Have glibc map every allocation of ``threshold`` bytes or more on its own, so that
    freeing it gives it back to the system at once; whether that was set (glibc only).

    By default glibc raises that threshold to the size of a large block once it is freed (up
    to 32 MiB), after which tensors of that size come from the heap and stay resident when
    freed: the resident set then measures what was once alive, not what is, and a check's
    peak hides in the memory a previous one left. Called before torch allocates, it makes
    resident memory follow live tensors (:func:`measure_peak`), for measuring (the cost
    benchmark). It is not for the checks' own processes: every large allocation then faults
    its pages in afresh, which makes one float64 forward+backward of SReLU at 24,24,20,128
    take three times as long (140 ms instead of 47)."""
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return bool(libc.mallopt(_M_MMAP_THRESHOLD, threshold))
    except (OSError, AttributeError):  # not glibc
        return False


def _reset_high_water() -> int | None:
    """Reset the kernel's high-water mark of the resident set to the resident set now, and
    return it (bytes); None where that is not possible (not Linux, or /proc not writable)."""
    global _highest
    high, now = _status_bytes("VmHWM", "VmRSS")  # clearing the mark leaves the resident set as it is
    if high is None:
        return None
    _highest = max(_highest, high)
    try:
        fd = os.open("/proc/self/clear_refs", os.O_WRONLY)
        try:
            os.write(fd, b"5")
        finally:
            os.close(fd)
    except OSError:
        return None
    return now


def _high_water() -> int | None:
    return _status_bytes("VmHWM")[0]


def _status_bytes(*keys: str) -> list[int | None]:
    """The sizes /proc/self/status gives for ``keys`` (bytes), None for those it lacks; read
    once (a few microseconds: measuring every check must cost next to nothing)."""
    try:
        fd = os.open("/proc/self/status", os.O_RDONLY)
        try:
            text = os.read(fd, 1 << 16).decode("ascii", "replace")
        finally:
            os.close(fd)
    except OSError:
        text = ""
    found = [re.search(rf"^{key}:\s+(\d+) kB", text, re.MULTILINE) for key in keys]
    return [int(f.group(1)) * 1024 if f else None for f in found]


def _cuda() -> Any:
    """``torch.cuda`` where this process has initialised CUDA; None otherwise (measuring must
    neither import torch nor initialise CUDA)."""
    torch: Any = sys.modules.get("torch")
    if torch is None or not torch.cuda.is_initialized():
        return None
    return torch.cuda


def _writable_bytes() -> int | None:
    """This process's private writable memory (VmData), as RLIMIT_DATA counts it."""
    return _status_bytes("VmData")[0]


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text()
    except OSError:
        return None


OUTPUT_LIMIT = 10_000
"""What one check's captured output may hold: the start and the end of anything longer."""


def shortened(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    half = OUTPUT_LIMIT // 2
    return f"{text[:half]}\n... ({len(text) - 2 * half} characters left out) ...\n{text[-half:]}"
