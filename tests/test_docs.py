"""The documentation's promises that can drift: every command it shows runs (and prints what it
shows), the generated reference pages come from the code, and the schemas it documents are the
ones the code reads and writes."""

from __future__ import annotations

import functools
import json
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from conftest import ROOT

PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
PAGES = [p for p in PAGES if "_build" not in p.parts and "generated" not in p.parts]
COLUMNS = "80"  # the width the docs' screens are shown at


@dataclass(frozen=True)
class Shown:
    """One command of a ```console block (a line starting ``$ ``, continued by a trailing
    backslash), the output shown under it, if any, and the commands before it in its block (an
    earlier command may write the file a later one reads)."""

    page: Path
    line: int
    command: str
    output: str
    before: tuple[str, ...] = ()

    @property
    def id(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}"


def shown_commands(page: Path) -> list[Shown]:
    found: list[Shown] = []
    lines = page.read_text().splitlines()
    i = 0
    while i < len(lines):
        if lines[i].strip() != "```console":
            i += 1
            continue
        i += 1
        block: list[str] = []
        while i < len(lines) and lines[i].strip() != "```":
            start = i
            command = lines[i].removeprefix("$ ")
            assert lines[i].startswith("$ "), f"{page}:{i + 1}: a console block starts with a command"
            while command.endswith("\\"):
                i += 1
                command = command[:-1] + " " + lines[i].strip()
            i += 1
            output = []
            while i < len(lines) and lines[i].strip() != "```" and not lines[i].startswith("$ "):
                output.append(lines[i])
                i += 1
            found.append(Shown(page, start + 1, command, "\n".join(output), tuple(block)))
            block.append(command)
        i += 1
    return found


SHOWN = [shown for page in PAGES for shown in shown_commands(page)]
LAYERCHECK = [s for s in SHOWN if s.command.startswith("layercheck ")]
# Full-size runs of the bundled specs, torch.compile, Triton's interpreter and a model's scan take 10-60 s each:
# the slow tier runs them.
SLOW = ("run specs", "--enable compile", "--enable autocast", "--interpret", "distributed", "scan ")


def _params() -> list[Any]:
    return [pytest.param(s, id=s.id, marks=[pytest.mark.slow] if any(w in s.command for w in SLOW) else [])
            for s in LAYERCHECK]


def _untimed(screen: str) -> str:
    screen = "\n".join(line.rstrip() for line in screen.splitlines()).strip("\n")
    return re.sub(r"\(\d+\.\ds\)|in \d+\.\d\d s", "(time)", screen)


def test_the_docs_show_commands_in_console_blocks() -> None:
    assert len(LAYERCHECK) >= 15
    assert {s.page.name for s in LAYERCHECK} >= {"README.md", "tutorial.md", "layouts-and-inputs.md", "gpu.md"}


@pytest.mark.parametrize("shown", _params())
def test_every_layercheck_command_the_docs_show_runs(shown: Shown, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    from layercheck.cli.commands import app
    from layercheck.support.accelerators import accelerators

    words = shlex.split(shown.command)[1:]
    devices = [words[i + 1] for i, w in enumerate(words[:-1]) if w in ("--on", "--device")]
    if any(d.split(":")[0] in ("cuda", "mps") for d in devices) and not accelerators():
        pytest.skip(f"{shown.command!r} needs an accelerator")
    if shown.output and accelerators():
        pytest.skip("the docs' screens are a machine's without CUDA or MPS")
    for name in ("docs", "specs", "layers", "tests"):  # the repository's paths, files written to tmp_path
        (tmp_path / name).symlink_to(ROOT / name)
    monkeypatch.chdir(tmp_path)
    for earlier in shown.before:  # the files the block's earlier commands write
        if " -o " in earlier or " --output " in earlier:
            CliRunner().invoke(app, shlex.split(earlier)[1:], env={"COLUMNS": COLUMNS})
    result = CliRunner().invoke(app, words, env={"COLUMNS": COLUMNS}, prog_name="layercheck")
    assert result.exit_code in (0, 1), (shown.id, result.output)
    if shown.output:
        assert _untimed(result.stdout) == _untimed(shown.output), result.stdout
    for i, word in enumerate(words[:-1]):
        if word in ("-o", "--output"):
            assert (tmp_path / words[i + 1]).stat().st_size > 0, words[i + 1]


PYTEST_ON_SPECS = [s for s in SHOWN if s.command.startswith("python -m pytest ") and ".yaml" in s.command]


@pytest.mark.slow
@pytest.mark.parametrize("shown", PYTEST_ON_SPECS, ids=[s.id for s in PYTEST_ON_SPECS])
def test_every_pytest_command_on_spec_files_the_docs_show_runs(shown: Shown, tmp_path: Path) -> None:
    for name in ("docs", "specs", "layers", "tests"):
        (tmp_path / name).symlink_to(ROOT / name)
    words = shlex.split(shown.command)
    done = subprocess.run([sys.executable, *words[1:], "-p", "no:cacheprovider"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"\b[1-9]\d* passed", done.stdout), done.stdout


def test_every_other_command_the_docs_show_is_what_ci_runs(root: Path) -> None:
    """pip, pytest and sphinx commands are not run by a test: each is a subset of what .ci/run runs."""
    ci = (root / ".ci" / "run").read_text().replace('"$PYTHON"', "python")
    ci_words: dict[str, set[str]] = {}
    for line in ci.splitlines():
        if line.startswith("python -m ") or " || python -m " in line:
            words = shlex.split(line.split(" || ")[-1])
            ci_words.setdefault(words[2], set()).update(words[3:])
    others = [s for s in SHOWN if not s.command.startswith("layercheck ") and s not in PYTEST_ON_SPECS]
    assert others
    for shown in others:
        words = shlex.split(shown.command)
        tool, rest = (words[2], words[3:]) if words[:2] == ["python", "-m"] else (words[0], words[1:])
        assert tool in ci_words, (shown.id, f"{tool} is neither run by a test nor by .ci/run")
        assert set(rest) <= ci_words[tool], (shown.id, set(rest) - ci_words[tool])


def test_the_screens_in_the_docs_are_what_the_terminal_shows(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layercheck.cli.commands import app
    from layercheck.support.accelerators import accelerators

    if accelerators():  # the device check then runs and passes: other counts, another line
        pytest.skip("the screens are a machine's without CUDA or MPS (\"skipped device: no CUDA or MPS device\")")
    monkeypatch.chdir(root)
    screens = [found for page in PAGES for found in
               re.findall(r"<!-- screen: layercheck (.*?) \((\d+) columns\) -->\n```\n(.*?)```", page.read_text(),
                          flags=re.S)]
    assert len(screens) == 4  # the README's, the landing page's, and the two of docs/reference/reports.md
    for command, columns, shown in screens:
        result = CliRunner().invoke(app, command.split(), env={"COLUMNS": columns})
        assert result.exit_code in (0, 1), result.output
        assert _untimed(result.stdout) == _untimed(shown), result.stdout
        assert max(len(line) for line in shown.splitlines() if "reproduce:" not in line) <= int(columns)


def _generator() -> Any:
    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import layercheck_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    return layercheck_docs


@functools.cache
def _pages() -> dict[str, str]:
    return _generator().pages()


def test_each_check_has_a_page_with_what_layercheck_checks_id_prints() -> None:
    from layercheck.cli.commands import app, reflow
    from layercheck.parent.listing import as_text
    from layercheck.parent.registry import catalogue

    pages = _pages()
    for info in catalogue():
        page = pages[f"reference/checks/generated/{info.id}.md"]
        assert f"# `{info.id}`" in page and info.title in page
        # the registration and the docstring are the page's text, word for word (rich wraps lines)
        assert " ".join(as_text(reflow(info.doc)).split()) in " ".join(page.split())
        assert all(f"{info.id}.{t.dtype} = {t.default:g}" in page for t in info.tolerances)
    text = CliRunner().invoke(app, ["checks", "gradients"], env={"COLUMNS": "100"}).stdout
    page = pages["reference/checks/generated/gradients.md"]
    assert "\n".join(line.rstrip() for line in text.splitlines()).strip() in page
    index = pages["reference/checks/generated/index.md"]
    assert re.findall(r"\[`([a-z_0-9]+)`\]", index) == [c.id for c in catalogue()]


def test_the_cli_page_holds_the_help_of_every_command() -> None:
    page = _pages()["reference/generated/cli.md"]
    names = _generator().command_names()
    assert {"run", "checks", "init"} <= set(names)
    for name in names:
        assert f"## `layercheck {name}`" in page and f"Usage: layercheck {name}" in page
    assert "--layout" in page and "--tolerance" in page


def test_the_spec_schema_page_names_every_key_the_spec_reader_accepts(root: Path) -> None:
    from layercheck.parent.spec import _CHECK_KEYS, _KEYS

    text = (root / "docs" / "reference" / "spec-schema.md").read_text()
    block = re.search(r"```yaml\n(.*?)```", text, flags=re.S)
    assert block is not None
    documented = re.findall(r"^(\s*)([a-z_]+):", block.group(1), flags=re.M)
    assert {k for indent, k in documented if not indent} == set(_KEYS)
    assert set(_CHECK_KEYS) <= {k for indent, k in documented if indent}


def _shape(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _shape(v) for k, v in value.items() if k != "details"}
    if isinstance(value, list):
        return [_shape(v) for v in value[:1]]
    return type(value).__name__ if value is not None else None


def test_the_report_schema_page_shows_the_keys_a_json_report_has(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from layercheck.cli.commands import app

    text = (root / "docs" / "reference" / "reports.md").read_text()
    shown = json.loads(re.search(r"<!-- json-schema.*?-->\n```json\n(.*?)```", text, flags=re.S).group(1))  # type: ignore[union-attr]
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["run", "specs/prelu.yaml", "--check", "gradients:float64", "--format", "json"])
    assert result.exit_code == 0, result.output
    real = json.loads(result.stdout)
    assert _shape(shown) == _shape(real)
    documented = set(re.findall(r"^\| `([a-z_]+)`", text, flags=re.M))
    assert set(real) - {"runs"} <= documented | {"layercheck_version", "environment"}


def test_the_readme_links_pages_that_exist_and_stays_short(root: Path) -> None:
    text = (root / "README.md").read_text()
    links = re.findall(r"\]\(([^)#:]+)\)", text)
    assert len(links) >= 15
    for link in links:
        assert (root / link).exists(), link
    assert len(text.splitlines()) <= 300


def test_every_docs_page_is_in_a_toctree(root: Path) -> None:
    docs = root / "docs"
    listed = {"index"}
    for page in docs.rglob("*.md"):
        if "_build" in page.parts or "generated" in page.parts:
            continue
        for block in re.findall(r"```\{toctree\}\n(.*?)```", page.read_text(), flags=re.S):
            for entry in block.splitlines():
                if entry.strip() and not entry.startswith(":"):
                    listed.add(str((page.parent / entry.strip()).relative_to(docs)))
    pages = {str(p.relative_to(docs).with_suffix("")) for p in docs.rglob("*.md")
             if "_build" not in p.parts and "generated" not in p.parts}
    assert pages <= listed, pages - listed


def test_every_note_the_docs_and_the_code_name_is_one_the_notes_page_holds(root: Path) -> None:
    defined = {title for title, _, _ in _generator().notes()}
    assert len(defined) >= 30 and "emulated rounding" in defined and "jumps" in defined
    named: dict[str, set[str]] = {}
    for path in [*PAGES, *sorted((root / "layercheck").rglob("*.py"))]:
        for title in re.findall(r"Note\s+\[([^\]]+)\]", path.read_text()):
            named.setdefault(" ".join(title.replace("#", " ").split()), set()).add(path.name)
    named.pop("...", None)  # the convention written out with "..." for a name, not a note
    assert set(named) <= defined, {t: named[t] for t in set(named) - defined}
    page = _pages()["generated/notes.md"]
    assert all(f"## {title}\n" in page for title in defined)
    # and a page that says which file holds a note names the file that does
    where = {title: place.split(":")[0] for title, place, _ in _generator().notes()}
    for path in PAGES:
        for title, file in re.findall(r"Note\s+\[([^\]]+)\]\s+in\s+`([^`]+)`", path.read_text()):
            title = " ".join(title.split())
            assert where[title].endswith(file), (path.name, title, file, where[title])
