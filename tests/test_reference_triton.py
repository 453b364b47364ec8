"""The reference check on Triton kernels under Triton's interpreter (CPU tensors): the tests/gpu
pairs against their PyTorch references (tests/gpu/references.py), and a Triton row sum whose
twin accumulates in the input's dtype, which only `reference` catches."""

from __future__ import annotations

import json
from typing import Any

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app

from conftest import ROOT

pytest.importorskip("triton")

runner = CliRunner()
GPU = ROOT / "tests" / "gpu"
REFERENCES = str(GPU / "references.py")
PAIRS = [  # layer file, its reference, layout; interpreted kernels are slow: two pairs in the slow tier
    ("triton_leaky", "LeakyRef", "8,6,16:BCT"),
    pytest.param("triton_rmsnorm", "RMSNormRef", "4,8,32:BTC", marks=pytest.mark.slow),
    pytest.param("triton_gated_mlp", "GatedMLPRef", "4,8,16:BTC", marks=pytest.mark.slow),
    ("triton_rowsum", "RowSumRef", "4,1024:BC"),
]


def _run(layer: str, *args: str) -> tuple[int, dict[str, Any]]:
    done = runner.invoke(app, ["run", str(GPU / f"{layer}.py"), *args, "--interpret", "--format", "json"])
    assert done.exit_code in (0, 1), done.output
    (run,) = json.loads(done.stdout)["runs"]
    assert run["error"] is None, run["error"]
    return done.exit_code, run


def _reference(run: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {r["variant"]: r for r in run["results"] if r["check"] == "reference"}


@pytest.mark.parametrize(("layer", "reference", "layout"), PAIRS)
def test_each_triton_pair_is_judged_against_its_pytorch_reference(layer: str, reference: str, layout: str) -> None:
    code, run = _run(layer, "--layout", layout, "--reference", f"{REFERENCES}:{reference}", "--check", "reference")
    results = _reference(run)
    assert code == 0 and not [r for r in results.values() if r["status"] in ("failed", "error")], results
    assert results["float64"]["status"] == results["float32"]["status"] == "passed"
    assert results["bfloat16"]["status"] == "skipped" and results["bfloat16"]["skip"] == "not_judged"
    assert results["bfloat16"]["message"].startswith("Triton's interpreter does not compute bfloat16 on CPU tensors")
    code, run = _run(f"{layer}_bug", "--layout", layout, "--reference", f"{REFERENCES}:{reference}", "--check",
                     "reference")
    assert code == 1 and any(r["status"] == "failed" for r in _reference(run).values())


def test_a_triton_kernel_accumulating_in_float16_passes_every_default_check_and_fails_reference() -> None:
    code, run = _run("triton_rowsum_bug", "--layout", "4,1024:BC")
    assert code == 0, [r["message"] for r in run["results"] if r["status"] == "failed"]
    code, run = _run("triton_rowsum_bug", "--layout", "4,1024:BC", "--reference", f"{REFERENCES}:RowSumRef",
                     "--check", "reference")
    failed = {variant: r for variant, r in _reference(run).items() if r["status"] == "failed"}
    assert code == 1 and set(failed) == {"float16"}
    assert failed["float16"]["message"].startswith("output 0: ")
    assert " from the float64 reference, where the reference itself in float16 is " in failed["float16"]["message"]
