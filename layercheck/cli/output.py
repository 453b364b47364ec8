"""Where a report goes: each --output file with its format, checked before anything runs and
written atomically (:func:`destinations`, :func:`check_destination`, :func:`write_atomically`); and
the terminal report written to a pipe or a file without rich's padding: rich pads every line
of an indented block to the block's width, which on a terminal is invisible and in a pipe is
trailing spaces a diff, a log or a grep has to live with. No torch."""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from typing import IO

from layercheck.parent.errors import UsageError
from layercheck.reporting import registry as reporters


class Unpadded:
    """A text stream that writes to ``stream`` with the trailing spaces of each line removed.
    Rich asks it whether it is a terminal (it is not: only pipes and files get one)."""

    def __init__(self, stream: IO[str]) -> None:
        self.stream = stream
        self._line = ""  # the end of the last write, not yet ended by a newline

    def write(self, text: str) -> int:
        lines = (self._line + text).split("\n")
        self._line = lines.pop()
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        # Rich ends each print with a newline and then flushes: a line left open here is written as
        # it is (its end may still come), so that nothing waits in this buffer.
        self.stream.write(self._line)
        self._line = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    def fileno(self) -> int:
        return self.stream.fileno()

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"


def report_stream() -> IO[str]:
    """Standard output, unpadded unless it is a terminal."""
    stream = sys.stdout
    return stream if stream.isatty() else Unpadded(stream)  # type: ignore[return-value]


def destinations(name: str | None, outputs: list[Path]) -> tuple[str, list[tuple[Path, str]]]:
    """What goes to the terminal, and each file with its format. One file takes the format
    named (an unknown one is a usage error), else the one its suffix names (``report.xml``:
    junit), else the table; the terminal then gets the table. Of several files each takes its
    suffix's format, and the format named is the terminal's."""
    fmt = reporters.get(name).name if name is not None else None
    if len(outputs) == 1:
        by_suffix = reporters.for_suffix(outputs[0].suffix)
        return "table", [(outputs[0], fmt or (by_suffix.name if by_suffix is not None else "table"))]
    files: list[tuple[Path, str]] = []
    for path in outputs:
        by_suffix = reporters.for_suffix(path.suffix)
        if by_suffix is None:
            suffixes = ", ".join(info.suffix for info in reporters.catalogue() if info.suffix)
            raise UsageError(f"--output {path}: no report format has the suffix {path.suffix or '(none)'!r}; with "
                             f"several --output files each file's suffix names its format ({suffixes})")
        if any(path == other for other, _ in files):
            raise UsageError(f"--output {path}: given twice")
        files.append((path, by_suffix.name))
    return fmt or "table", files


def check_destination(path: Path) -> None:
    """A report that cannot be written is a usage error found before any check runs (exit 2),
    not a traceback after all of them: ``path`` must not be a folder, and the folder it goes
    in (or the nearest one that exists, when write_atomically will create the rest) must
    accept a new file."""
    if path.is_dir():
        raise UsageError(f"--output {path}: is a folder; name a file")
    existing = path.parent
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        raise UsageError(f"--output {path}: {existing} is a file, not a folder")
    try:
        fd, probe = tempfile.mkstemp(prefix=f".{path.name}.", dir=existing)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        raise UsageError(f"--output {path}: cannot write in {existing} ({exc.strerror or exc})") from None


def write_atomically(path: Path, text: str) -> None:
    """Write to a temporary file beside ``path``, then rename: a partial report never replaces a good one.
    The file gets the mode ``open`` would give it: an existing file's, else what the umask leaves of 0o666
    (mkstemp's temporary file is private, 0o600)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except OSError:
        mode = 0o666 & ~_umask()
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        os.fchmod(fd, mode)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0o022)  # the only way to read it is to set it: put it straight back
    os.umask(mask)
    return mask
