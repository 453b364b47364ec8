"""Where the user's code raised: the frames of the layer's own files in an exception's traceback.

A failure caused by an exception points at the line that raised, not at the class: the JSON
report's ``location``, a GitHub annotation's line, the console's traceback all read these
records (``{"file", "line", "name", "code"}``, innermost last; the file as the reports show it,
relative to the working directory where it lies below it).
"""

from __future__ import annotations

import traceback
from typing import Any

from layercheck.support.locations import shown_path
from layercheck.target.frames import chain, is_user_file


def user_frames(exc: BaseException) -> tuple[list[dict[str, Any]], int]:
    """The frames of the user's code in the innermost exception of ``exc``'s chain that has
    any (the one the layer raised: a CheckFailed or a LoadError wraps it), innermost last, and
    how many other frames (torch's, layercheck's, Python's) that traceback holds."""
    for link in reversed(chain(exc)):
        frames = traceback.extract_tb(link.__traceback__)
        mine = [{"file": shown_path(f.filename), "line": f.lineno, "name": f.name, "code": (f.line or "").strip()}
                for f in frames if is_user_file(f.filename)]
        if mine:
            return mine, len(frames) - len(mine)
    return [], 0


def raised_at(exc: BaseException) -> dict[str, Any] | None:
    """The line of the user's code that raised, ``{"file", "line", "name", "code"}``, with
    ``"frames"`` (every frame of the user's code on the way there) and ``"folded"`` (how many
    frames of libraries were left out); None where no frame is the user's."""
    frames, folded = user_frames(exc)
    if not frames:
        return None
    return {**frames[-1], "frames": frames, "folded": folded}
