"""Many targets in one run: each is reported, one that cannot be loaded does not stop the
others, and ``--jobs N`` gives the verdicts of a serial run."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app

from conftest import ROOT, write_spec

LAYERS = ROOT / "layers"

BROKEN = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x if self.training else x.mean(dim=7)
'''

RAISES_ON_IMPORT = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x

raise ImportError("this layer needs a package that is not installed")
'''

DIES = '''
import os
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if not self.training:
            os._exit(3)  # what a crash in a native kernel looks like from outside
        return x
'''


@pytest.fixture
def specs(tmp_path: Path) -> dict[str, Path]:
    """The bundled layers at small layouts, a broken layer, and a spec whose layer cannot be imported."""
    (tmp_path / "broken.py").write_text(BROKEN)
    (tmp_path / "unimportable.py").write_text(RAISES_ON_IMPORT)
    small = "4,3,5:BCU"
    return {
        "prelu": write_spec(tmp_path, "prelu.yaml", f"{LAYERS / 'prelu.py'}:PReLU", small),
        "srelu": write_spec(tmp_path, "srelu.yaml", f"{LAYERS / 'srelu.py'}:SReLU", small),
        "function": write_spec(tmp_path, "function.yaml", f"{LAYERS / 'srelu_function.py'}:SReLUFunction",
                               small, *["1,3,1:UCU"] * 4),
        "broken": write_spec(tmp_path, "broken.yaml", "broken.py:Layer", small),
        "missing": write_spec(tmp_path, "missing.yaml", "unimportable.py:Layer", small),
    }


def run_json(*args: str) -> tuple[int, dict[str, Any]]:
    result = CliRunner().invoke(app, ["run", *args, "--format", "json"])
    assert result.exit_code in (0, 1), result.output
    return result.exit_code, json.loads(result.stdout)


def verdicts(data: dict[str, Any]) -> list[tuple[str, str, list[tuple[str, str, str]]]]:
    return [(run["target"], run["status"], [(r["check"], r["variant"], r["status"]) for r in run["results"]])
            for run in data["runs"]]


def test_a_layer_that_cannot_be_imported_is_an_error_run_and_the_others_still_run(specs: dict[str, Path]) -> None:
    code, data = run_json(str(specs["prelu"]), str(specs["missing"]))
    assert code == 1
    good, missing = data["runs"]
    assert good["target"] == str(specs["prelu"]) and good["status"] == "passed" and good["results"]
    assert missing["target"] == str(specs["missing"]) and missing["status"] == "error"
    assert missing["error"].startswith("layer: unimportable.py:Layer: importing unimportable.py raised ImportError")
    assert missing["results"] == []
    assert data["summary"]["passed"] == good["summary"]["passed"] > 0


@pytest.mark.slow
def test_jobs_gives_the_verdicts_of_a_serial_run(specs: dict[str, Path]) -> None:
    targets = [str(specs[name]) for name in ("prelu", "broken", "srelu", "missing", "function")]
    serial_code, serial = run_json(*targets)
    parallel_code, parallel = run_json(*targets, "--jobs", "2")
    assert serial_code == parallel_code == 1
    assert verdicts(parallel) == verdicts(serial)
    assert [run["status"] for run in serial["runs"]] == ["passed", "failed", "passed", "error", "passed"]
    assert [run["custom_backward"] for run in parallel["runs"]] == [run["custom_backward"] for run in serial["runs"]]


def test_a_worker_that_dies_costs_only_its_own_check(specs: dict[str, Path], tmp_path: Path) -> None:
    (tmp_path / "dies.py").write_text(DIES)
    dies = write_spec(tmp_path, "dies.yaml", "dies.py:Layer", "4,3:BC")
    code, data = run_json(str(dies), str(specs["prelu"]), "--jobs", "2", "--check", "predict_runs",
                          "--check", "forward_runs")
    assert code == 1
    dead, good = data["runs"]
    assert dead["status"] == "error" and dead["target"] == str(dies) and dead["error"] is None
    signatures, crashed, after = dead["results"]
    assert signatures["check"] == "signatures" and signatures["status"] == "passed"
    assert crashed["check"] == "predict_runs" and crashed["status"] == "error"
    assert "exited with status 3" in crashed["message"] and "while running predict_runs" in crashed["message"]
    assert after["check"] == "forward_runs" and after["status"] == "passed"  # in a fresh worker
    assert good["status"] == "passed"
    assert [r["check"] for r in good["results"]] == ["signatures", "predict_runs", "forward_runs"]


def test_jobs_zero_means_one_per_cpu(specs: dict[str, Path]) -> None:
    code, data = run_json(str(specs["prelu"]), str(specs["srelu"]), "--jobs", "0", "--check", "predict_runs")
    assert code == 0 and [run["status"] for run in data["runs"]] == ["passed", "passed"]


def test_an_invalid_spec_among_many_exits_2_before_anything_runs(specs: dict[str, Path], tmp_path: Path) -> None:
    bad = write_spec(tmp_path, "bad.yaml", "broken.py:Layer", "4,3,2:BCC")
    result = CliRunner().invoke(app, ["run", str(specs["prelu"]), str(bad), "--jobs", "2"])
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert str(bad) in line and "2 C labels" in line


@pytest.mark.slow
def test_the_shards_of_a_folder_check_every_target_exactly_once(tmp_path: Path) -> None:
    folder = tmp_path / "specs"
    (folder / "sub").mkdir(parents=True)
    names = ["a.yaml", "b.yaml", "c.yaml", "sub/d.yaml", "z.yml"]
    for name in names:
        write_spec(folder, name, "torch.nn:Tanh", "4,3:BC")
    shards = {}
    for k in (1, 2, 3):
        code, data = run_json(str(folder), "--shard", f"{k}/3", "--check", "signatures")
        assert code == 0
        shards[k] = [Path(run["target"]).relative_to(folder).as_posix() for run in data["runs"]]
    # the union is the folder, with no overlap
    assert sorted(name for shard in shards.values() for name in shard) == names
    # sorted by name, shard K takes the K-th, K+3-th, ...
    assert shards == {1: ["a.yaml", "sub/d.yaml"], 2: ["b.yaml", "z.yml"], 3: ["c.yaml"]}


def test_a_shard_lists_its_targets_in_the_order_given(tmp_path: Path) -> None:
    paths = [str(write_spec(tmp_path, name, "torch.nn:Tanh", "4,3:BC")) for name in ("c.yaml", "b.yaml", "a.yaml")]
    code, data = run_json(*paths, "--shard", "1/2", "--check", "signatures")
    assert code == 0 and [run["target"] for run in data["runs"]] == [paths[0], paths[2]]


def test_an_empty_shard_checks_nothing_and_exits_0(tmp_path: Path) -> None:
    spec = write_spec(tmp_path, "only.yaml", "torch.nn:Tanh", "4,3:BC")
    result = CliRunner().invoke(app, ["run", str(spec), "--shard", "2/2", "--format", "json"])
    assert result.exit_code == 0
    assert json.loads(result.stdout)["runs"] == []
    assert result.stderr.strip() == "shard 2/2 holds none of the 1 target: nothing checked"


@pytest.mark.parametrize("value", ["0/3", "4/3", "1/0", "3", "a/3", "1.5/3", "-1/3", "1/2/3", ""])
def test_a_bad_shard_exits_2_with_one_line(tmp_path: Path, value: str) -> None:
    spec = write_spec(tmp_path, "only.yaml", "torch.nn:Tanh", "4,3:BC")
    result = CliRunner().invoke(app, ["run", str(spec), "--shard", value])
    assert result.exit_code == 2
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith(f"layercheck: error: --shard {value!r}: ") and "1 <= K <= N" in line
