"""Failure messages as a user reads them (issue 41): what is wrong and where first (a
hand-written backward by its qualified name and file:line), each number named by what gives it,
the internals (rounding floors and where they come from) left to the details and --verbose, and
the fix from the check's own docstring last, with where to read more."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from layercheck.cli.commands import app
from layercheck.parent.registry import catalogue, get, load_checks

cli = CliRunner()


@pytest.fixture(autouse=True)
def in_root(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(root)  # locations are shown relative to the working directory


def failure(target: str, *args: str, check: str, variant: str = "") -> dict[str, Any]:
    """The one failed result of ``check`` (and variant) in a CLI run's JSON report."""
    result = cli.invoke(app, ["run", target, *args, "--check", check, "--format", "json"], env={"COLUMNS": "200"})
    assert result.exit_code == 1, result.output
    (run,) = json.loads(result.stdout)["runs"]
    (found,) = [r for r in run["results"] if r["check"] == check.partition(":")[0] and r["variant"] == variant]
    assert found["status"] == "failed", found
    return found


def ends_with_the_fix(message: str, check: str) -> None:
    """The message ends with the docstring's fix and where to read more."""
    fix = get(check).fix
    assert fix, f"{check}'s docstring gives no Fix:"
    assert message.endswith(f"Fix: {fix.rstrip('.')} (more: layercheck checks {check})."), message


def test_every_built_in_check_states_its_fix() -> None:
    load_checks()
    lacking = [info.id for info in catalogue() if not info.fix]
    assert not lacking, f"no 'Fix:' sentence in the docstring of {lacking}"


def test_a_wrong_hand_written_backward_is_named_with_its_file_and_line_and_both_numbers_said() -> None:
    found = failure("tests/zoo/gradients_wrong_sign.py:AffineLayer", "--layout", "5,4:BC",
                    check="gradients:float64", variant="float64")
    message = found["message"]
    # where, then what: the backward's qualified name and the line of its def
    assert message.startswith("in Affine.backward (tests/zoo/gradients_wrong_sign.py:18): wrong gradient of "
                              "parameter 'shift': the gradient is −1 × what finite differences give, over all 4 "
                              "elements: the sign is flipped"), message
    # each number says what gives it, and the error is of the gradient's size, not of the projections
    assert "along a random direction the gradient gives " in message
    assert ", finite differences of the forward " in message
    assert "× the size of the gradient, over the tolerance 1e-06" in message
    assert "analytic" not in message and " vs numeric " not in message
    # the combined numbers come after the wrong tensor's, and say so
    assert "float64 gradients disagree with float64 finite differences (all tensors together: along a random" \
        in message, message
    ends_with_the_fix(message, "gradients")
    (wrong,) = found["details"]["wrong"]  # the numbers themselves stay in the details
    assert wrong["tensor"] == "parameter 'shift'" and wrong["directions"]


def test_a_batch_leak_names_the_batch_and_the_observation_alone() -> None:
    message = failure("tests/zoo/observations_batch_stats.py:Layer", "--layout", "4,3,5:BCU",
                      check="observations")["message"]
    assert message.startswith("observation 0 of a batch of 4 vs the same observation alone (batch dim 0): output 0 "
                              "differs at index "), message
    assert "the observation alone " in message and ", the batch of 4 " in message
    assert "rounding floor" not in message and "spread" not in message  # internals are details
    assert "got " not in message and "expected " not in message
    # the fix for what was measured (values mixed across the batch, no mask), not the docstring's list
    assert message.endswith("Fix: reduce over each observation's own dimensions only, and in eval mode normalise with "
                            "running statistics (more: layercheck checks observations)."), message


def test_the_rounding_floor_and_its_source_are_details_shown_under_verbose() -> None:
    args = ["run", "tests/zoo/observations_batch_stats.py:Layer", "--layout", "4,3,5:BCU", "--check", "observations"]
    quiet = cli.invoke(app, args, env={"COLUMNS": "200"})
    loud = cli.invoke(app, [*args, "--verbose"], env={"COLUMNS": "200"})
    assert quiet.exit_code == loud.exit_code == 1
    assert "allowance: rtol=" not in quiet.stdout and "rounding floor=" not in quiet.stdout
    assert "allowance: rtol=0.0001, atol=" in loud.stdout and "rounding floor=" in loud.stdout


def test_predict_and_forward_name_each_side_and_why_they_should_agree() -> None:
    message = failure("tests/zoo/forward_predict_values.py:Layer", "--layout", "4,3,5:BCU",
                      check="forward_predict_agree")["message"]
    assert message.startswith("forward and predict disagree: output 0 differs at index "), message
    assert ": forward " in message and ", predict " in message
    assert "The layer shows no reason to depend on the mode" in message
    ends_with_the_fix(message, "forward_predict_agree")
    size = failure("tests/zoo/forward_predict_size.py:Layer", "--layout", "4,3,5:BCU",
                   check="forward_predict_agree")["message"]
    assert size.startswith("forward and predict return output 0 in another size or dtype: predict gives (4, 3, 5) "
                           "float32, forward (4, 15) float32"), size


@pytest.mark.parametrize(("target", "layout", "check", "headline"), [
    ("dtype_state_float32.py:Layer", "4,3,5:BCU", "dtype:float64",
     "with float64 inputs and layer, forward state 'running_absmax' is float32"),
    ("dtype_float64_overflow.py:SoftClamp", "4,6:BC", "dtype:float64",
     "with float64 inputs and layer, predict raised RuntimeError: value cannot be converted to type float without "
     "overflow"),
    # the value after reset_state and the initial one, each named (not "got 3, expected 0")
    ("reset_state_forgets_buffer.py:Layer", "4,3,5:BCU", "reset_state",
     "state 'count' after reset_state vs its initial value: state 'count' differs at index (): after reset_state 3, "
     "initially 0"),
    ("finite_zero_running_var.py:Layer", "4,3,5:BCU", "finite",
     "predict output 0 has 60 non-finite value(s) of 60, the first at index (0, 0, 0): "),
])
def test_a_failure_leads_with_what_and_which_tensor_and_ends_with_the_fix(target: str, layout: str, check: str,
                                                                          headline: str) -> None:
    check_id, _, variant = check.partition(":")
    message = failure(f"tests/zoo/{target}", "--layout", layout, check=check, variant=variant)["message"]
    assert message.startswith(headline), message
    ends_with_the_fix(message, check_id)


def test_a_backward_that_writes_into_grad_output_is_named_and_given_its_own_fix() -> None:
    message = failure("tests/zoo/backward_pure_masks_grad_output.py:Rectifier", "--layout", "4,6:BC",
                      check="backward_pure")["message"]
    assert message.startswith("in _Rectify.backward (tests/zoo/backward_pure_masks_grad_output.py:20): backward "
                              "modified grad_output 0 in place: at index "), message
    # the message's own fix, specific to grad_output, stands instead of the docstring's
    assert message.endswith("Fix: clone it before changing it (grad = grad.clone()), or use out-of-place operations "
                            "(more: layercheck checks backward_pure)."), message
    assert message.count("Fix:") == 1


def test_a_backward_that_is_not_linear_in_grad_output_names_both_sides() -> None:
    message = failure("tests/zoo/grad_output_clipped.py:ClippedTanh", "--layout", "8,16:BC",
                      check="grad_output")["message"]
    assert message.startswith("in ClippedTanhFunction.backward (tests/zoo/grad_output_clipped.py:23): the gradient "
                              "of input 0 is not linear in grad_output: backward transforms grad_output"), message
    assert "the gradient for -1.75·w1 + 0.5·w2 " in message
    assert ", the same combination of the gradients for w1 and w2 " in message
    assert message.endswith("Fix: use it only as a factor: grad_input = grad_output * dy/dx (more: layercheck "
                            "checks grad_output).")


def test_the_terminal_shows_the_whole_message_with_the_fix() -> None:
    result = cli.invoke(app, ["run", "tests/zoo/reset_state_forgets_buffer.py:Layer", "--layout", "4,3,5:BCU",
                              "--check", "reset_state"], env={"COLUMNS": "100"})
    assert result.exit_code == 1
    text = " ".join(result.stdout.split())
    assert "after reset_state 3, initially 0" in text
    assert f"Fix: {get('reset_state').fix.rstrip('.')} (more: layercheck checks reset_state)." in text


def test_a_message_that_gives_its_own_fix_keeps_it_and_a_sampled_one_says_so_before_it() -> None:
    from layercheck.engine.runner import _Sample
    from layercheck.parent.result import CheckResult, Status

    load_checks()
    info = get("backward_pure")
    own = info.explained("backward modified it. Fix: clone it")
    assert own == "backward modified it. Fix: clone it (more: layercheck checks backward_pure)."
    plain = info.explained("backward modified it.")
    assert plain == f"backward modified it. Fix: {info.fix.rstrip('.')} (more: layercheck checks backward_pure)."
    where = {"name": "Fn.backward", "file": "fn.py", "line": 7}
    assert info.explained("Fn.backward wrote", where).startswith("Fn.backward (fn.py:7) wrote")
    assert info.explained("it wrote", where).startswith("it wrote")  # not the backward's check: not named
    assert info.explained("it wrote", where, lead=True).startswith("in Fn.backward (fn.py:7): it wrote")

    class _Small:
        batch = 2

    sample = _Sample(_Small(), 6)  # type: ignore[arg-type]
    marked = sample.mark(CheckResult("backward_pure", "", Status.FAILED, 0.1, plain))
    assert marked.message == (f"backward modified it (on 2 of the batch's 6 observations). Fix: "
                              f"{info.fix.rstrip('.')} (more: layercheck checks backward_pure).")


def test_a_file_reached_through_a_link_in_the_working_directory_is_shown_by_the_link(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The docs' commands run where docs/ is a link to the repository's: a backward named there
    reads as the user typed the path, not as the absolute path the link resolves to."""
    from layercheck.support.locations import shown_path

    real = tmp_path / "elsewhere" / "layers"
    real.mkdir(parents=True)
    (real / "act.py").write_text("")
    work = tmp_path / "work"
    work.mkdir()
    (work / "layers").symlink_to(real)
    monkeypatch.chdir(work)
    assert shown_path(str(real / "act.py")) == "layers/act.py"
    (work / "own.py").write_text("")
    assert shown_path(str(work / "own.py")) == "own.py"
    assert shown_path(str(tmp_path / "elsewhere" / "x.py")) == (tmp_path / "elsewhere" / "x.py").resolve().as_posix()
