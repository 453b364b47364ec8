"""What a spec and the command line's options resolve to (plan.TargetPlan), made once."""

from __future__ import annotations

from pathlib import Path

from layercheck.parent.inputs import parse_input
from layercheck.parent.plan import Options, TargetPlan
from layercheck.parent.spec import TargetSpec


def _spec(**fields: object) -> TargetSpec:
    return TargetSpec(layer="layers/prelu.py:PReLU", inputs=(parse_input("4,3:BC"),), **fields)  # type: ignore[arg-type]


def test_the_command_line_wins_over_the_spec_and_the_spec_over_the_defaults() -> None:
    spec = _spec(seed=3, on="cuda", skip=("export",), enable=("dtype:float16",), tolerance={"float64": 1e-5})
    assert (TargetPlan.of(_spec(), Options()).seed, TargetPlan.of(_spec(), Options()).on) == (0, None)
    from_spec = TargetPlan.of(spec, Options())
    assert (from_spec.seed, from_spec.on, from_spec.skip, from_spec.enable) == (3, "cuda", ("export",),
                                                                                ("dtype:float16",))
    given = TargetPlan.of(spec, Options(seed=5, on="cpu", skip=("compile",), tolerance={"float64": 1e-3},
                                        interpret=True))
    assert (given.seed, given.on, given.interpret) == (5, "cpu", True)
    assert given.skip == ("compile", "export")
    # the spec's tolerances, then the command line's on top, each with where it was given
    assert given.tolerances == (("layers/prelu.py:PReLU: tolerance", {"float64": 1e-5}),
                                ("--tolerance", {"float64": 1e-3}))


def test_the_reproduce_command_is_resolved_with_the_plan() -> None:
    spec = _spec(seed=3, source=Path("specs/prelu.yaml"))
    plan = TargetPlan.of(spec, Options(strict=True, tolerance={"float64": 1e-3}))
    assert plan.name == "specs/prelu.yaml"
    assert plan.invocation.reproduce("gradients") == ("layercheck run specs/prelu.yaml --check gradients --seed 3 "
                                                      "--tolerance float64=0.001 --strict")
    layer = TargetPlan.of(_spec(), Options(seed=2))
    assert layer.invocation.reproduce("gradients").startswith("layercheck run layers/prelu.py:PReLU --layout 4,3:BC")
    python = TargetPlan.of(_spec(), Options(), name="PReLU", reference=None)
    assert python.name == "PReLU" and python.invocation.target is None
