"""The terminal report written to a pipe or a file without rich's padding: rich pads every line
of an indented block to the block's width, which on a terminal is invisible and in a pipe is
trailing spaces a diff, a log or a grep has to live with. No torch."""

from __future__ import annotations

import sys
from typing import IO


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
