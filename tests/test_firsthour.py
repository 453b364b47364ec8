"""The first hour, second round (issue 51): what a newcomer meets, through the interfaces they touch.

Where the user's code raised, in every report: the console, JSON, GitHub annotations, the API.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layercheck.cli import app

cli = CliRunner()

# A constructor that raises inside a helper it calls (line 7), and a forward that raises (line 12).
HELPER_RAISES = """\
import torch
from torch import nn


def make_weight(n):
    w = torch.zeros(n)
    return w.view(16, -1, 3)


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(make_weight(16))

    def forward(self, x):
        return x * 2
"""

FORWARD_RAISES = """\
import torch
from torch import nn


class Broken(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.ones(16))

    def forward(self, x):
        y = x * self.w
        return y.view(3, -1, 7)
"""


@pytest.fixture
def layers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "helper.py").write_text(HELPER_RAISES)
    (tmp_path / "forward.py").write_text(FORWARD_RAISES)
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    result = cli.invoke(app, ["run", *args], env={"COLUMNS": "100"})
    return result.exit_code, result.stdout


def test_the_console_shows_the_constructor_frames_down_to_the_helper_that_raised(layers: Path) -> None:
    for flags in ((), ("-v",), ("-q",)):
        code, out = invoke("helper.py", "--layout", "8,16:BC", *flags)
        assert code == 1
        lines = [line.strip() for line in out.splitlines()]
        trace = ['File "helper.py", line 13, in __init__', "self.w = nn.Parameter(make_weight(16))",
                 'File "helper.py", line 7, in make_weight', "return w.view(16, -1, 3)"]
        start = lines.index(trace[0]) if trace[0] in lines else -1
        assert lines[start:start + 4] == trace, (flags, out)
        assert "library frame" in out and "folded" in out


def test_json_locates_a_construction_error_on_the_line_that_raised(layers: Path) -> None:
    code, out = invoke("helper.py", "--layout", "8,16:BC", "--format", "json")
    (run,) = json.loads(out)["runs"]
    assert code == 1 and run["status"] == "error"
    where = run["location"]
    assert (where["file"], where["line"], where["name"]) == ("helper.py", 7, "make_weight")
    assert [(f["line"], f["name"]) for f in where["frames"]] == [(13, "__init__"), (7, "make_weight")]
    assert where["defined"] == {"file": "helper.py", "line": 10}  # the class, as before


def test_json_and_github_put_a_forward_error_on_the_line_that_raised(layers: Path) -> None:
    _, out = invoke("forward.py", "--layout", "8,16:BC", "--check", "forward_runs", "--format", "json")
    (run,) = json.loads(out)["runs"]
    (failed,) = [r for r in run["results"] if r["status"] == "failed"]
    where = failed["details"]["location"]
    assert (where["file"], where["line"], where["code"]) == ("forward.py", 12, "return y.view(3, -1, 7)")
    assert run["location"] == {"file": "forward.py", "line": 5}  # the run's own: where the layer is defined

    _, annotations = invoke("forward.py", "--layout", "8,16:BC", "--check", "forward_runs", "--format", "github")
    (error,) = [line for line in annotations.splitlines() if line.startswith("::error")]
    assert error.startswith("::error file=forward.py,line=12,title=layercheck forward.py%3A forward_runs failed "
                            "(in forward)::")
    _, annotations = invoke("helper.py", "--layout", "8,16:BC", "--format", "github")
    assert annotations.startswith("::error file=helper.py,line=7,")


def test_the_api_assertion_shows_where_the_constructor_and_forward_raised(layers: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import layercheck

    monkeypatch.syspath_prepend(str(layers))
    helper, forward = pytest.importorskip("helper"), pytest.importorskip("forward")
    with pytest.raises(AssertionError) as raised:
        layercheck.assert_layer_valid(helper.Broken, "8,16:BC")
    assert 'File "helper.py", line 7, in make_weight\n    return w.view(16, -1, 3)' in str(raised.value)
    with pytest.raises(AssertionError) as raised:
        layercheck.assert_layer_valid(forward.Broken, "8,16:BC", checks=["forward_runs"])
    assert 'File "forward.py", line 12, in forward\n      return y.view(3, -1, 7)' in str(raised.value)
