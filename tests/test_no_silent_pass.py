"""Never a silent pass (Note [no silent pass]): a core check does not skip over something the
layer did, every skip says whether the check did not apply or could not judge, and --strict
fails the latter."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from layercheck import check_layer
from layercheck.cli.commands import app
from layercheck.parent.result import BLOCKED, NOT_APPLICABLE, NOT_JUDGED, Status

from conftest import run_zoo

pytest_plugins = ["pytester"]

# A correct layer that reads a value to decide (data-dependent control flow): it cannot run on
# the meta device, so meta_device applies but cannot judge it.
READS_VALUES = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        if float(x.detach().abs().max()) > 100:
            return x / 100
        return x * 2
'''


def test_a_float64_gradient_that_is_nan_where_float32_is_finite_fails_naming_the_tensor() -> None:
    report = run_zoo("float64_weight_gradient_nan")
    results = {(r.check, r.variant): r for r in report.results}
    float64 = results["gradients", "float64"]
    assert float64.status is Status.FAILED
    assert "the float64 gradient of parameter 'weight' has 6 non-finite value(s)" in float64.message
    assert "where the float32 run's are finite" in float64.message
    # the precision that works is judged: float32 against float32 finite differences
    assert results["gradients", "float32"].status is Status.PASSED
    assert results["finite", ""].status is Status.PASSED


def _layer(tmp_path: Path) -> str:
    (tmp_path / "reads.py").write_text(READS_VALUES)
    return f"{tmp_path / 'reads.py'}:Layer"


def _json(result) -> dict:
    return {(r["check"], r["variant"]): r for r in json.loads(result.stdout)["runs"][0]["results"]}


def test_every_skip_says_whether_the_check_applied_and_strict_fails_those_that_could_not_judge(
        tmp_path: Path) -> None:
    layer = _layer(tmp_path)
    args = ["run", layer, "--layout", "4,3:BC", "--check", "meta_device", "--check", "device",
            "--check", "predict_runs", "--format", "json", "--no-isolate"]
    plain = CliRunner().invoke(app, args)
    assert plain.exit_code == 0, plain.output
    results = _json(plain)
    assert results["meta_device", ""]["status"] == "skipped"
    assert results["meta_device", ""]["skip"] == NOT_JUDGED
    assert results["device", ""]["skip"] == NOT_APPLICABLE  # no GPU here: does not apply
    assert results["predict_runs", ""]["skip"] is None

    strict = CliRunner().invoke(app, [*args, "--strict"])
    assert strict.exit_code == 1, strict.output
    results = _json(strict)
    meta = results["meta_device", ""]
    assert meta["status"] == "failed" and meta["skip"] is None
    assert meta["message"].startswith("not judged, which --strict fails: the layer cannot run on the meta device")
    assert meta["details"]["reproduce"].endswith(" --strict")  # the rerun fails it again
    assert results["device", ""]["status"] == "skipped"  # a check that does not apply is never failed


def test_a_check_skipped_because_a_prerequisite_failed_is_blocked() -> None:
    from torch import nn

    class Broken(nn.Module):
        def forward(self, x):
            return x.view(-1, 7)

    results = {r.check: r for r in check_layer(Broken, "4,3:BC", checks=["gradients"]).runs[0].results}
    assert results["forward_runs"].status is Status.FAILED
    assert results["gradients"].status is Status.SKIPPED and results["gradients"].skip == BLOCKED


def test_the_api_and_the_pytest_plugin_take_strict(tmp_path: Path, pytester: pytest.Pytester) -> None:
    namespace: dict = {}
    exec(READS_VALUES, namespace)
    report = check_layer(namespace["Layer"], "4,3:BC", checks=["meta_device"], strict=True)
    meta = next(r for r in report.runs[0].results if r.check == "meta_device")
    assert meta.status is Status.FAILED and "not judged" in meta.message

    (pytester.path / "reads.py").write_text(READS_VALUES)
    pytester.makefile(".yaml", layercheck_reads="layer: reads.py:Layer\ninputs:\n  - layout: 4,3:BC\n")
    pytester.runpytest("-k", "meta_device").assert_outcomes(skipped=1)
    strict = pytester.runpytest("-k", "meta_device", "--layercheck-strict")
    strict.assert_outcomes(failed=1)
    strict.stdout.fnmatch_lines(["*not judged, which --strict fails*"])
