"""The pytest plugin: spec files collected as test items, run by pytest itself."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from layercheck import runner
from layercheck.spec import load_spec

from conftest import ROOT

pytest_plugins = ["pytester"]

PRELU = f"{ROOT / 'layers' / 'prelu.py'}:PReLU"

BROKEN = '''
from torch import nn

class Layer(nn.Module):
    def forward(self, x):
        return x * 2 if self.training else x.mean(dim=7)
'''


def spec_text(layer: str, layout: str = "4,3,5:BCU") -> str:
    return f"layer: {layer}\ninputs:\n  - layout: {layout}\n"


def planned_names(path: Path) -> list[str]:
    plan = runner.plan_for(load_spec(path), runner.Options())
    return [f"{p.info.id}[{v}]" if v else p.info.id for p in plan for v in p.variants]


def cli_verdicts(path: Path) -> dict[str, str]:
    """What `layercheck run` says of each check of the spec: the plugin must say the same."""
    run = runner.run_spec(load_spec(path), runner.Options())
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
    result = pytester.runpytest("-rfs")
    outcomes = result.parseoutcomes()
    assert outcomes["failed"] == 1 and outcomes["skipped"] >= 1 and result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines([
        "*_ layercheck predict_runs of layercheck_broken.yaml _*",
        "predict raised IndexError: Dimension out of range*",
        "reproduce: layercheck run *layercheck_broken.yaml --check predict_runs --seed 0",
        "FAILED layercheck_broken.yaml::predict_runs - Failed: predict raised*",
        "SKIPPED [[]*[]] layercheck_broken.yaml:1: needs predict_runs, which failed",
    ])
    assert "Traceback" not in result.stdout.str()


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


def test_keyword_selection_runs_only_the_selected_checks(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(broken=BROKEN)
    path = pytester.makefile(".yaml", layercheck_broken=spec_text("broken.py:Layer"))
    result = pytester.runpytest("-k", "forward_runs")
    # predict_runs, which fails, is neither selected nor needed by forward_runs: it does not run.
    result.assert_outcomes(passed=1, deselected=len(planned_names(path)) - 1)
