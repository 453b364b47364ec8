"""The runner: isolation between checks, prerequisites, exceptions, timeouts and selection.

Checks here are CheckInfo records built in the test (not registered), so the catalogue that
other tests see stays the product's own.
"""

from __future__ import annotations

import time

import pytest
import torch
from torch import nn

from layercheck import CheckFailed, CheckSkipped, Layout, Status, UsageError
from layercheck.engine.runner import Context, Options, run_target
from layercheck.parent.registry import CheckInfo, Planned, catalogue, select
from layercheck.target.subject import Target


class Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.ones(3))
        self.register_buffer("count", torch.zeros(()))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.count += 1
        return x * self.weight.view(1, 3, 1)


def target(layer: type | nn.Module = Scale, layout: str = "4,3,5:BCU") -> Target:
    return Target(layer, [Layout.parse(layout)], name="test-target")


def plan(*funcs, requires: dict[str, tuple[str, ...]] | None = None, **kw) -> list[Planned]:
    requires = requires or {}
    return [
        Planned(CheckInfo(id=f.__name__, title=f.__name__, func=f, requires=requires.get(f.__name__, ()), **kw), ("",))
        for f in funcs
    ]


def test_each_check_gets_a_fresh_layer_and_state() -> None:
    seen = []

    def mutate(ctx: Context) -> None:
        subject = ctx.fresh()
        with torch.no_grad():
            subject.module.weight.mul_(5)
        subject.forward(subject.inputs())

    def observe(ctx: Context) -> None:
        subject = ctx.fresh()
        seen.append((subject.module.weight.sum().item(), subject.module.count.item()))

    report = run_target(target(), plan(mutate, observe))
    assert [r.status for r in report.results] == [Status.PASSED, Status.PASSED]
    assert seen == [(3.0, 0.0)]


def test_a_given_instance_is_never_touched() -> None:
    layer = Scale()

    def mutate(ctx: Context) -> None:
        subject = ctx.fresh()
        subject.forward(subject.inputs())

    run_target(target(layer), plan(mutate))
    assert layer.count.item() == 0


def test_generated_inputs_are_seeded_and_fresh() -> None:
    t = Target(Scale, [Layout.parse("4,3,5:BCU")], seed=3)
    a, b = t.inputs(), t.inputs()
    assert torch.equal(a[0], b[0]) and a[0] is not b[0]
    assert a[0].dtype == torch.float32 and a[0].shape == (4, 3, 5)
    assert not torch.equal(a[0], Target(Scale, [Layout.parse("4,3,5:BCU")], seed=4).inputs()[0])


def test_outcomes_become_results() -> None:
    def passes(ctx: Context) -> tuple[str, dict]:
        return "fine", {"n": 1}

    def fails(ctx: Context) -> None:
        raise CheckFailed("wrong by 2", tensor="weight")

    def skips(ctx: Context) -> None:
        raise CheckSkipped("not applicable")

    def crashes(ctx: Context) -> None:
        raise KeyError("internal")

    def layer_raises(ctx: Context) -> None:
        class Boom(nn.Module):
            def forward(self, x):
                raise ValueError("bad shape")

        sub = Target(Boom, ctx.layouts).build()
        sub.predict(sub.inputs())

    report = run_target(target(), plan(passes, fails, skips, crashes, layer_raises))
    by_id = {r.check: r for r in report.results}
    passes = by_id["passes"]
    assert (passes.status, passes.message, passes.details) == (Status.PASSED, "fine", {"n": 1})
    assert by_id["fails"].status is Status.FAILED and by_id["fails"].details["tensor"] == "weight"
    assert "--check fails --seed 0" in by_id["fails"].details["reproduce"]
    assert by_id["skips"].status is Status.SKIPPED and by_id["skips"].message == "not applicable"
    assert by_id["crashes"].status is Status.ERROR and "KeyError" in by_id["crashes"].message
    raised = by_id["layer_raises"]
    assert raised.status is Status.FAILED and "predict raised ValueError: bad shape" in raised.message
    assert "test_runner.py" in raised.details["traceback"]  # the layer's own frame is shown
    assert report.status is Status.ERROR  # an error outranks a failure


def test_dependents_of_a_blocking_failure_are_skipped_naming_it() -> None:
    calls = []

    def base(ctx: Context) -> None:
        raise CheckFailed("broken", blocking=True)

    def dependent(ctx: Context) -> None:
        calls.append("dependent")

    def independent(ctx: Context) -> None:
        calls.append("independent")

    report = run_target(target(), plan(base, dependent, independent, requires={"dependent": ("base",)}))
    statuses = {r.check: (r.status, r.message) for r in report.results}
    assert statuses["dependent"] == (Status.SKIPPED, "needs base, which failed")
    assert calls == ["independent"]


def test_a_failure_that_leaves_the_layer_runnable_does_not_switch_off_its_dependents() -> None:
    calls = []

    def base(ctx: Context) -> None:
        raise CheckFailed("a property is wrong")

    def dependent(ctx: Context) -> None:
        calls.append("dependent")

    report = run_target(target(), plan(base, dependent, requires={"dependent": ("base",)}))
    assert [r.status for r in report.results] == [Status.FAILED, Status.PASSED]
    assert calls == ["dependent"]


def test_a_layer_that_raises_blocks_the_checks_that_need_it() -> None:
    def base(ctx: Context) -> None:
        subject = ctx.fresh()
        subject.forward([torch.zeros(2, 2)])  # a shape the layer cannot broadcast: it raises

    def dependent(ctx: Context) -> None:
        return None

    report = run_target(target(), plan(base, dependent, requires={"dependent": ("base",)}))
    assert [r.status for r in report.results] == [Status.FAILED, Status.SKIPPED]
    assert report.results[1].message == "needs base, which failed"


def test_a_hanging_check_times_out_and_the_next_still_runs() -> None:
    def hangs(ctx: Context) -> None:
        while True:
            time.sleep(0.01)

    def after(ctx: Context) -> None:
        return None

    report = run_target(target(), plan(hangs, after), options=Options(timeout=0.3))
    assert report.results[0].status is Status.ERROR and "time limit of 0.3 s" in report.results[0].message
    assert report.results[1].status is Status.PASSED


def test_a_hanging_constructor_is_a_run_error() -> None:
    class Hangs(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            while True:
                time.sleep(0.01)

    report = run_target(target(Hangs), plan(lambda ctx: None), options=Options(timeout=0.3))
    assert report.status is Status.ERROR and "ran past the time limit of 0.3 s" in report.error


def test_constructor_error_is_a_run_error() -> None:
    class Broken(nn.Module):
        def __init__(self) -> None:
            raise RuntimeError("needs a GPU")

    report = run_target(target(Broken), plan(lambda ctx: None))
    assert report.status is Status.ERROR and report.results == []
    assert "constructing Broken() raised RuntimeError: needs a GPU" in report.error


def test_initialize_failure_skips_checks_that_need_a_layer() -> None:
    class BadInit(nn.Module):
        def initialize(self, layout):
            raise ValueError("no C dimension")

        def forward(self, x):
            return x

    def needs_layer(ctx: Context) -> None:
        ctx.fresh()

    report = run_target(target(BadInit), plan(needs_layer))
    assert report.results[0].status is Status.SKIPPED
    assert "needs initialize, which raised ValueError: no C dimension" in report.results[0].message


def test_select_adds_requirements_of_only_checks_and_honours_skip() -> None:
    ids = [p.info.id for p in select(only=["forward_predict_agree"])]
    assert ids == ["signatures", "predict_runs", "forward_runs", "forward_predict_agree"]
    default = [c.id for c in catalogue() if c.default]
    assert [p.info.id for p in select()] == default
    assert "initialize" not in [p.info.id for p in select(skip=["initialize"])]


def test_select_variants() -> None:
    def variants(plan: list, cid: str) -> tuple[str, ...]:
        return next(p.variants for p in plan if p.info.id == cid)

    assert variants(select(only=["dtype:float16"]), "dtype") == ("float16",)
    assert variants(select(only=["dtype"]), "dtype") == ("float32", "float64")
    assert variants(select(enable=["dtype:bfloat16"]), "dtype") == ("float32", "float64", "bfloat16")
    assert variants(select(skip=["dtype:float64"]), "dtype") == ("float32",)


def test_select_rejects_unknown_ids_with_a_suggestion() -> None:
    with pytest.raises(UsageError, match="unknown check id 'predict_run'; did you mean 'predict_runs'"):
        select(only=["predict_run"])
    with pytest.raises(UsageError, match="has no variant 'float8'"):
        select(enable=["predict_runs:float8"])


def test_the_first_checks_on_the_bundled_layers_pass_and_spot_the_custom_backward(root) -> None:
    from layercheck.target.loading import resolve

    for ref, layouts in [
        ("layers/prelu.py", ["4,3,5:BCU"]),
        ("layers/srelu.py", ["2,3,4,5:SSCB"]),
        ("layers/srelu_function.py", ["2,3,4:SCB", "1,3,1:UCU", "1,3,1:UCU", "1,3,1:UCU", "1,3,1:UCU"]),
    ]:
        t = Target(resolve(ref, base_dir=root), [Layout.parse(x) for x in layouts])
        report = run_target(t, select(only=["signatures", "initialize", "forward_predict_agree"]))
        assert report.status is Status.PASSED, [(r.check, r.message) for r in report.results]
        assert report.custom_backward is True
