"""The pytest plugin: spec files collected as test items, each running its own check."""

from __future__ import annotations

import importlib.util
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import layercheck
from layercheck.engine import runner
from layercheck.parent import registry
from layercheck.parent.spec import load_spec

from conftest import ROOT

pytest_plugins = ["pytester"]

# The checks (and the numerics they use) loaded before pytester's first in-process run, which
# would otherwise drop them afterwards: a later test in this process would import a second copy
# of layercheck.numerics.locate, and a monkeypatch of it would miss the registered checks' copy.
registry.load_checks()

if importlib.util.find_spec("triton") is not None:
    # pytester's in-process runs drop the modules each run imports; the plugin imports Triton (a
    # layer's kernels may run under its interpreter), and with it switched on torch imports
    # torch._dynamo. Neither Triton's C extension nor torch._dynamo's operator library can be
    # imported twice in a process: imported here, they stay for every run.
    import torch._dynamo  # noqa: F401
    import triton  # noqa: F401

PRELU = f"{ROOT / 'layers' / 'prelu.py'}:PReLU"

BROKEN = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x.mean(dim=7)
'''

LOGGED = '''
from pathlib import Path
from torch import nn

class Layer(nn.Module):
    """BROKEN, writing down each call's mode: which checks ran is seen from outside."""

    def forward(self, x):
        with open(Path(__file__).with_name("calls.log"), "a") as log:
            log.write("train\\n" if self.training else "eval\\n")
        return x * 2 if self.training else x.mean(dim=7)
'''

SLOW_BACKWARD = '''
import time
import torch
from torch import nn

class Twice(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        time.sleep(SECONDS)  # an expensive hand-written backward: predict never calls it
        return grad * 2

class Layer(nn.Module):
    def forward(self, x):
        return Twice.apply(x)
'''

CANNOT_CONSTRUCT = '''
from torch import nn

class Layer(nn.Module):
    def __init__(self):
        raise ValueError("no weights file")
'''


@pytest.fixture(autouse=True)
def children_import_this_layercheck(monkeypatch: pytest.MonkeyPatch) -> None:
    """pytest processes these tests start (xdist workers, subprocesses) import the layercheck under test."""
    here = str(Path(layercheck.__file__).resolve().parent.parent)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([here, *filter(None, [os.environ.get("PYTHONPATH")])]))


def spec_text(layer: str, layout: str = "4,3,5:BCU") -> str:
    return f"layer: {layer}\ninputs:\n  - layout: {layout}\n"


def planned_names(path: Path) -> list[str]:
    checks = runner.checks_of(runner.TargetPlan.of(load_spec(path), runner.Options()))
    return [f"{p.info.id}[{v}]" if v else p.info.id for p in checks.planned for v in p.variants]


def calls(folder: Path) -> list[str]:
    """The modes of the LOGGED layer's calls so far (and forget them)."""
    log = folder / "calls.log"
    if not log.exists():
        return []
    lines = log.read_text().split()
    log.unlink()
    return lines


def durations(output: str) -> dict[str, float]:
    """Seconds per item (setup, call and teardown together) from ``--durations=0 --durations-min=0``."""
    seconds: dict[str, float] = {}
    for value, name in re.findall(r"^([0-9.]+)s (?:setup|call|teardown) +\S+::(\S+)$", output, flags=re.MULTILINE):
        seconds[name] = seconds.get(name, 0.0) + float(value)
    return seconds


def junit_outcomes(path: Path) -> dict[str, str]:
    """``{file::check: outcome}`` from a JUnit XML report pytest wrote."""
    outcomes = {}
    for case in ET.parse(path).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        outcomes[f"{case.get('classname')}::{case.get('name')}"] = kinds[0] if kinds else "passed"
    return outcomes


def cli_verdicts(path: Path) -> dict[str, str]:
    """What `layercheck run` says of each check of the spec: the plugin must say the same."""
    run = runner.run_plan(runner.TargetPlan.of(load_spec(path), runner.Options()), runner.Options())
    return {f"{r.check}[{r.variant}]" if r.variant else r.check: r.status.value for r in run.results}


def test_a_matching_spec_becomes_one_item_per_check(pytester: pytest.Pytester) -> None:
    path = pytester.makefile(".yaml", layercheck_prelu=spec_text(PRELU))
    result = pytester.runpytest("-v")
    expected = cli_verdicts(path)
    assert list(expected) == planned_names(path) and len(expected) >= 5
    counts = list(expected.values())
    result.assert_outcomes(passed=counts.count("passed"), skipped=counts.count("skipped"))
    for name, status in expected.items():
        pattern = re.sub(r"([\[\]])", r"[\1]", name)  # brackets are literal, not fnmatch classes
        result.stdout.fnmatch_lines([f"layercheck_prelu.yaml::{pattern} {status.upper()}*"])


def test_failures_show_the_message_and_skips_their_reason(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(broken=BROKEN)
    pytester.makefile(".yaml", layercheck_broken=spec_text("broken.py:Layer"))
    result = pytester.runpytest("-rA")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["skipped"] >= 1 and result.ret == pytest.ExitCode.TESTS_FAILED
    # The command line's failure block: the message, the layer's own lines, how to reproduce.
    result.stdout.fnmatch_lines([
        "*_ layercheck predict_runs of layercheck_broken.yaml _*",
        "predict raised IndexError: Dimension out of range*",
        "",
        '  File "*broken.py", line 5, in forward',
        "    return x * 2 if self.training else x.mean(dim=7)",
        "IndexError: Dimension out of range*",
        "",
        "reproduce: layercheck run *layercheck_broken.yaml --check predict_runs --seed 0",
        "*= PASSES =*",
    ], consecutive=True)
    result.stdout.fnmatch_lines([
        "PASSED layercheck_broken.yaml::forward_runs",
        "SKIPPED [[]*[]] layercheck_broken.yaml:1: needs predict_runs, which failed",
        "FAILED layercheck_broken.yaml::predict_runs - Failed: predict raised*",
    ])
    assert "Traceback" not in result.stdout.str() and "phase:" not in result.stdout.str()


def test_a_layer_that_cannot_be_loaded_is_one_error_and_the_rest_still_runs(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", layercheck_missing=spec_text("nowhere.py:Layer"))
    good = pytester.makefile(".yaml", layercheck_tanh=spec_text("torch.nn:Tanh", "4,3:BC"))
    result = pytester.runpytest()
    counts = list(cli_verdicts(good).values())
    result.assert_outcomes(passed=counts.count("passed"), skipped=counts.count("skipped"), errors=1)
    result.stdout.fnmatch_lines(["*the layer could not be loaded: nowhere.py:Layer: no such file *nowhere.py"])


def test_an_invalid_spec_is_a_collection_error_of_one_line(pytester: pytest.Pytester) -> None:
    pytester.makefile(".yaml", layercheck_bad="layer: x.py:X\ninputs:\n  - layout: 4,3:BCC\n")
    result = pytester.runpytest()
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*layercheck_bad.yaml: inputs[[]0[]].layout: \"4,3:BCC\": 2 sizes but 3 labels"])
    assert "Traceback" not in result.stdout.str()


def test_other_yaml_files_are_collected_only_with_the_option_and_only_if_specs(pytester: pytest.Pytester) -> None:
    path = pytester.makefile(".yaml", prelu=spec_text(PRELU))
    pytester.makefile(".yaml", settings="retries: 3\n")
    assert pytester.runpytest().ret == pytest.ExitCode.NO_TESTS_COLLECTED
    result = pytester.runpytest("--layercheck", "--collect-only", "-q")
    collected = [line for line in result.stdout.lines if "::" in line]
    assert collected == [f"prelu.yaml::{name}" for name in planned_names(path)]


def test_the_ini_option_sets_the_patterns(pytester: pytest.Pytester) -> None:
    pytester.makeini("[pytest]\nlayercheck_patterns = check_*.yml\n")
    pytester.makefile(".yml", check_prelu=spec_text(PRELU))
    pytester.makefile(".yaml", layercheck_prelu=spec_text(PRELU))  # the default pattern no longer applies
    result = pytester.runpytest("--collect-only", "-q")
    files = {line.split("::")[0] for line in result.stdout.lines if "::" in line}
    assert files == {"check_prelu.yml"}




def test_keyword_selection_runs_the_selected_check_and_what_it_needs(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(logged=LOGGED)
    path = pytester.makefile(".yaml", layercheck_logged=spec_text("logged.py:Layer"))
    result = pytester.runpytest("-k", "gradients")
    result.assert_outcomes(passed=2, deselected=len(planned_names(path)) - 2)
    # gradients needs forward_runs, backward_runs and backward_size: they ran (training calls);
    # predict_runs, which fails, is neither selected nor needed: it did not run (no predict call).
    modes = calls(pytester.path)
    assert "train" in modes and "eval" not in modes


def test_exitfirst_stops_at_the_first_failed_check(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(logged=LOGGED)
    path = pytester.makefile(".yaml", layercheck_logged=spec_text("logged.py:Layer"))
    everything = pytester.runpytest()
    assert everything.parseoutcomes()["failed"] == 1 and "train" in calls(pytester.path)
    first = pytester.runpytest("-x")
    # predict_runs fails: nothing after it runs, so the training forward (forward_runs and
    # everything after) is never called.
    outcomes = first.parseoutcomes()
    names = planned_names(path)
    ran = sum(outcomes.get(outcome, 0) for outcome in ("passed", "failed", "skipped", "errors"))
    assert outcomes["failed"] == 1 and ran == names.index("predict_runs") + 1 < len(names)
    assert set(calls(pytester.path)) == {"eval"}  # predict again only: the failure replayed from the store


@pytest.mark.slow
def test_durations_belong_to_the_checks_that_spend_them(pytester: pytest.Pytester) -> None:
    seconds = 0.4
    pytester.makepyfile(slow=SLOW_BACKWARD.replace("SECONDS", str(seconds)))
    pytester.makefile(".yaml", layercheck_slow=spec_text("slow.py:Layer"))
    result = pytester.runpytest("--durations=0", "--durations-min=0")
    assert result.ret == pytest.ExitCode.OK
    spent = durations(result.stdout.str())
    # dtype[float64] runs a backward of its own (in float64: no shared float32 run serves it);
    # the first item (which also constructs the layer) and predict_runs never call backward.
    assert spent["dtype[float64]"] >= seconds
    assert spent["signatures"] < seconds and spent["predict_runs"] < seconds


def test_a_spec_named_on_the_command_line_is_collected_whatever_its_name(pytester: pytest.Pytester) -> None:
    folder = pytester.mkdir("specs")
    named = folder / "prelu.yaml"
    named.write_text(spec_text(PRELU))
    (folder / "settings.yaml").write_text("retries: 3\n")
    result = pytester.runpytest("specs/prelu.yaml", "--collect-only", "-q")
    collected = [line for line in result.stdout.lines if "::" in line]
    assert collected == [f"specs/prelu.yaml::{name}" for name in planned_names(named)]
    # Found by recursion from a folder, the file still needs a matching name (or --layercheck).
    assert pytester.runpytest("specs", "--collect-only", "-q").ret == pytest.ExitCode.NO_TESTS_COLLECTED
    # A YAML file that is not a spec is left alone even when named.
    assert pytester.runpytest("specs/settings.yaml", "--collect-only", "-q").ret != pytest.ExitCode.OK


def test_a_layer_that_cannot_be_constructed_is_one_error_naming_its_line(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(cannot=CANNOT_CONSTRUCT)
    path = pytester.makefile(".yaml", layercheck_cannot=spec_text("cannot.py:Layer"))
    result = pytester.runpytest("-rE")
    result.assert_outcomes(errors=1, skipped=len(planned_names(path)) - 1)  # once per target, not per check
    reason = "the layer could not be checked: constructing Layer() raised ValueError: no weights file"
    assert result.stdout.lines.count(reason) == 1
    result.stdout.fnmatch_lines([reason, "", '  File "cannot.py", line 5, in __init__',
                                 '    raise ValueError("no weights file")'], consecutive=True)
    result.stdout.fnmatch_lines(["ERROR layercheck_cannot.yaml::signatures - Failed: the layer could*"])
    # With -k, the first item selected reports it.
    selected = pytester.runpytest("-k", "gradients", "-rEs")
    selected.assert_outcomes(errors=1, skipped=1)
    selected.stdout.fnmatch_lines(["ERROR layercheck_cannot.yaml::gradients[[]float64[]] - Failed: the layer*"])
    selected.stdout.fnmatch_lines(["SKIPPED*reported once, at layercheck_cannot.yaml::gradients[[]float64[]]*"])


@pytest.mark.slow
def test_xdist_workers_give_the_verdicts_of_a_serial_run(pytester: pytest.Pytester) -> None:
    if importlib.util.find_spec("xdist") is None:
        pytest.skip("pytest-xdist is not installed (pip install pytest-xdist, or the test extra)")
    pytester.makepyfile(broken=BROKEN, cannot=CANNOT_CONSTRUCT)
    pytester.makefile(".yaml", layercheck_prelu=spec_text(PRELU), layercheck_broken=spec_text("broken.py:Layer"),
                      layercheck_missing=spec_text("nowhere.py:Layer"),
                      layercheck_cannot=spec_text("cannot.py:Layer"))
    serial = pytester.runpytest("-n", "0", "--junitxml=serial.xml")
    parallel = pytester.runpytest("-n", "2", "-v", "--junitxml=parallel.xml")
    assert serial.ret == parallel.ret == pytest.ExitCode.TESTS_FAILED
    assert parallel.parseoutcomes() == serial.parseoutcomes()
    expected = junit_outcomes(pytester.path / "serial.xml")
    assert junit_outcomes(pytester.path / "parallel.xml") == expected
    assert {"passed", "failure", "error", "skipped"} <= set(expected.values()) and len(expected) > 40
    assert "[gw0]" in parallel.stdout.str() and "[gw1]" in parallel.stdout.str()  # both workers checked


def test_a_specs_explore_key_and_the_store_are_honoured(pytester: pytest.Pytester,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    """explore: 50 adds an ``explore`` item after the checks: it fails with the explored failure,
    shrunk, and the file's teardown keeps it in .layercheck/ beside the spec; the next session
    replays it first, and the gradients item fails with it without exploring (as layercheck run)."""
    from layercheck.store import folder as store

    from conftest import DEFAULT_STORE_FOLDER, ZOO

    monkeypatch.setattr(store, "default_folder", DEFAULT_STORE_FOLDER)
    (pytester.path / "tile.py").write_text((ZOO / "explore_partial_tile.py").read_text())
    spec = pytester.makefile(".yaml", layercheck_tile=spec_text("tile.py:Square", "2,32:BT") + "explore: 50\n")
    assert "explore" not in planned_names(spec)  # the explore item is the plugin's, after the checks
    result = pytester.runpytest("-rA")
    assert result.parseoutcomes()["failed"] == 1 and result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*_ layercheck explore of layercheck_tile.yaml _*",
                                 "gradients[[]float64[]]: passes at the declared inputs, fails at explored draw *",
                                 "FAILED layercheck_tile.yaml::explore - Failed: *"])
    assert "Smallest failing input: 1,1:BT" in result.stdout.str()
    [kept] = (pytester.path / ".layercheck" / "failures").glob("*.json")

    spec.write_text(spec_text("tile.py:Square", "2,32:BT"))  # no explore: the saved failure still fails
    result = pytester.runpytest("-rA")
    result.stdout.fnmatch_lines(["*replaying 1 saved failure from*",
                                 "*_ layercheck gradients[[]float64[]] of layercheck_tile.yaml _*",
                                 "passes at the declared inputs, fails at a saved failure*",
                                 "FAILED layercheck_tile.yaml::gradients[[]float64[]] - Failed: *"])
    assert "::explore" not in result.stdout.str() and kept.exists()

    kept.unlink()
    result = pytester.runpytest("-rA", "--layercheck-no-store")
    assert result.ret == pytest.ExitCode.OK and not kept.exists()
