"""Hostile layers (tests/hostile/): whatever a layer does to the process that checks it —
exit, crash, hang, raise what ends programs, allocate without bound — the command line
reports it and exits 1, with a complete report, the good target beside it unaffected, no
process left behind and a bounded time; the user's Ctrl-C and --timeout-total stop a run.

Everything goes through ``python -m layercheck`` in a subprocess, under tests/hostile/harness.py,
which sees the processes a run leaves behind.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from layercheck.engine import runner
from layercheck.parent import isolation
from layercheck.parent.isolation import grace
from layercheck.parent.spec import load_spec

from conftest import ROOT, write_spec

HOSTILE = ROOT / "tests" / "hostile"
NAMES = sorted(p.stem for p in HOSTILE.glob("*.py") if p.stem != "harness")
TIMEOUT = 2.0  # --timeout in these runs
MEMORY = "2GB"  # --max-memory: far below the machine's, far above a worker's needs
# A cold run on a busy two-core machine: the command and the fork server import torch, then
# the good target's whole suite; a crash costs a fresh worker (a fork) each.
STARTUP = 60.0
HANGS = {"hangs_at_import", "swallows_timeout"}  # each costs its limit and the grace period

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the harness reads /proc")


def hostile(name: str) -> ModuleType:
    """A hostile layer's module, for its CHECK and CAUSE: read from the source, never run here."""
    source = (HOSTILE / f"{name}.py").read_text()
    module = ModuleType(name)
    for line in source.splitlines():
        if line.startswith(("CHECK = ", "CAUSE = ")):
            exec(line, module.__dict__)
    return module


@dataclass
class Outcome:
    rc: int
    stdout: str
    stderr: str
    seconds: float
    leftover: list[str]
    zombies: list[str]
    after_sigint: float | None
    report: dict[str, Any]


def layercheck(*args: str, cwd: Path, output: Path | None = None, harness: Iterable[str] = (),
               env: dict[str, str] | None = None) -> Outcome:
    """``python -m layercheck run ARGS`` under the harness; the JSON report from stdout, or
    from ``output`` when given."""
    command = [sys.executable, "-m", "layercheck", "run", *args]
    command += ["--output", str(output)] if output is not None else ["--format", "json"]
    done = subprocess.run([sys.executable, str(HOSTILE / "harness.py"), *harness, "--", *command],
                          capture_output=True, text=True, cwd=cwd, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    if data["rc"] in (0, 1, 130):
        text = output.read_text() if output is not None else data["stdout"]
        data["report"] = json.loads(text)  # stdout holds the report and nothing else
    else:
        data["report"] = {}
    return Outcome(**data)


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A spec per hostile layer, and good.yaml: PReLU at a small layout."""
    path = tmp_path_factory.mktemp("hostile")
    for name in NAMES:
        write_spec(path, f"{name}.yaml", f"{HOSTILE / name}.py:Layer", "4,3:BC")
    write_spec(path, "good.yaml", f"{ROOT / 'layers' / 'prelu.py'}:PReLU", "4,3,5:BCU")
    return path


@pytest.fixture(scope="module")
def good_verdict(folder: Path) -> list[tuple[str, str, str]]:
    """The good target's verdict as a run in this process gives it."""
    report = runner.run([runner.TargetPlan.of(load_spec(folder / "good.yaml"), runner.Options())], runner.Options())
    assert report.passed
    return verdict(report.to_dict()["runs"][0])


def verdict(run: dict[str, Any]) -> list[tuple[str, str, str]]:
    return [(r["check"], r["variant"], r["status"]) for r in run["results"]]


def bound(names: Iterable[str]) -> float:
    return STARTUP + sum(TIMEOUT + grace(TIMEOUT) for name in names if name in HANGS)


def assert_contained(outcome: Outcome, folder: Path, names: list[str], good: list[tuple[str, str, str]] | None) -> None:
    """Exit 1, a report with every target, the good one's verdict unchanged, each hostile
    one's error naming its check and cause, nothing left behind, a bounded time."""
    assert outcome.rc == 1, outcome.stderr
    assert outcome.leftover == [] and outcome.zombies == []
    assert outcome.seconds < bound(names)
    runs = {Path(run["target"]).stem: run for run in outcome.report["runs"]}
    assert list(runs) == (["good"] if good is not None else []) + names  # in the order given
    if good is not None:
        assert runs["good"]["status"] == "passed" and verdict(runs["good"]) == good
    for name in names:
        expected, run = hostile(name), runs[name]
        assert run["status"] == "error", name
        if expected.CHECK is None:
            assert expected.CAUSE in run["error"], (name, run["error"])
        else:
            (result,) = [r for r in run["results"] if r["check"] == expected.CHECK]
            assert result["status"] == "error" and expected.CAUSE in result["message"], (name, result["message"])
            # the other checks ran, in a fresh worker when this one ended its process
            assert any(r["check"] == "forward_runs" and r["status"] == "passed" for r in run["results"]), name


@pytest.mark.slow  # about 15 s: every hostile layer, hangs included; each is also run alone in the slow tier
def test_every_hostile_layer_is_contained_in_one_serial_run(folder: Path, good_verdict: list) -> None:
    outcome = layercheck(str(folder / "good.yaml"), *(str(folder / f"{n}.yaml") for n in NAMES),
                         "--timeout", f"{TIMEOUT:g}", "--max-memory", MEMORY, cwd=folder)
    assert_contained(outcome, folder, NAMES, good_verdict)


@pytest.mark.slow
def test_every_hostile_layer_is_contained_with_jobs_and_a_report_file(folder: Path, good_verdict: list,
                                                                       tmp_path: Path) -> None:
    outcome = layercheck(str(folder / "good.yaml"), *(str(folder / f"{n}.yaml") for n in NAMES),
                         "--timeout", f"{TIMEOUT:g}", "--max-memory", MEMORY, "--jobs", "2", cwd=folder,
                         output=tmp_path / "report.json")
    assert_contained(outcome, folder, NAMES, good_verdict)


# Alone and beside the good spec, serial and --jobs 2, JSON to stdout and to a file: four
# runs per layer cover every pair of these choices.
WAYS = [(False, 1, False), (False, 2, True), (True, 1, True), (True, 2, False)]


@pytest.mark.slow
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize(("beside", "jobs", "to_file"), WAYS,
                         ids=[f"{'beside' if b else 'alone'}-jobs{j}-{'file' if f else 'stdout'}" for b, j, f in WAYS])
def test_a_hostile_layer_is_contained(folder: Path, good_verdict: list, tmp_path: Path, name: str, beside: bool,
                                      jobs: int, to_file: bool) -> None:
    specs = ([str(folder / "good.yaml")] if beside else []) + [str(folder / f"{name}.yaml")]
    outcome = layercheck(*specs, "--timeout", f"{TIMEOUT:g}", "--max-memory", MEMORY, "--jobs", str(jobs),
                         cwd=folder, output=tmp_path / "report.json" if to_file else None)
    assert_contained(outcome, folder, [name], good_verdict if beside else None)


@pytest.mark.slow
def test_a_layer_named_on_the_command_line_that_hangs_at_import_is_timed_out_while_importing(tmp_path: Path) -> None:
    # A layer named on the command line is imported by a job of its own, before any check,
    # whose time limit said 'while starting' (seen on a GPU machine).
    outcome = layercheck(str(HOSTILE / "hangs_at_import.py"), "--layout", "4,3:BC", "--timeout", f"{TIMEOUT:g}",
                         cwd=tmp_path)
    assert outcome.rc == 1 and outcome.leftover == [] and outcome.zombies == []
    assert outcome.seconds < bound(["hangs_at_import"])
    (run,) = outcome.report["runs"]
    assert run["status"] == "error"
    assert run["error"].startswith(f"timed out after {TIMEOUT:g} s while importing the layer (it did not return")


HANGS_IN_PREDICT = '''
import os
import time
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            open(os.environ["LAYERCHECK_TEST_MARKER"], "w").close()  # the test's cue: it hangs from here on
            while True:
                time.sleep(0.05)
        return x
'''


# The hanging check's time limit in the Ctrl-C tests: a run that waited for it would take this long.
HANG_LIMIT = 400.0


@pytest.mark.parametrize("mode", [[], pytest.param(["--jobs", "2"], marks=pytest.mark.slow),
                                  pytest.param(["--no-isolate"], marks=pytest.mark.slow)],
                         ids=["serial", "jobs", "no-isolate"])
def test_ctrl_c_stops_the_run_and_reports_what_finished(folder: Path, tmp_path: Path, good_verdict: list,
                                                         mode: list[str]) -> None:
    (tmp_path / "hangs.py").write_text(HANGS_IN_PREDICT)
    hangs = write_spec(tmp_path, "hangs.yaml", "hangs.py:Layer", "4,3:BC")
    marker = tmp_path / "hanging"
    isolated = mode != ["--no-isolate"]
    # Serially the third target is never reached; with two workers it may be, or be in progress.
    specs = [str(folder / "good.yaml"), str(hangs), str(folder / "good.yaml")]
    outcome = layercheck(*specs, "--timeout", f"{HANG_LIMIT:g}", *mode, cwd=tmp_path,
                         harness=["--sigint-when", str(marker)], env={"LAYERCHECK_TEST_MARKER": str(marker)})
    assert outcome.rc == 130, outcome.stderr
    # Stopped at once, not after the hanging check's time limit: a bound that far from any
    # machine's speed (the interpreter's exit took 3.6 s on a busy one) and from the limit.
    assert outcome.after_sigint is not None and outcome.after_sigint < HANG_LIMIT / 4
    assert outcome.leftover == [] and outcome.zombies == []
    report = outcome.report
    assert report["interrupted"] is True
    runs = report["runs"]
    interrupted = [r for run in runs for r in run["results"] if r["message"].startswith("interrupted by the user")]
    if mode == ["--jobs", "2"]:  # the good targets may be finished or in progress beside the hanging one
        assert [run["target"] for run in runs] == specs[:len(runs)]
        assert all(r["status"] == "error" for r in interrupted)
    else:
        assert runs[0]["target"] == specs[0] and verdict(runs[0]) == good_verdict
    if isolated:  # the target in progress is reported with what finished, and how it stopped
        if mode == []:
            assert [run["target"] for run in runs] == specs[:2]
        (stopped,) = [r for r in runs[1]["results"] if r["check"] == "predict_runs"]
        assert stopped["status"] == "error"
        assert stopped["message"] == "interrupted by the user (Ctrl-C) while running predict_runs"
    else:  # in this process, the target in progress is lost with the check
        assert [run["target"] for run in runs] == specs[:1] and interrupted == []
    assert "interrupted" in outcome.stderr


def test_ctrl_c_before_the_run_reads_what_its_worker_sent_reports_the_check_in_progress(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Ctrl-C lands after the worker told of predict_runs's start (and of every check before it)
    and before this process read it: a busy machine's window, held open here by a wait that reads
    nothing. The report still has the finished checks and predict_runs as the one interrupted."""
    (tmp_path / "hangs.py").write_text(HANGS_IN_PREDICT)
    hangs = write_spec(tmp_path, "hangs.yaml", "hangs.py:Layer", "4,3:BC")
    marker = tmp_path / "hanging"
    monkeypatch.setenv("LAYERCHECK_TEST_MARKER", str(marker))

    def wait_then_ctrl_c(handles: Any, timeout: float | None = None) -> list[Any]:
        deadline = time.monotonic() + STARTUP
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.01)
        raise KeyboardInterrupt

    monkeypatch.setattr(isolation, "wait", wait_then_ctrl_c)
    options = runner.Options(timeout=100)
    report = isolation.run([runner.TargetPlan.of(load_spec(hangs), options)], options)
    assert report.interrupted
    (run,) = report.to_dict()["runs"]
    statuses = {r["check"]: r["status"] for r in run["results"]}
    assert statuses["predict_runs"] == "error" and statuses["signatures"] == "passed"
    (stopped,) = [r for r in run["results"] if r["check"] == "predict_runs"]
    assert stopped["message"] == "interrupted by the user (Ctrl-C) while running predict_runs"


def test_timeout_total_ends_the_run_with_a_complete_report(folder: Path, tmp_path: Path) -> None:
    (tmp_path / "hangs.py").write_text(HANGS_IN_PREDICT)
    hangs = write_spec(tmp_path, "hangs.yaml", "hangs.py:Layer", "4,3:BC")
    marker = tmp_path / "hanging"

    def within(total: int) -> Outcome:
        return layercheck(str(hangs), str(folder / "good.yaml"), "--timeout", "100", "--timeout-total", str(total),
                          cwd=tmp_path, env={"LAYERCHECK_TEST_MARKER": str(marker)})

    total = 4
    outcome = within(total)
    if not marker.exists():
        # The start-up alone took the 4 s (10 s on the GPU machines: Python 3.12 importing
        # torch 2.11's CUDA build and torch._dynamo): once more, with that time on top.
        assert "(--timeout-total) ran out while" in outcome.report["runs"][0]["error"]
        total = 4 + round(outcome.seconds)
        outcome = within(total)
    assert outcome.rc == 1
    assert outcome.leftover == [] and outcome.zombies == []
    assert outcome.seconds < total + STARTUP
    hung, good = outcome.report["runs"]
    (stopped,) = [r for r in hung["results"] if r["check"] == "predict_runs"]
    assert stopped["status"] == "error"
    limit = f"the run's time limit of {total} s (--timeout-total) ran out"
    assert stopped["message"] == f"{limit} while running predict_runs"
    assert good["status"] == "error" and good["results"] == []
    assert good["error"] == f"not checked: {limit} before this target started"
    assert "interrupted" not in outcome.report
