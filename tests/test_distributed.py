"""The opt-in ``distributed`` check as a user meets it: ``--enable distributed`` on the command
line, two gloo ranks on this machine. The zoo's distributed bugs (tests/zoo/distributed_*.py)
each fail naming the parameter, attribute or buffer and the fix; torch.nn's Linear, LayerNorm,
MultiheadAttention and the bundled PReLU (a hand-written backward) pass; BatchNorm2d passes
with the note; a rank that hangs is stopped at the time limit; nothing is left behind.

A run that starts ranks costs about ten seconds on a busy two-core machine (each rank imports
torch): those tests are ``slow`` and share one command-line run; the everyday tier holds the
failure found before any rank starts and the skips."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.engine.runner import run_target
from layercheck.parent.layout import Layout
from layercheck.parent.registry import get, select
from layercheck.parent.result import Status
from layercheck.target.subject import Target

from conftest import ROOT, load_zoo, write_spec

ZOO = ROOT / "tests" / "zoo"
HARNESS = ROOT / "tests" / "hostile" / "harness.py"
HANG_TIMEOUT = 5  # --timeout of the hanging layer's run

runner = CliRunner()


@pytest.fixture(autouse=True)
def in_root(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(ROOT)


def invoke(*args: str) -> Any:
    return runner.invoke(app, ["run", *args, "--check", "distributed", "--format", "json"], env={"COLUMNS": "200"})


def result_of(stdout: str, target: str | None = None) -> dict[str, Any]:
    runs = json.loads(stdout)["runs"]
    (run,) = [r for r in runs if target is None or Path(r["target"]).stem == target]
    (found,) = [r for r in run["results"] if r["check"] == "distributed"]
    return dict(found)


def zoo_layouts(name: str) -> list[str]:
    return [word for layout in load_zoo(name).LAYOUTS for word in ("--layout", layout)]


# -- everyday: no rank starts ------------------------------------------------------------------------


def test_distributed_is_opt_in() -> None:
    assert not get("distributed").default
    assert "distributed" not in {p.info.id for p in select()}
    assert "distributed" in {p.info.id for p in select(enable=("distributed",))}


def test_a_cached_weight_view_is_named_before_any_rank_starts() -> None:
    result = invoke("tests/zoo/distributed_cached_weight_view.py", *zoo_layouts("distributed_cached_weight_view"))
    assert result.exit_code == 1, result.output
    found = result_of(result.stdout)
    assert found["status"] == "failed"
    assert found["message"].startswith("attribute 'w_t' shares the memory of parameter 'weight'")
    assert "fully_shard replaces every parameter with its shard" in found["message"]
    assert "Fix: derive it from the parameter in forward (w_t = self.weight.t() there)" in found["message"]
    assert found["details"]["attribute"] == "w_t" and found["details"]["parameter"] == "weight"
    assert "--check distributed" in found["details"]["reproduce"]


def test_without_a_batch_dimension_it_does_not_apply() -> None:
    result = invoke("torch.nn:Linear", "--layout", "4,3:UC", "--arg", "3", "--arg", "2")
    assert result.exit_code == 0, result.output
    found = result_of(result.stdout)
    assert found["status"] == "skipped"
    assert found["message"] == "no input has a B (batch) dimension to split over the ranks"


def test_a_batch_of_one_and_an_operation_do_not_apply() -> None:
    one = result_of(invoke("torch.nn:Linear", "--layout", "1,3:BC", "--arg", "3", "--arg", "2").stdout)
    assert one["status"] == "skipped" and one["message"] == "a batch of 1 cannot be split over 2 ranks"
    op = result_of(invoke("layers/srelu_function.py", *["--layout", "4,3:BC"] * 5).stdout)
    assert op["status"] == "skipped" and "hold no parameters for DDP or FSDP" in op["message"]


def _outcome(layer: type | nn.Module, *layouts: str, **kwargs: Any) -> Any:
    target = Target(layer, [Layout.parse(text) for text in layouts], kwargs=kwargs, name="test-layer")
    (found,) = [r for r in run_target(target, select(only=("distributed",))).results if r.check == "distributed"]
    return found


def test_without_gloo_it_is_skipped_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.distributed, "is_gloo_available", lambda: False)
    found = _outcome(nn.Linear, "4,3:BC", in_features=3, out_features=2)
    assert found.status is Status.SKIPPED
    assert found.message == "this torch build lacks the gloo backend, which runs ranks on the CPU"


def test_where_no_process_can_start_it_is_skipped_saying_why(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*args: Any, **kwargs: Any) -> None:
        raise PermissionError(1, "Operation not permitted")

    monkeypatch.setattr(subprocess, "Popen", refuse)
    found = _outcome(nn.Linear, "4,3:BC", in_features=3, out_features=2)
    assert found.status is Status.SKIPPED
    assert found.message == ("the rank processes cannot be started here (PermissionError: [Errno 1] Operation not "
                             "permitted)")


def test_a_layer_no_other_process_can_import_is_skipped_saying_why() -> None:
    class Local(nn.Linear):
        pass

    found = _outcome(Local, "4,3:BC", in_features=3, out_features=2)
    assert found.status is Status.SKIPPED
    assert found.message.startswith("another process cannot import this layer by name")


# -- slow: one command-line run with ranks, under the harness that sees what it leaves behind ------------


TARGETS = {
    # name: (layer, layouts, kwargs)
    "unused_on_one_rank": ("tests/zoo/distributed_unused_on_one_rank.py", ["8,4:BC"], {}),
    "unused_odd_steps": ("tests/zoo/distributed_unused_odd_steps.py", ["6,4:BC"], {}),
    "local_batch_statistics": ("tests/zoo/distributed_local_batch_statistics.py", ["8,4:BC"], {}),
    "rank_local_buffer": ("tests/zoo/distributed_rank_local_buffer.py", ["8,4:BC"], {}),
    "linear": ("torch.nn:Linear", ["6,4:BC"], {"in_features": 4, "out_features": 3}),
    "layernorm": ("torch.nn:LayerNorm", ["4,5,6:BTC"], {"normalized_shape": 6}),
    "attention": ("torch.nn:MultiheadAttention", ["5,4,8:TBC"] * 3, {"embed_dim": 8, "num_heads": 2}),
    "prelu": (f"{ROOT / 'layers' / 'prelu.py'}:PReLU", ["4,3,5:BCU"], {}),
    "batchnorm": ("torch.nn:BatchNorm2d", ["4,3,5,5:BCSS"], {"num_features": 3}),
    "reset_forgets_bias": ("forgets.py:ForgetsBias", ["4,3:BC"], {}),
    "reset_forgets_buffer": ("tests/zoo/factory_kwargs_reset_forgets_buffer.py", ["2,5,8:BTC"], {}),
}

_HANGS = '''
import time

import torch.distributed as dist
from torch import nn


class HangsOnRanks(nn.Linear):
    """Correct in one process; loops forever once a process group exists."""

    def __init__(self) -> None:
        super().__init__(3, 3)

    def forward(self, x):
        while dist.is_initialized():
            time.sleep(0.1)
        return super().forward(x)
'''


def _harnessed(folder: Path, *options: str) -> dict[str, Any]:
    """``layercheck run FOLDER --check distributed`` under the harness: the report, and the
    processes it left behind and the zombies it kept."""
    command = [sys.executable, "-m", "layercheck", "run", str(folder), "--check", "distributed", "--format", "json",
               *options]
    done = subprocess.run([sys.executable, str(HARNESS), "--", *command], capture_output=True, text=True,
                          cwd=folder, timeout=1200, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["rc"] == 1, data["stderr"]
    data["report"] = json.loads(data["stdout"])
    return dict(data)


_FORGETS = '''
import torch
from torch import nn


class ForgetsBias(nn.Linear):
    """The bias is set in __init__ only: reset_parameters draws the weight and forgets it."""

    def __init__(self) -> None:
        super().__init__(3, 2)
        with torch.no_grad():
            self.bias.fill_(0.1)

    def reset_parameters(self) -> None:
        nn.init.normal_(self.weight, std=0.5)
'''


@pytest.fixture(scope="module")
def shared_run(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Every target above checked by one command-line run."""
    folder = tmp_path_factory.mktemp("distributed")
    (folder / "forgets.py").write_text(_FORGETS)
    for name, (layer, layouts, kwargs) in TARGETS.items():
        if layer.startswith("tests/"):
            layer = str(ROOT / layer)
        write_spec(folder, f"{name}.yaml", layer, *layouts, kwargs=kwargs)
    return _harnessed(folder)


def _found(shared_run: dict[str, Any], name: str) -> dict[str, Any]:
    (run,) = [r for r in shared_run["report"]["runs"] if Path(r["target"]).stem == name]
    (found,) = [r for r in run["results"] if r["check"] == "distributed"]
    return dict(found)


def _failed(shared_run: dict[str, Any], name: str, start: str) -> dict[str, Any]:
    """The target's result, which must be a failure whose message starts with ``start``."""
    found = _found(shared_run, name)
    assert found["status"] == "failed" and found["message"].startswith(start), found["message"]
    return found


@pytest.mark.slow
def test_the_run_leaves_no_process_and_no_port_behind(shared_run: dict[str, Any]) -> None:
    assert shared_run["leftover"] == [] and shared_run["zombies"] == []
    for name in TARGETS:
        port = _found(shared_run, name)["details"]["port"]
        with socket.socket() as probe, pytest.raises(ConnectionRefusedError):
            probe.connect(("127.0.0.1", port))


@pytest.mark.slow
def test_a_parameter_unused_on_one_rank_is_named_with_ddp_error_and_fix(shared_run: dict[str, Any]) -> None:
    found = _failed(shared_run, "unused_on_one_rank",
                    "under DistributedDataParallel, parameter(s) 'outlier.weight' got no gradient on rank 1 in step 1 "
                    "(rank 0 used them). DDP raised: RuntimeError: Expected to have finished reduction in the prior "
                    "iteration before starting a new one.")
    assert "find_unused_parameters=True" in found["message"] and "restructure the branch" in found["message"]


@pytest.mark.slow
def test_a_parameter_unused_on_odd_steps_is_named(shared_run: dict[str, Any]) -> None:
    found = _failed(shared_run, "unused_odd_steps", "under DistributedDataParallel, parameter(s) 'refine.weight', "
                                                    "'refine.bias' got no gradient on rank 0 in step 2.")
    assert found["details"]["step"] == 2 and found["details"]["unused"] == ["refine.weight", "refine.bias"]


@pytest.mark.slow
def test_per_rank_statistics_where_the_global_batch_was_meant_fail(shared_run: dict[str, Any]) -> None:
    found = _failed(shared_run, "local_batch_statistics",
                    "the layer communicates across ranks in its training forward")
    assert "per-rank batch statistics where the global batch was meant" in found["message"]


@pytest.mark.slow
def test_a_buffer_updated_from_rank_local_data_is_named(shared_run: dict[str, Any]) -> None:
    found = _failed(shared_run, "rank_local_buffer", "after one DDP step, buffer(s) 'max_abs' (")
    assert "differ between rank 0 and rank 1" in found["message"] and "Fix: all_reduce the update" in found["message"]


@pytest.mark.slow
@pytest.mark.parametrize("name", ["linear", "layernorm", "attention", "prelu"])
def test_correct_layers_pass(shared_run: dict[str, Any], name: str) -> None:
    found = _found(shared_run, name)
    assert found["status"] == "passed", found["message"]
    assert "DDP's all-reduced gradients equal one process's on the whole batch" in found["message"]
    assert "every parameter got a gradient on every rank in 3 steps" in found["message"]
    assert "FSDP2 (fully_shard) outputs and gradients equal the unsharded run's" in found["message"]
    assert found["details"]["independent"] is True and found["details"]["ddp_gradient_difference"] < 1e-12


@pytest.mark.slow
def test_batchnorm_passes_with_the_sync_batchnorm_note(shared_run: dict[str, Any]) -> None:
    found = _found(shared_run, "batchnorm")
    assert found["status"] == "passed", found["message"]
    notes = " ".join(found["notes"])
    assert "batch statistics" in notes and "torch.nn.SyncBatchNorm.convert_sync_batchnorm" in notes
    assert "buffers that differ across ranks after one DDP step: 'running_mean'" in notes


@pytest.mark.slow
def test_a_layer_that_hangs_on_the_ranks_is_stopped_at_the_time_limit_and_cleaned_up(tmp_path: Path) -> None:
    (tmp_path / "hangs.py").write_text(_HANGS)
    write_spec(tmp_path, "hangs.yaml", "hangs.py:HangsOnRanks", "4,3:BC")
    outcome = _harnessed(tmp_path, "--timeout", str(HANG_TIMEOUT))
    assert outcome["leftover"] == [] and outcome["zombies"] == []
    (run,) = outcome["report"]["runs"]
    (found,) = [r for r in run["results"] if r["check"] == "distributed"]
    assert found["status"] == "error"
    assert found["message"].startswith(f"timed out after {HANG_TIMEOUT} s in distributed")


@pytest.mark.slow
def test_a_parameter_reset_parameters_forgets_is_named_after_meta_init(shared_run: dict[str, Any]) -> None:
    _failed(shared_run, "reset_forgets_bias", "built on the meta device, sharded (fully_shard), to_empty and "
                                              "reset_parameters, parameter 'bias' keeps what to_empty left "
                                              "(uninitialised memory)")


@pytest.mark.slow
def test_a_buffer_reset_parameters_forgets_is_a_note(shared_run: dict[str, Any]) -> None:
    found = _found(shared_run, "reset_forgets_buffer")
    assert found["status"] == "passed", found["message"]
    assert "buffer(s) frequencies keep uninitialised memory: set them in reset_parameters" in " ".join(found["notes"])
