"""Reference pages generated from the code when the docs are built, so they cannot drift.

- ``reference/generated/cli.md``: the ``--help`` of ``layercheck`` and of each of its commands,
  read from the typer app (a command added to the app gets its section without an edit here).
- ``reference/checks/generated/ID.md``: one page per check, holding exactly what
  ``layercheck checks ID`` prints: the check's registration (title, MATLAB counterpart, default
  or opt-in, variants, prerequisites, tolerances) and its docstring. One text, two places.
- ``reference/checks/generated/index.md``: the catalogue, in ``layercheck checks``'s order.
- ``explanation/generated/notes.md``: the ``# Note [...]`` comments of layercheck's source, where
  the full argument for each rule of the gradient check and the other checks is written.

``pages()`` needs no Sphinx: ``tests/test_docs.py`` calls it. The Sphinx extension writes the
pages before the sources are read, and only the ones whose text changed.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
COLUMNS = "100"


def _invoke(*args: str) -> str:
    from typer.testing import CliRunner

    from layercheck.cli.commands import app

    result = CliRunner().invoke(app, list(args), env={"COLUMNS": COLUMNS, "NO_COLOR": "1", "TERM": "dumb"},
                                prog_name="layercheck")
    if result.exit_code != 0:
        raise RuntimeError(f"layercheck {' '.join(args)} exited {result.exit_code}: {result.output}")
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n") + "\n"


def command_names() -> list[str]:
    import typer

    from layercheck.cli.commands import app

    return list(typer.main.get_command(app).commands)  # type: ignore[attr-defined]


def check_text(check_id: str) -> str:
    """What ``layercheck checks ID`` prints, trailing spaces aside."""
    return _invoke("checks", check_id)


def _fence(text: str) -> str:
    return f"```text\n{text}```\n"


def cli_page() -> str:
    parts = [
        "# Command-line help\n",
        "Generated from the typer application when the docs are built: this is what `--help` prints "
        f"(at {COLUMNS} columns).\n",
        "## `layercheck`\n",
        _fence(_invoke("--help")),
    ]
    for name in command_names():
        parts += [f"## `layercheck {name}`\n", _fence(_invoke(name, "--help"))]
    return "\n".join(parts)


def check_page(check_id: str, title: str) -> str:
    return "\n".join([
        f"# `{check_id}`\n",
        f"{title}.\n",
        "What `layercheck checks " + check_id + "` prints: the check's registration and its docstring "
        "(generated when the docs are built).\n",
        _fence(check_text(check_id)),
        "[Explanation: what each check can and cannot see](../../../explanation/what-checks-see.md) · "
        "[the catalogue](index.md)\n",
    ])


def checks_index() -> str:
    from layercheck.parent.listing import entries

    rows = ["| id | runs | what it checks | MATLAB (or PyTorch) counterpart |", "|---|---|---|---|"]
    for e in entries():
        runs = "default" if e.default else "opt-in"
        if e.optional_variants:
            runs += f" (opt-in variants: {', '.join(e.optional_variants)})"
        rows.append(f"| [`{e.id}`]({e.id}.md) | {runs} | {e.title} | {e.matlab or '–'} |")
    toc = "\n".join(e.id for e in entries())
    return "\n".join([
        "# The checks\n",
        "Every check, in the order `layercheck checks` lists them; each page holds what "
        "`layercheck checks ID` prints. Opt-in checks run with `--enable ID`.\n",
        "\n".join(rows) + "\n",
        f"```{{toctree}}\n:hidden:\n\n{toc}\n```\n",
    ])


_COMMENT_NOTE = re.compile(r"^(\s*)# Note \[([^\]]+)\](.*)$")
_DOC_NOTE = re.compile(r"^Note \[([^\]]+)\]$")


def _comment_note(lines: list[str], number: int) -> tuple[str, str, bool] | None:
    """A ``# Note [title]`` comment and the comment lines under it: (title, text, whether it stood
    alone on its line, the form a definition takes), or None for a reference (``... in file.py``)."""
    match = _COMMENT_NOTE.match(lines[number])
    if match is None or match.group(3).startswith(" in "):
        return None
    indent, title, rest = match.groups()
    paragraphs: list[list[str]] = [[rest.removeprefix(":").strip()]]
    for line in lines[number + 1:]:
        stripped = line.strip()
        if not stripped.startswith("#") or not line.startswith(indent) or _COMMENT_NOTE.match(line):
            break
        text = stripped.lstrip("#").strip()
        if text:
            paragraphs[-1].append(text)
        else:
            paragraphs.append([])
    return title, _join(paragraphs), not rest.strip()


def _docstring_note(lines: list[str], number: int) -> tuple[str, str, bool] | None:
    """``Note [title]`` alone on a line of a module docstring, and its indented paragraphs."""
    match = _DOC_NOTE.match(lines[number])
    if match is None:
        return None
    paragraphs: list[list[str]] = [[]]
    for line in lines[number + 1:]:
        if line.strip() and not line.startswith("    "):
            break
        text = line.strip().removesuffix('"""')
        if text:
            paragraphs[-1].append(text)
        else:
            paragraphs.append([])
        if line.strip().endswith('"""'):
            break
    return match.group(1), _join(paragraphs), True


def _join(paragraphs: list[list[str]]) -> str:
    return "\n\n".join(" ".join(p) for p in paragraphs if any(p))


def notes(package: Path = DOCS.parent / "layercheck") -> list[tuple[str, str, str]]:
    """``(title, path:line, text)`` of every Note the source defines, by file. A definition is
    ``Note [title]`` alone on a docstring line or ``# Note [title]`` alone on a comment line, with
    what is indented under it; where a title has none, its longest ``# Note [title]: text``."""
    found: dict[str, tuple[str, str, str, bool]] = {}
    for path in sorted(package.rglob("*.py")):
        lines = path.read_text(encoding="utf-8").splitlines()
        for number in range(len(lines)):
            note = _docstring_note(lines, number) or _comment_note(lines, number)
            if note is None or not note[1]:
                continue
            title, text, definition = note
            where = f"{path.relative_to(package.parent)}:{number + 1}"
            known = found.get(title)
            if known is None or (definition, len(text)) > (known[3], len(known[2])):
                found[title] = (title, where, text, definition)
    return [(title, where, text) for title, where, text, _ in found.values()]


def notes_page() -> str:
    parts = [
        "# The notes in the code\n",
        "The full argument for the rules the pages above state, as written beside the code that "
        "applies them: every `# Note [...]` comment of layercheck's source, gathered when the docs "
        "are built. They are written for whoever changes that code, and cited by name in "
        "[how the gradient check works](../gradient-check.md) and "
        "[how false alarms are avoided](../false-alarms.md).\n",
    ]
    for title, where, body in notes():
        parts += [f"## {title}\n", f"`{where}`\n", body.replace("*", "\\*") + "\n"]
    return "\n".join(parts)


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    from unittest import mock

    from layercheck.parent import listing

    # `layercheck checks ID` reads the catalogue from source to validate ID (a few tenths of a
    # second); read once here for every page, the commands print the same.
    catalogue = listing.entries()
    with mock.patch.object(listing, "entries", lambda: catalogue):
        found = {"reference/generated/cli.md": cli_page(), "reference/checks/generated/index.md": checks_index(),
                 "explanation/generated/notes.md": notes_page()}
        for e in catalogue:
            found[f"reference/checks/generated/{e.id}.md"] = check_page(e.id, e.title)
    return found


def write_pages(root: Path = DOCS) -> None:
    """Write the generated pages under ``root``; leave unchanged ones alone and remove stale ones."""
    wanted = pages()
    for folder in ("reference/generated", "reference/checks/generated", "explanation/generated"):
        for old in (root / folder).glob("*.md"):
            if str(old.relative_to(root)) not in wanted:
                old.unlink()
    for name, text in wanted.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def setup(app: Any) -> dict[str, Any]:
    app.connect("builder-inited", lambda _app: write_pages(Path(_app.srcdir)))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
