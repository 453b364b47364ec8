"""Isolation seen from the command line: a layer's prints and warnings go into the report
(never into a JSON report on stdout), global settings it changes are put back and named,
--no-isolate runs in this process without a false green, serial and parallel runs give the
same report, and a layout beyond the memory limit is refused before anything runs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from typer.testing import CliRunner, Result

from layercheck.cli.commands import app
from layercheck.parent import limits
from layercheck.parent.layout import Layout

from conftest import ROOT, write_spec

NOISY = '''
import os
import sys
import warnings
from torch import nn

print("noisy: imported")

class Layer(nn.Module):
    def __init__(self):
        super().__init__()
        print("noisy: constructed")

    def forward(self, x):
        print(f"noisy: forward in {'training' if self.training else 'predict'} mode")
        sys.stderr.write("noisy: to stderr\\n")
        sys.stderr.flush()
        os.write(1, b"noisy: written to file descriptor 1\\n")  # as native code prints
        warnings.warn("noisy: careful", UserWarning)
        return x * 2
'''

MEDDLER = '''
import os
import random
import warnings

import numpy as np
import torch
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if self.training:  # what forward sees: every setting as it was before predict changed it
            leaked = (torch.get_default_dtype() != torch.float32, torch.are_deterministic_algorithms_enabled(),
                      os.getcwd() == "/")
            if any(leaked):
                raise RuntimeError(f"settings leaked from another check: {leaked}")
        else:
            torch.set_default_dtype(torch.float64)
            torch.use_deterministic_algorithms(True)
            torch.set_num_threads(1)
            os.chdir("/")
            warnings.simplefilter("ignore")
            random.seed(1)
            np.random.seed(1)
        return x * 2
'''

BROKEN = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x if self.training else x.mean(dim=7)
'''



def layercheck(*args: str) -> Result:
    """``layercheck run ARGS`` in this process: the targets are checked in worker processes
    (started from this process's fork server, which stays up between tests), as by default."""
    return CliRunner().invoke(app, ["run", *args])


def layer(folder: Path, name: str, source: str, layout: str = "4,3:BC") -> Path:
    (folder / f"{name}.py").write_text(source)
    return write_spec(folder, f"{name}.yaml", f"{name}.py:Layer", layout)


def hostile(folder: Path, name: str) -> Path:
    """A spec for a layer of tests/hostile/."""
    return write_spec(folder, f"{name}.yaml", f"{ROOT / 'tests' / 'hostile' / name}.py:Layer", "4,3:BC")


def result(data: dict[str, Any], check: str) -> dict[str, Any]:
    (found,) = [r for r in data["runs"][0]["results"] if r["check"] == check]
    return found


def test_prints_and_warnings_go_into_the_report_never_into_json_on_stdout(tmp_path: Path) -> None:
    spec = layer(tmp_path, "noisy", NOISY)
    # In a process of its own: what reaches its file descriptors 1 and 2 is what a user sees.
    done = subprocess.run([sys.executable, "-m", "layercheck", "run", str(spec), "--format", "json", "--check",
                           "predict_runs", "--check", "forward_runs"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)  # stdout holds the report and nothing else
    predict = result(data, "predict_runs")
    # captured per check, from Python and from the file descriptor, stdout and stderr
    assert predict["details"]["output"] == ("noisy: constructed\nnoisy: forward in predict mode\nnoisy: to stderr\n"
                                            "noisy: written to file descriptor 1\n")
    assert "training mode" in result(data, "forward_runs")["details"]["output"]
    (warning,) = predict["details"]["warnings"]
    assert warning.startswith("UserWarning: noisy: careful (noisy.py:")
    assert predict["status"] == "passed" and "global settings" not in predict["message"]
    assert "noisy: imported" in done.stderr  # printed at import, outside any check: on stderr
    assert "noisy: forward" not in done.stderr


def test_verbose_shows_what_a_check_printed_and_warned(tmp_path: Path) -> None:
    spec = layer(tmp_path, "noisy", NOISY)
    quiet = layercheck(str(spec), "--check", "predict_runs")
    verbose = layercheck(str(spec), "--check", "predict_runs", "--verbose")
    assert quiet.exit_code == verbose.exit_code == 0
    assert "noisy: forward in predict mode" not in quiet.stdout
    assert "output predict_runs" in verbose.stdout and "  noisy: forward in predict mode" in verbose.stdout
    assert "warning predict_runs" in verbose.stdout and "UserWarning: noisy: careful" in verbose.stdout


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "no-isolate"])
def test_global_settings_a_layer_changes_are_restored_and_named(tmp_path: Path, isolate: bool) -> None:
    spec = layer(tmp_path, "meddler", MEDDLER)
    args = [str(spec), "--format", "json", "--check", "predict_runs", "--check", "forward_runs"]
    invoked = layercheck(*args) if isolate else layercheck(*args, "--no-isolate")
    assert invoked.exit_code == 0, invoked.output
    data = json.loads(invoked.stdout)
    predict, forward = result(data, "predict_runs"), result(data, "forward_runs")
    assert predict["status"] == "passed"
    assert predict["message"].endswith("; the layer changed global settings, restored after this check: "
                                       + ", ".join(predict["details"]["changed_settings"]))
    named = predict["details"]["changed_settings"]
    cwd = Path.cwd()  # a worker's is the command's
    expected = ["warnings filters", "default dtype (torch.float32 → torch.float64)",
                "deterministic algorithms (off → on)", f"working directory ({cwd} → /)", "Python's random state",
                "NumPy's random state"]
    if torch.get_num_threads() > 1:
        expected.insert(3, f"number of threads ({torch.get_num_threads()} → 1)")
    assert named == expected
    # forward ran after predict, and saw none of it
    assert forward["status"] == "passed" and "global settings" not in forward["message"]
    assert "changed_settings" not in forward["details"]
    assert (torch.get_default_dtype(), Path.cwd()) == (torch.float32, Path(os.getcwd()))


def test_no_isolate_contains_an_exit_too(tmp_path: Path) -> None:
    """In this process, sys.exit in a layer is an error result, not a green exit status 0."""
    spec = hostile(tmp_path, "exit_in_forward")
    invoked = CliRunner().invoke(app, ["run", str(spec), "--no-isolate", "--format", "json", "--check", "predict_runs"])
    assert invoked.exit_code == 1
    predict = result(json.loads(invoked.stdout), "predict_runs")
    assert predict["status"] == "error" and "SystemExit(0)" in predict["message"]
    assert "exit_in_forward.py" in predict["details"]["traceback"]


def test_no_isolate_with_jobs_is_a_usage_error(tmp_path: Path) -> None:
    spec = hostile(tmp_path, "exit_in_forward")
    invoked = CliRunner().invoke(app, ["run", str(spec), "--no-isolate", "--jobs", "2"])
    assert invoked.exit_code == 2
    (line,) = invoked.stderr.strip().splitlines()
    assert "--no-isolate" in line and "--jobs" in line


def _without_timings(value: Any) -> Any:
    """The report without what is measured (time and memory), which differs from run to run."""
    if isinstance(value, dict):
        return {k: _without_timings(v) for k, v in value.items()
                if k not in ("seconds", "peak_memory", "startup_seconds")}
    if isinstance(value, list):
        return [_without_timings(v) for v in value]
    return value


@pytest.fixture
def mixed(tmp_path: Path) -> list[str]:
    """A correct layer, a broken one, one that crashes its worker, one that exits."""
    good = write_spec(tmp_path, "good.yaml", f"{ROOT / 'layers' / 'srelu.py'}:SReLU", "4,3,5:BCU")
    return [str(good), str(layer(tmp_path, "broken", BROKEN)), str(hostile(tmp_path, "segfault")),
            str(hostile(tmp_path, "exit_in_forward"))]


@pytest.mark.slow
def test_serial_and_parallel_runs_give_the_same_report(mixed: list[str]) -> None:
    # --no-store: the first run's failures, kept in .layercheck/, would be replayed first by the
    # second (and said so in its report), as they should be
    serial = layercheck(*mixed, "--format", "json", "--no-store")
    parallel = layercheck(*mixed, "--format", "json", "--jobs", "2", "--no-store")
    assert serial.exit_code == parallel.exit_code == 1
    assert _without_timings(json.loads(serial.stdout)) == _without_timings(json.loads(parallel.stdout))


@pytest.mark.slow
def test_the_same_command_twice_gives_the_same_report(tmp_path: Path, mixed: list[str]) -> None:
    """Two fresh processes (each with its own fork server and workers); without the failure store,
    whose failures the second would replay first (tests/test_explore.py holds that)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    first, second = (subprocess.run([sys.executable, "-m", "layercheck", "run", *mixed, "--format", "json",
                                     "--no-store"],
                                    capture_output=True, text=True, cwd=tmp_path, timeout=300, env=env)
                     for _ in range(2))
    assert first.returncode == second.returncode == 1
    assert _without_timings(json.loads(first.stdout)) == _without_timings(json.loads(second.stdout))


# -- memory -----------------------------------------------------------------------------------


def test_a_layout_beyond_the_memory_limit_exits_2_with_the_estimate(tmp_path: Path) -> None:
    huge = write_spec(tmp_path, "huge.yaml", "torch.nn:Tanh", "1000000,1000000:BC")  # 10^12 elements
    invoked = CliRunner().invoke(app, ["run", str(huge)])
    assert invoked.exit_code == 2 and invoked.stdout == ""
    (line,) = invoked.stderr.strip().splitlines()
    needed = limits.format_size(10**12 * limits.BYTES_PER_ELEMENT)
    assert line.startswith(f"layercheck: error: {huge}: its inputs need about {needed} (1,000,000,000,000 elements")
    assert "more than the limit of" in line and "half of the" in line and "--max-memory" in line


def test_the_default_limit_is_half_the_available_memory(tmp_path: Path) -> None:
    available = limits.available_memory()
    assert available is not None
    elements = available // limits.BYTES_PER_ELEMENT  # priced at the whole of it: twice the limit
    fits = write_spec(tmp_path, "fits.yaml", "torch.nn:Tanh", f"{elements // 4},1:BC")
    too_big = write_spec(tmp_path, "big.yaml", "torch.nn:Tanh", f"{elements},1:BC")
    assert CliRunner().invoke(app, ["run", str(too_big)]).exit_code == 2
    # fits: refused only by the memory limit is what is tested, so stop before checking it
    invoked = CliRunner().invoke(app, ["run", str(fits), "--shard", "2/2"])
    assert invoked.exit_code == 0, invoked.stderr


@pytest.mark.slow  # three suites in a process of its own: 10 s on a quiet machine
def test_the_estimate_is_within_a_factor_of_1_5_of_the_measured_peak() -> None:
    """benchmarks/cost.py's memory pass measures the default suite's peak at two sizes (smaller
    than the benchmark's, with the same relation asserted), in a process of its own whose
    allocator gives freed memory back (limits.track_freed_memory)."""
    sizes = {"small": "12,12,20,128:SSCB", "large": "24,12,20,128:SSCB"}
    done = subprocess.run([sys.executable, "-W", "ignore", str(ROOT / "benchmarks" / "cost.py"), "--memory-pass",
                           "--small", sizes["small"], "--large", sizes["large"], "--repeat", "1"],
                          capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr
    measured = json.loads(done.stdout)
    for name, layout in sizes.items():
        (peak,) = measured[name]["suite"]
        estimate = limits.estimate([Layout.parse(layout)])
        assert peak / 1.5 <= estimate <= peak * 1.5, (layout, estimate, peak)


@pytest.mark.parametrize(("value", "refused"), [("10kB", True), ("1MB", False), ("0", False), ("none", False)])
def test_max_memory_sets_the_limit(tmp_path: Path, value: str, refused: bool) -> None:
    spec = write_spec(tmp_path, "tanh.yaml", "torch.nn:Tanh", "40,3:BC")  # 120 elements: 61 kB
    invoked = CliRunner().invoke(app, ["run", str(spec), "--max-memory", value, "--check", "signatures",
                                       "--no-isolate"])
    assert invoked.exit_code == (2 if refused else 0), invoked.stderr
    if refused:
        assert "more than the limit of 10.0 kB (--max-memory)" in invoked.stderr


@pytest.mark.parametrize("value", ["lots", "-1GB", "2XB", "", "1e9", "0.1B"])
def test_a_bad_max_memory_exits_2_with_one_line(tmp_path: Path, value: str) -> None:
    spec = write_spec(tmp_path, "tanh.yaml", "torch.nn:Tanh", "4,3:BC")
    invoked = CliRunner().invoke(app, ["run", str(spec), "--max-memory", value])
    assert invoked.exit_code == 2
    (line,) = invoked.stderr.strip().splitlines()
    assert line.startswith(f"layercheck: error: --max-memory {value!r}: expected a size")


@pytest.mark.parametrize(("text", "size"), [("2GB", 2 * 10**9), ("2 GB", 2 * 10**9), ("512MiB", 512 << 20),
                                            ("512M", 512 << 20), ("1.5gib", 3 << 29), ("1500000000", 1_500_000_000),
                                            ("0", None), ("None", None)])
def test_sizes(text: str, size: int | None) -> None:
    assert limits.parse_size(text) == size


def test_a_worker_memory_limit_leaves_room_for_torch_and_fails_an_allocation_beyond_it() -> None:
    """The limit counts writable memory: a fresh process with torch imported fits under a
    small budget and gets an error, not a kill, for an allocation beyond it."""
    code = '''
import torch, layercheck.parent.limits as limits
limit = limits.limit_worker_memory(256 << 20)
assert limit is not None
x = torch.ones(1 << 20)  # 4 MB: fine
try:
    torch.empty(1 << 30, dtype=torch.uint8)
except RuntimeError as exc:
    print("refused:", limits.out_of_memory(exc) is not None)
'''
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "refused: True"


class _LayerThing:
    """Stands for an object of a layer's own module, which only worker processes import."""

    def __repr__(self) -> str:
        return "LayerThing()"


def test_a_result_the_parent_could_not_unpickle_arrives_as_the_json_report_holds_it() -> None:
    from multiprocessing import Pipe

    from layercheck.engine import serve
    from layercheck.parent.result import CheckResult, Status

    mine, theirs = Pipe()
    result = CheckResult("predict_runs", "", Status.FAILED, 0.1, "wrong", {"thing": _LayerThing(), "n": 2})
    serve._send(theirs, ("done", ("predict_runs", ""), result, "failed", {}, "module"))
    received = mine.recv()[2]
    assert received.details == {"thing": "LayerThing()", "n": 2} and received.message == "wrong"


def test_a_detail_holding_torch_objects_arrives_without_torch_in_the_parent() -> None:
    """The parent of an isolated run never imports torch: a tensor, a dtype or a size in a
    result arrives as the JSON report holds it."""
    from multiprocessing import Pipe

    from layercheck.engine import serve
    from layercheck.parent.result import CheckResult, Status

    mine, theirs = Pipe()
    details = {"dtype": torch.float32, "size": torch.Size([2, 3]), "n": 2}
    serve._send(theirs, ("done", ("dtype", ""), CheckResult("dtype", "", Status.FAILED, 0.1, "x", details)))
    assert mine.recv()[2].details == {"dtype": "torch.float32", "size": [2, 3], "n": 2}


@pytest.mark.slow
def test_every_zoo_layer_gets_the_same_verdict_in_a_worker() -> None:
    """A false alarm is as bad as a miss: the zoo, judged in worker processes, gets the
    verdicts it gets in this process (tests/test_zoo.py judges those)."""
    from layercheck.engine import runner
    from layercheck.parent import isolation
    from layercheck.parent.spec import TargetSpec

    from conftest import ZOO, load_zoo, run_zoo, zoo_inputs, zoo_names

    names = zoo_names()
    specs = []
    for name in names:
        module = load_zoo(name)
        inputs, constants = zoo_inputs(module)
        # a zoo layer's REFERENCE as a spec names one (run_zoo checks against it too)
        reference = f"{module.__file__}:REFERENCE" if hasattr(module, "REFERENCE") else None
        specs.append(TargetSpec(layer=f"{module.__file__}:LAYER", inputs=tuple(inputs), constants=constants,
                                reference=reference, reference_map=dict(getattr(module, "REFERENCE_MAP", {})),
                                args=tuple(getattr(module, "ARGS", ())), kwargs=dict(getattr(module, "KWARGS", {})),
                                enable=tuple(getattr(module, "ENABLE", ())), skip=tuple(getattr(module, "SKIP", ())),
                                base_dir=ZOO))
    options = runner.Options(seed=0)
    report = isolation.run([runner.TargetPlan.of(spec, options) for spec in specs], options)
    for name, run in zip(names, report.runs):
        assert run.error is None, (name, run.error)
        here = run_zoo(name)
        assert [(r.check, r.variant, r.status) for r in run.results] == \
               [(r.check, r.variant, r.status) for r in here.results], name


def test_a_worker_checks_the_plan_its_parent_resolved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The parent resolves each target once (plan.TargetPlan) and hands that value to its worker,
    which checks it as given: it does not read the spec and the options again."""
    import dataclasses

    from layercheck.engine import runner
    from layercheck.parent import isolation, workers
    from layercheck.parent.plan import TargetPlan
    from layercheck.parent.spec import load_spec

    sent: list[Any] = []
    send = workers.Worker.send
    monkeypatch.setattr(workers.Worker, "send", lambda self, message: (sent.append(message), send(self, message))[1])
    spec = load_spec(write_spec(tmp_path, "prelu.yaml", str(ROOT / "layers/prelu.py"), "4,3:BC"))
    options = runner.Options(only=("predict_runs",))
    plan = dataclasses.replace(TargetPlan.of(spec, options), seed=7, only=("predict_runs", "forward_runs"))
    report = isolation.run([plan], options)
    assert [request[1] for request in sent if request is not None] == [plan]
    (run,) = report.runs
    assert run.seed == 7 and "forward_runs" in {r.check for r in run.results}  # the plan's, not the options'
    assert "gradients" not in {r.check for r in run.results}
