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


# -- the Python API: its reference page, Report.status, dir(layercheck) -------------------------


def test_dir_of_the_package_lists_the_public_names_only() -> None:
    import layercheck

    layercheck.check_layer  # noqa: B018 (loads the API and, with it, most submodules)
    assert dir(layercheck) == sorted(layercheck.__all__)
    assert not {"annotations", "TYPE_CHECKING", "result", "errors", "registry"} & set(dir(layercheck))
    assert layercheck.result.Report is layercheck.Report  # the submodules are still there, unlisted


def test_report_status_is_the_verdict_of_the_whole_report(layers: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from torch import nn

    import layercheck

    monkeypatch.syspath_prepend(str(layers))
    assert layercheck.check_layer(nn.Tanh(), "4,3:BC", checks=["forward_runs"]).status == "passed"
    assert layercheck.check_layer(pytest.importorskip("forward").Broken, "8,16:BC",
                                  checks=["forward_runs"]).status is layercheck.Status.FAILED
    built = layercheck.check_layer(pytest.importorskip("helper").Broken, "8,16:BC")
    assert built.status is layercheck.Status.ERROR and not built.passed and built.exit_code == 1


def _api_page() -> str:
    import sys

    from conftest import ROOT

    sys.path.insert(0, str(ROOT / "docs" / "_ext"))
    try:
        import layercheck_docs
    finally:
        sys.path.remove(str(ROOT / "docs" / "_ext"))
    return str(layercheck_docs.api_page())


def test_the_api_reference_documents_exactly_the_public_and_stable_names() -> None:
    import re

    import layercheck
    from layercheck import sdk

    page = _api_page()
    top = set(re.findall(r"^\.\. \w+:: layercheck\.(\w+)$", page, flags=re.MULTILINE))
    stable = set(re.findall(r"^\.\. [\w:]+:: layercheck\.sdk\.(\w+)$", page, flags=re.MULTILINE))
    assert top == set(layercheck.__all__) - {"__version__"}
    also = set(re.findall(r"`(\w+)`", page.split("Also stable there")[1].split("\n")[0]))
    assert stable | also == set(sdk.STABLE) and not stable & also and also <= top
    # every one has something to say: a docstring of its own (or, for a constant, a #: comment)
    for name in top:
        assert (getattr(layercheck, name).__doc__ or "").strip(), name
    assert "check_layer" in top and "Report" in top and "Context" in stable


# -- strict=True with an instance -----------------------------------------------------------------

RMS_NORM = """\
import torch
from torch import nn


class Layer(nn.Module):
    def __init__(self, channels, *, device=None, dtype=None):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(channels, device=device, dtype=dtype))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.weight
"""


def test_strict_passes_a_correct_instance(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An instance cannot be constructed again: factory_kwargs does not apply to it, and strict=True
    (which fails a check that applies but could not judge) passes a correct layer."""
    import layercheck

    (tmp_path / "rms.py").write_text(RMS_NORM)
    monkeypatch.syspath_prepend(str(tmp_path))
    layer = pytest.importorskip("rms").Layer
    report = layercheck.assert_layer_valid(layer(64), "8,10,64:BTC", strict=True)
    (factory,) = [r for r in report.results if r.check == "factory_kwargs"]
    assert factory.status == "skipped" and factory.skip == "not_applicable"
    # the class is checked by it, and passes it
    (factory,) = [r for r in layercheck.check_layer(layer, "8,10,64:BTC", kwargs={"channels": 64},
                                                     checks=["factory_kwargs"], strict=True).results
                  if r.check == "factory_kwargs"]
    assert factory.status == "passed"
