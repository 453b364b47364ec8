"""The code's ``Note [...]`` explanations (gradcheck's convention): every reference, in the package,
the tests and the benchmarks, names a note some file of the package holds, and a reference that
says where (``Note [kinks] in numerics/engine.py``) points at the file that holds it. Moving code
between modules must move its notes, and the references with them."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import ROOT

PACKAGE = ROOT / "layercheck"

# A note is held where a line starts with it (in a comment or a docstring), alone or before a colon.
HELD = re.compile(r"^[ \t]*(?:#[ \t]*)?Note \[([^\]]+)\][ \t]*(?::|$)", re.M)
# A reference, with comment markers and line breaks folded away: Note [name], Notes [name],
# optionally "in path.py" (in backquotes or not).
REFERENCE = re.compile(r"Notes? \[([^\]]+)\](?: in (?:``)?([\w/.]+\.py)(?:``)?)?")


def _held() -> dict[str, set[str]]:
    held: dict[str, set[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        for name in HELD.findall(path.read_text()):
            held.setdefault(name, set()).add(path.relative_to(PACKAGE).as_posix())
    return held


def _references(path: Path) -> list[tuple[str, str | None]]:
    folded = " ".join(line.strip().lstrip("#").strip() for line in path.read_text().splitlines())
    return [(name, where or None) for name, where in REFERENCE.findall(folded)]


def test_every_note_reference_names_a_note_and_the_file_that_holds_it() -> None:
    held = _held()
    assert len(held) > 30  # the package's notes were found
    files = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py")]
    dangling = []
    for path in sorted(files):
        if path == Path(__file__):
            continue  # its own patterns
        for name, where in _references(path):
            homes = held.get(name, set())
            if not homes:
                dangling.append(f"{path.relative_to(ROOT)}: Note [{name}] is held nowhere")
            elif where is not None and not any(home == where.removeprefix("layercheck/") or
                                               home.endswith(f"/{where}") for home in homes):
                dangling.append(f"{path.relative_to(ROOT)}: Note [{name}] in {where}, held in {', '.join(homes)}")
    assert not dangling, "\n".join(dangling)


def test_each_note_is_held_in_one_file() -> None:
    shared = {name: homes for name, homes in _held().items() if len(homes) > 1}
    assert not shared, shared
