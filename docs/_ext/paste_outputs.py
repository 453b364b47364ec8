"""Paste what the commands print into the docs, where a page shows their output.

Run from the repository's root after a change to the terminal report:
``python docs/_ext/paste_outputs.py``. It rewrites the output under each ``$ layercheck ...``
line of a ```console block that shows output (at 80 columns), and each
``<!-- screen: layercheck ARGS (N columns) -->`` block, in README.md and docs/. Review the diff:
tests/test_docs.py then holds the pages to it.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent


def _run(words: list[str], columns: str) -> str:
    from typer.testing import CliRunner

    from layercheck.cli.commands import app

    result = CliRunner().invoke(app, words, env={"COLUMNS": columns}, prog_name="layercheck")
    return "\n".join(line.rstrip() for line in result.stdout.splitlines()).strip("\n")


def _paste_console(lines: list[str]) -> list[str]:
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        while lines[i].strip() != "```":
            command = lines[i][2:]
            out.append(lines[i])
            i += 1
            while command.endswith("\\"):
                out.append(lines[i])
                command = command[:-1] + " " + lines[i].strip()
                i += 1
            shown = False
            while lines[i].strip() != "```" and not lines[i].startswith("$ "):
                shown = True
                i += 1
            if shown and command.startswith("layercheck "):
                out.append(_run(shlex.split(command)[1:], "80"))
        out.append(lines[i])
        i += 1
    return out


def main() -> None:
    pages = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for page in (p for p in pages if "_build" not in p.parts and "generated" not in p.parts):
        text = page.read_text()
        new = re.sub(r"(<!-- screen: layercheck (.*?) \((\d+) columns\) -->\n)```\n.*?```",
                     lambda m: f"{m.group(1)}```\n{_run(m.group(2).split(), m.group(3))}\n```", text, flags=re.S)
        new = "\n".join(_paste_console(new.split("\n")))
        if new != text:
            page.write_text(new)
            print(f"pasted into {page.relative_to(ROOT)}")


if __name__ == "__main__":  # the check workers' fork server imports this module again: run once
    main()
