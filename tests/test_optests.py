"""opcheck's default tests without opcheck's imports (Note [opcheck without its imports],
layercheck/support/optests.py): the short ways pass exactly what opcheck passes on operators right
and wrong in each way, a run on a custom operator imports neither torch._dynamo nor sympy, and
what a failure says is still opcheck's."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import warnings

import pytest
import torch
from opcases import CASES, DEVICE_BRANCH
from torch.utils._pytree import tree_map_only

from layercheck.parent.result import Status
from layercheck.support import optests

from conftest import ROOT, run_zoo

TESTS = ("test_schema", "test_faketensor", "test_autograd_registration")
# where the short way cannot judge and leaves the pass to opcheck: a fake kernel that asks
# get_ctx() for a data-dependent size (a meta run cannot serve it)
LEFT_TO_OPCHECK = {("data_dependent", "test_faketensor")}


def _opcheck_passes(test: str, op: object, args: tuple, kwargs: dict) -> bool:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return torch.library.opcheck(op, args, kwargs, test_utils=[test], raise_exception=False)[test] == "SUCCESS"


@pytest.mark.parametrize("test", TESTS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_the_short_way_passes_what_opcheck_passes_and_nothing_else(case: str, test: str) -> None:
    op, arguments, passing = CASES[case]
    torch.manual_seed(0)
    args, kwargs = arguments()
    theirs = _opcheck_passes(test, op, args, kwargs)
    assert theirs == (test in passing), f"opcheck's {test} on {case}: the case is not what it says"
    ours = optests.passes(test, op, args, kwargs)
    assert ours == (theirs and (case, test) not in LEFT_TO_OPCHECK)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_on_cuda_the_short_way_passes_what_opcheck_passes_and_nothing_else() -> None:
    """The same on CUDA tensors, every case and test in one (one skip where there is no device;
    a meta output stands for one on the inputs' device; the operators with a CPU kernel only
    fail there, both ways)."""
    wrong = []
    for case in sorted(CASES):
        op, arguments, _ = CASES[case]
        for test in TESTS:
            torch.manual_seed(0)
            args, kwargs = arguments()
            args, kwargs = tree_map_only(torch.Tensor, lambda t: t.detach().cuda().requires_grad_(t.requires_grad),
                                         (args, kwargs))
            theirs = _opcheck_passes(test, op, args, kwargs)
            if optests.passes(test, op, args, kwargs) != (theirs and (case, test) not in LEFT_TO_OPCHECK):
                wrong.append(f"{case} {test}: opcheck {'passes' if theirs else 'fails'}")
    assert not wrong, wrong


def test_the_short_way_leaves_the_arguments_as_they_were() -> None:
    op, arguments, _ = CASES["undeclared_mutation"]
    args, kwargs = arguments()
    before = args[0].detach().clone()
    for test in TESTS:
        optests.passes(test, op, args, kwargs)
    assert torch.equal(args[0], before)


def test_a_fake_kernel_branching_on_the_device_is_the_short_way_s_known_miss() -> None:
    """Documented in the Note: on meta tensors the kernel sees "meta", under opcheck's fake mode
    "cpu". If this starts failing, the miss is closed: take it out of the Note."""
    op, arguments = DEVICE_BRANCH
    args, kwargs = arguments()
    assert optests.passes("test_faketensor", op, args, kwargs)
    assert not _opcheck_passes("test_faketensor", op, args, kwargs)


def test_what_the_short_ways_were_not_written_for_is_left_to_opcheck() -> None:
    op, _, _ = CASES["good"]
    w = torch.randn(8)
    sparse = torch.randn(3, 8).to_sparse()
    for test in TESTS:
        assert not optests.passes(test, op, (sparse, w), {})  # a sparse tensor
        assert not optests.passes(test, op, (torch.randn(3, 8, device="meta"), w.to("meta")), {})
        assert not optests.passes(test, op.overloadpacket, (torch.randn(3, 8), w), {})  # not an OpOverload
    assert not optests.passes("test_aot_dispatch_dynamic", op, (torch.randn(3, 8), w), {})  # no short way


@pytest.mark.parametrize(("zoo", "check", "said"), [
    ("op_fake_wrong_kernel", "op_fake", "opcheck test_faketensor: MetadataMismatchError"),
    ("op_schema_undeclared_mutation", "op_schema", "opcheck test_schema:"),
    ("op_autograd_registration_missing", "op_autograd_registration", "opcheck test_autograd_registration:"),
])
def test_a_failure_is_opcheck_s_with_its_message(zoo: str, check: str, said: str) -> None:
    (result,) = [r for r in run_zoo(zoo, only=(check,)).results if r.check == check]
    assert result.status is Status.FAILED
    assert said in result.message  # the confirmation's: opcheck's own outcome, as before
    assert check == "op_fake" or ". Fix: " in result.message


def test_a_pass_says_it_was_judged_without_opcheck_s_imports() -> None:
    report = run_zoo("good_custom_op", only=("op_schema", "op_fake", "op_autograd_registration"))
    messages = {r.check: r.message for r in report.results if r.check.startswith("op_")}
    assert set(messages) == {"op_schema", "op_fake", "op_autograd_registration"}
    for check, message in messages.items():
        assert message.startswith("layercheck_zoo::scaled_tanh: opcheck's test_"), (check, message)
        assert message.endswith("passes (as opcheck judges it, without opcheck's imports)"), (check, message)


IMPORTS = textwrap.dedent("""
    import sys
    from pathlib import Path
    {preamble}
    from layercheck.parent.layout import Layout
    from layercheck.target.loading import resolve
    cls = resolve("benchmarks/tiny/custom_op.py", base_dir=Path.cwd())
    {run}
    print(sorted((r.check, r.status.value) for r in report.results if r.check.startswith("op_")))
    print([name for name in ("torch._dynamo", "sympy", "torch.testing._internal.optests") if name in sys.modules])
""")
WORKER = {"preamble": "import layercheck.engine.serve  # the fork server's imports: lazytorch installed",
          "run": "from layercheck.engine.runner import run_target\n"
                 "from layercheck.parent.registry import select\n"
                 "from layercheck.target.subject import Target\n"
                 "report = run_target(Target(cls, [Layout.parse('8,16:BC')], name='tiny'), select())"}
API = {"preamble": "import layercheck", "run": "report = layercheck.check_layer(cls, '8,16:BC')"}


@pytest.mark.parametrize("where", [WORKER, API], ids=["worker", "check_layer"])
def test_the_default_suite_on_a_custom_operator_imports_neither_torch_dynamo_nor_sympy(where: dict) -> None:
    """What start-up on a custom operator paid twice a Module's for (benchmarks/goals.py)."""
    done = subprocess.run([sys.executable, "-W", "ignore", "-c", IMPORTS.format(**where)], capture_output=True,
                          text=True, cwd=ROOT, timeout=300)
    assert done.returncode == 0, done.stderr
    verdicts, imported = done.stdout.splitlines()[-2:]
    assert verdicts == str([("op_autograd_registration", "passed"), ("op_fake", "passed"), ("op_schema", "passed")])
    assert imported == "[]"
