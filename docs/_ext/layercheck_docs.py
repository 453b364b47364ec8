"""Reference pages generated from the code when the docs are built, so they cannot drift.

- ``reference/generated/cli.md``: the ``--help`` of ``layercheck`` and of each of its commands,
  read from the typer app (a command added to the app gets its section without an edit here).
- ``reference/checks/generated/ID.md``: one page per check, holding exactly what
  ``layercheck checks ID`` prints: the check's registration (title, MATLAB counterpart, default
  or opt-in, variants, prerequisites, tolerances) and its docstring. One text, two places.
- ``reference/checks/generated/index.md``: the catalogue, in ``layercheck checks``'s order.
- ``reference/generated/api.md``: the Python API, ``layercheck.__all__`` and the check SDK's stable
  names (``layercheck.sdk.STABLE``), each documented from its docstring by autodoc; nothing else.
- ``generated/notes.md`` (under Contributing): the ``# Note [...]`` comments of layercheck's source, where
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
        "[how the gradient check works](../explanation/gradient-check.md) and "
        "[how false alarms are avoided](../explanation/false-alarms.md).\n",
    ]
    for title, where, body in notes():
        parts += [f"## {title}\n", f"`{where}`\n", body.replace("*", "\\*") + "\n"]
    return "\n".join(parts)


def api_names() -> tuple[list[str], list[str]]:
    """The names the API page documents: ``layercheck.__all__`` (but ``__version__``), and the
    stable SDK names that are not the same object as one of those."""
    import layercheck
    from layercheck import sdk

    public = sorted(name for name in layercheck.__all__ if name != "__version__")
    shared = {id(getattr(layercheck, name)) for name in public}
    stable = sorted((name for name in sdk.STABLE if id(getattr(sdk, name)) not in shared), key=str.lower)
    return public, stable


def _autodoc(module: str, name: str) -> str:
    import importlib
    import inspect

    obj = getattr(importlib.import_module(module), name)
    if inspect.isclass(obj):
        directive = ("autoexception" if issubclass(obj, BaseException) else "autoclass", "   :members:\n")
    elif inspect.isfunction(obj):
        directive = ("autofunction", "")
    else:  # a constant: its ``#:`` comment or docstring where it is assigned (not its type's docstring)
        directive = ("py:data", "".join(f"\n   {line}" if line else "\n" for line in _attribute_doc(name, obj)))
    # autodoc writes reStructuredText: parsed as such inside eval-rst, not as MyST
    return f"```{{eval-rst}}\n.. {directive[0]}:: {module}.{name}\n{directive[1]}\n```\n"


def _attribute_doc(name: str, obj: object) -> list[str]:
    """The documentation of a module-level constant, from the layercheck module that assigns it."""
    import sys

    from sphinx.pycode import ModuleAnalyzer

    for module in sorted(m for m in sys.modules if m.startswith("layercheck.")):
        if getattr(sys.modules[module], name, None) is obj:
            lines = ModuleAnalyzer.for_module(module).find_attr_docs().get(("", name))
            if lines:
                return list(lines)
    raise LookupError(f"layercheck.sdk.{name} is stable but documented nowhere: give it a #: comment")


def api_page() -> str:
    from layercheck import sdk

    public, stable = api_names()
    parts = [
        "# Python API\n",
        "Generated from the docstrings when the docs are built. It documents the public names and "
        "nothing else: what `layercheck` exports (`layercheck.__all__`), then the stable names of the "
        f"check SDK, `layercheck.sdk` (`layercheck.sdk.STABLE`, SDK version {sdk.SDK_VERSION}), for a "
        "check of your own ([writing a check](../../howto/extending.md)). Anything else may change in "
        "any release.\n",
        "## `layercheck`\n",
        "Running the checks from Python: [the Python API and pytest](../../howto/python-and-pytest.md).\n",
    ]
    parts += [_autodoc("layercheck", name) for name in public]
    also = sorted(name for name in sdk.STABLE if name not in stable)
    parts += ["## `layercheck.sdk`\n",
              "Also stable there, and documented above as the same objects: "
              + ", ".join(f"`{name}`" for name in also) + ".\n"]
    parts += [_autodoc("layercheck.sdk", name) for name in stable]
    return "\n".join(parts)


def pages() -> dict[str, str]:
    """Every generated page, by its path under docs/."""
    from unittest import mock

    from layercheck.parent import listing

    # `layercheck checks ID` reads the catalogue from source to validate ID (a few tenths of a
    # second); read once here for every page, the commands print the same.
    catalogue = listing.entries()
    with mock.patch.object(listing, "entries", lambda: catalogue):
        found = {"reference/generated/cli.md": cli_page(), "reference/generated/api.md": api_page(),
                 "reference/checks/generated/index.md": checks_index(),
                 "generated/notes.md": notes_page()}
        for e in catalogue:
            found[f"reference/checks/generated/{e.id}.md"] = check_page(e.id, e.title)
    return found


def write_pages(root: Path = DOCS) -> None:
    """Write the generated pages under ``root``; leave unchanged ones alone and remove stale ones."""
    wanted = pages()
    for folder in ("reference/generated", "reference/checks/generated", "explanation/generated", "generated"):
        for old in (root / folder).glob("*.md"):
            if str(old.relative_to(root)) not in wanted:
                old.unlink()
    for name, text in wanted.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        if not path.exists() or path.read_text() != text:
            path.write_text(text)


def setup(app: Any) -> dict[str, Any]:
    app.setup_extension("sphinx.ext.autodoc")
    app.connect("builder-inited", lambda _app: write_pages(Path(_app.srcdir)))
    return {"parallel_read_safe": True, "parallel_write_safe": True}
