"""``references:`` in a model spec (issue 48): `layercheck scan` writes each named layer class's
reference into its spec, so the reference check runs on every captured layer of that class."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from layercheck.cli.commands import app

runner = CliRunner()

NET = '''
import torch
from torch import nn


class _BiasAdd(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, g):
        total = torch.zeros_like(g[0])  # the running total in g's dtype: the bug
        for start in range(0, g.shape[0], 8):
            total = total + g[start:start + 8].sum(0)
        return g, total


class BiasAddRef(nn.Module):
    def __init__(self, dim=8):
        super().__init__()
        self.bias = nn.Parameter(torch.linspace(-1.0, 1.0, dim))

    def forward(self, x):
        return x + self.bias


class FusedBiasAdd(BiasAddRef):
    def forward(self, x):
        return _BiasAdd.apply(x, self.bias)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mix = nn.Linear(8, 8)
        self.add = FusedBiasAdd()

    def forward(self, x):
        return self.add(self.mix(x))
'''


@pytest.fixture
def model(tmp_path: Path) -> Path:
    (tmp_path / "net.py").write_text(NET)
    return tmp_path


def _spec(folder: Path, **keys: Any) -> Path:
    path = folder / "model.yaml"
    path.write_text(yaml.safe_dump({"model": "net.py:Net", "inputs": [{"layout": "2048,8:BC"}], **keys}))
    return path


def _scan(*args: str) -> Any:
    return runner.invoke(app, ["scan", *args], env={"COLUMNS": "200"})


def test_a_model_spec_names_a_reference_per_layer_class_and_the_scan_checks_it(model: Path) -> None:
    spec = _spec(model, references={"FusedBiasAdd": "net.py:BiasAddRef"})
    folder = model / "specs"
    done = _scan(str(spec), "--check", "reference", "--write-specs", str(folder), "--format", "json")
    assert done.exit_code == 1, done.output
    report = json.loads(done.stdout)
    (row,) = [row for row in report["scan"] if row["path"] == "add"]
    assert row["status"] == "failed"
    (run,) = [run for run in report["runs"] if run["target"].startswith("add ")]
    failed = {r["variant"]: r for r in run["results"] if r["check"] == "reference" and r["status"] == "failed"}
    assert "bfloat16" in failed
    assert failed["bfloat16"]["message"].startswith("gradient of parameter 'layer.bias': ")  # the captured layer's
    assert "where the reference itself in bfloat16 is " in failed["bfloat16"]["message"]
    (written,) = [yaml.safe_load(p.read_text()) for p in folder.glob("*_add.yaml")]
    assert written["reference"] == f"{(model / 'net.py').resolve()}:BiasAddRef"  # the written spec lives elsewhere


def test_reference_autograd_and_the_mapping_form(model: Path) -> None:
    spec = _spec(model, references={"net.FusedBiasAdd": {"reference": "autograd"}})
    folder = model / "specs"
    done = _scan(str(spec), "--check", "reference:bfloat16", "--write-specs", str(folder), "--format", "json")
    assert done.exit_code == 1, done.output
    (written,) = [yaml.safe_load(p.read_text()) for p in folder.glob("*_add.yaml")]
    assert written["reference"] == "autograd"
    spec = _spec(model, references={"FusedBiasAdd": {"reference": "net.py:BiasAddRef", "reference_args": [8],
                                                     "reference_map": {"bias": "bias"}}})
    done = _scan(str(spec), "--check", "reference:float64", "--write-specs", str(folder), "--format", "json")
    assert done.exit_code == 0, done.output
    (written,) = [yaml.safe_load(p.read_text()) for p in folder.glob("*_add.yaml")]
    assert written["reference_args"] == [8]
    assert written["reference_map"] == {"layer.bias": "layer.bias"}  # as the captured layer and its reference run


def test_a_class_the_scan_does_not_check_is_a_note(model: Path) -> None:
    spec = _spec(model, references={"FusedBiasAdd": "autograd", "Missing": "autograd"})
    done = _scan(str(spec), "--check", "reference:float64")
    assert done.exit_code == 0, done.output
    assert "note: references: Missing names no layer this scan checks (its classes: FusedBiasAdd, Net, _BiasAdd)" \
        in done.output


@pytest.mark.parametrize(("references", "said"), [
    ({"FusedBiasAdd": "nowhere.py:Ref"}, "nowhere.py"),
    ({"FusedBiasAdd": {"reference": "autograd", "reference_map": {"bias": "b"}}},
     "reference: autograd differentiates the layer's own forward"),
    ({"FusedBiasAdd": {"reference": "net.py:BiasAddRef", "reference_arg": [8]}}, "references.FusedBiasAdd."
     "reference_arg: unknown key"),
    ({"FusedBiasAdd": 3}, "references.FusedBiasAdd: expected a reference"),
    (["FusedBiasAdd"], "references: expected a mapping layer class -> reference"),
])
def test_bad_references_are_one_clear_usage_error(model: Path, references: Any, said: str) -> None:
    done = _scan(str(_spec(model, references=references)))
    assert done.exit_code == 2, done.output
    assert said in done.output
    assert "Traceback" not in done.output
    assert len(textwrap.dedent(done.output).strip().splitlines()) == 1
