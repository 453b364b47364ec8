"""The way of one plan through ``runner.run``, as the layers see it (issue 47).

Every call from a function of one layercheck module into a function of another is a step
(``sys.setprofile``, call events only); each module is mapped to its layer, and a step whose
callee sits in a higher layer than its caller is a step back up. Layers, top to bottom: entry,
engine (runner, serve, api, the pytest plugin), checks, the SDK, numerics, the checks' support,
the target (loading, building, seeding, the subject, Triton's interpreter, frames, prepare),
reporting, parent (plan, registry, result, errors, ...). The mapping goes by a module's own name,
so the same script measures a checkout from before the packages (run it with that checkout first
on PYTHONPATH: ``PYTHONPATH=/path/to/old python benchmarks/layer_walk.py``).

    python benchmarks/layer_walk.py [--check predict_runs] [--steps]

The plan is the bundled SReLU at 8,16:BC with one check (the check's own work is the same before
and after; what differs is the way to it). ``--steps`` prints every step until the check starts.
(It imports the old paths to measure the tree before the packages: rewrite_imports: skip this file.)
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.append(str(ROOT))  # after PYTHONPATH: a checkout named there is the one measured

LAYERS = {  # module name (its last part) -> layer; subpackages by their folder
    "entry": {"cli", "commands", "scaffold", "launch", "__main__"},
    "engine": {"runner", "serve", "api", "lazytorch", "pytest_plugin"},
    "sdk": {"sdk", "_sdk_internal"},
    "support": {"calling", "tensors", "accelerators", "runs", "compare", "calibration", "containment", "context",
                "locations"},
    "target": {"loading", "subject", "building", "seeding", "triton_interpret", "frames", "prepare"},
    "parent": {"plan", "isolation", "workers", "limits", "spec", "layout", "inputs", "invocation", "shards",
               "listing", "sources", "plugins", "result", "errors", "registry", "_version", "_moved", "layercheck"},
}
ORDER = ["parent", "reporting", "target", "support", "numerics", "sdk", "checks", "engine", "entry"]  # bottom first


def layer_of(module: str) -> str | None:
    parts = module.split(".")
    if parts[0] != "layercheck":
        return None
    for folder in ("numerics", "checks", "reporting"):
        if folder in parts[1:-1] or (len(parts) > 1 and parts[1] == folder and len(parts) == 2):
            return folder
    name = parts[-1]
    for layer, names in LAYERS.items():
        if name in names:
            return layer
    return None


def _ours(module: str) -> bool:
    return module == "layercheck" or module.startswith("layercheck.")  # not the layer's (layercheck_user_...)


def walk(check: str) -> list[tuple[str, str]]:
    """The module-to-module steps of runner.run on the plan, in order."""
    try:
        from layercheck.engine import runner
        from layercheck.parent.inputs import parse_input
        from layercheck.parent.plan import Options, TargetPlan
    except ImportError:  # the tree before the packages
        from layercheck import runner  # type: ignore[no-redef]
        from layercheck.inputs import parse_input  # type: ignore[no-redef]
        from layercheck.plan import Options, TargetPlan  # type: ignore[no-redef]

    import layercheck

    plan = TargetPlan(name="layers/srelu.py:SReLU", layer="layers/srelu.py:SReLU", inputs=(parse_input("8,16:BC"),),
                      base_dir=Path(layercheck.__file__).resolve().parent.parent, only=(check,))
    steps: list[tuple[str, str]] = []
    here = [runner.__name__]  # the module in control

    def nearest(frame):  # type: ignore[no-untyped-def]
        while frame is not None and not _ours(frame.f_globals.get("__name__", "")):
            frame = frame.f_back
        return frame.f_globals["__name__"] if frame is not None else here[0]

    def profile(frame, event, arg):  # type: ignore[no-untyped-def]
        if event not in ("call", "return") or not _ours(frame.f_globals.get("__name__", "")):
            return
        now = frame.f_globals["__name__"] if event == "call" else nearest(frame.f_back)
        if now != here[0]:
            steps.append((here[0], now))
            here[0] = now

    options = Options(contained=False)
    runner.run([plan], options)  # once untraced: the imports (registry, checks) are not the plan's way
    sys.setprofile(profile)
    try:
        report = runner.run([plan], options)
    finally:
        sys.setprofile(None)
    assert report.runs[0].error is None and report.runs[0].results, report.runs[0].error
    return steps


def _rank(module: str) -> int:
    layer = layer_of(module)
    return ORDER.index(layer) if layer is not None else -1


def _summary(steps: list[tuple[str, str]]) -> tuple[int, int, int]:
    """Steps, modules, steps back up."""
    return (len(steps), len({m for step in steps for m in step}), sum(_rank(b) > _rank(a) for a, b in steps))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", default="predict_runs")
    parser.add_argument("--steps", action="store_true", help="print every step back up")
    parser.add_argument("--top", type=int, default=12, help="the most frequent steps back up shown")
    args = parser.parse_args()
    import layercheck

    steps = walk(args.check)
    first_check = next((i for i, (_, b) in enumerate(steps) if b.startswith("layercheck.checks.")), len(steps))
    print(f"layercheck at {Path(layercheck.__file__).parent}")
    print("runner.run, 1 plan, --check {}: {} steps between {} modules, {} of them back up the layers".format(
        args.check, *_summary(steps)))
    print("  until the check starts (the plan made a ready target): {} steps between {} modules, {} back up".format(
        *_summary(steps[:first_check])))
    up = [(a, b) for a, b in steps if _rank(b) > _rank(a)]
    for (a, b), n in Counter(up).most_common(args.top):
        print(f"  {n:4d}  {a} ({layer_of(a)}) -> {b} ({layer_of(b)})")
    if args.steps:
        for a, b in steps[:first_check]:
            print(f"  {'up ' if _rank(b) > _rank(a) else '   '} {a} -> {b}")


if __name__ == "__main__":
    main()
