"""The README's promises that can drift: the check catalogue and the quick start. Its screen and
its commands are run by tests/test_docs.py, with the docs' own."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from layercheck.parent.registry import catalogue


def test_readme_catalogue_lists_every_check_with_its_default(root: Path) -> None:
    text = (root / "README.md").read_text()
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| .* \| (default|opt-in)[^|]* \|$", text, flags=re.M))
    assert rows == {c.id: "default" if c.default else "opt-in" for c in catalogue()}


def test_quick_start_holds_the_install_and_the_everyday_test_commands(root: Path) -> None:
    text = (root / "README.md").read_text()
    block = re.search(r"## Quick start\n\n```bash\n(.*?)```", text, flags=re.S)
    assert block is not None
    commands = block.group(1).strip().splitlines()
    assert len(commands) == 2
    assert "pip install" in commands[0] and '-e ".[test]"' in commands[0] and "layercheck run specs" in commands[0]
    assert commands[1] == 'python -m pytest -m "not slow" -n auto'
    # .ci/run runs the same tier first (with -q and --durations), then the slow one
    ci = [shlex.split(line) for line in (root / ".ci" / "run").read_text().replace('"$PYTHON"', "python").splitlines()
          if line.startswith("python -m pytest")]
    assert len(ci) == 2
    assert set(shlex.split(commands[1])) <= set(ci[0]) and "not slow" in ci[0]
    assert ci[1][ci[1].index("-m", 2) + 1] == "slow" and "auto" in ci[1]
