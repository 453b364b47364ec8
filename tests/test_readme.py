"""The README's promises that can drift: the check catalogue and the quick start."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layercheck.registry import catalogue


def test_readme_catalogue_lists_every_check_with_its_default(root: Path) -> None:
    text = (root / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| .* \| (default|opt-in)[^|]* \|$", text, flags=re.M))
    assert rows == {c.id: "default" if c.default else "opt-in" for c in catalogue()}


def test_quick_start_holds_the_install_and_test_commands(root: Path) -> None:
    text = (root / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2
    assert "pip install" in commands[0] and "layercheck run specs" in commands[0]
    assert commands[1] == "python -m pytest -q"
    assert "python -m pytest -q" in (root / ".ci" / "run").read_text().replace('"$PYTHON"', "python")


def test_the_screens_in_the_readme_are_what_the_terminal_shows(root: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from layercheck.accelerators import accelerators

    if accelerators():  # the device check then runs and passes: other counts, another line
        pytest.skip("the README's screens are a machine's without CUDA or MPS (\"skipped device: no CUDA or MPS "
                    "device\")")

    from layercheck.cli import app

    monkeypatch.chdir(root)
    text = (root / "README.md").read_text()
    screens = re.findall(r"<!-- screen: layercheck (.*?) \((\d+) columns\) -->\n```\n(.*?)```", text, flags=re.S)
    assert len(screens) == 2
    for command, columns, shown in screens:
        result = CliRunner().invoke(app, command.split(), env={"COLUMNS": columns})
        assert result.exit_code in (0, 1), result.output
        real = "\n".join(line.rstrip() for line in result.stdout.splitlines())
        assert _untimed(real) == _untimed(shown.rstrip("\n")), real
        assert max(len(line) for line in shown.splitlines() if "reproduce:" not in line) <= int(columns)


def _untimed(screen: str) -> str:
    return re.sub(r"\(\d+\.\ds\)|in \d+\.\d\d s", "(time)", screen)
