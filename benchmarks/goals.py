"""Every cost goal beside its figure, in one run (issue 52): what holds, at a glance.

    python benchmarks/goals.py [--repeat 3] [--tree OTHER_CHECKOUT] [--only suite,api,gradients,startup]

Each figure is CPU time, measured in fresh processes with one torch thread where torch
computes, as a ratio to a reference measured beside it in the same process or the same round
(so that a machine busy with other work moves both alike); every figure is the median over
``--repeat`` rounds. ``--tree`` measures another checkout the same way, round after round
beside this one (e.g. ``--tree /work/main`` for before/after); the goals are judged on this
checkout's figures. Both run as an installed package does, with their bytecode cached (in a
folder of their own under the system's temporary folder, ``PYTHONPYCACHEPREFIX``).

The figures:

- ``worker``: the whole default suite on the bundled SReLU in a process made as the fork
  server makes its workers (``layercheck.engine.serve`` imported: torch, the checks); the first target
  of the process (cold), then warm ones, each as a multiple of one float64 forward+backward of
  the layer measured right before it. At 24,24,20,128:SSCB and 48,48,20,128:SSCB. Below the goals,
  each warm ratio's two sides apart, in seconds of CPU: the suite, and its reference (which
  moves with the page faults of fresh allocations far more than the suite does).
- ``api``: ``layercheck.check_layer`` on SReLU in a fresh process that imported torch and
  layercheck: the first call, as a multiple of one float64 forward+backward measured after it.
- ``gradients``: the ``gradients`` check's float64 and float32 variants against
  ``torch.autograd.gradcheck(fast_mode=True)`` on the same layer, inputs and parameters (float64),
  side by side, per repetition; and with ``backward_size`` counted too (it builds the float64
  forward+backward the gradient check judges).
- ``startup``: the CPU time of the whole process tree (fork server and workers included) of
  ``layercheck run`` on a tiny target of each kind (benchmarks/tiny/) and of ``layercheck
  checks gradients``, against ``python -c "import torch"`` in the same round.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SMALL, LARGE = "24,24,20,128:SSCB", "48,48,20,128:SSCB"
TINY = ROOT / "benchmarks" / "tiny"
STARTUP = {  # name: the command's arguments after python
    "import torch": ["-c", "import torch"],
    "Module, autograd's backward": ["-m", "layercheck", "run", str(TINY / "module.py"), "--layout", "8,16:BC"],
    "Module with an autograd.Function": ["-m", "layercheck", "run", str(TINY / "function_module.py"),
                                        "--layout", "8,16:BC"],
    "custom operator": ["-m", "layercheck", "run", str(TINY / "custom_op.py"), "--layout", "8,16:BC"],
    "plain function": ["-m", "layercheck", "run", str(TINY / "plain_function.py"), "--layout", "8,16:BC"],
    "bundled SReLU": ["-m", "layercheck", "run", "layers/srelu.py:SReLU", "--layout", "8,16:BC"],
    "checks gradients": ["-m", "layercheck", "checks", "gradients"],
}


@dataclass(frozen=True)
class Goal:
    """One goal: the figure it reads (a key of the measured figures) and its limit."""

    text: str
    key: str
    limit: float


GOALS = [
    Goal(f"first target in a worker, SReLU {SMALL}", "worker first small", 8.0),
    Goal(f"warm target in a worker, SReLU {SMALL}", "worker warm small", 4.0),
    Goal(f"warm target in a worker, SReLU {LARGE}", "worker warm large", 3.0),
    Goal(f"check_layer first call, SReLU {SMALL}", "api first", 8.0),
    Goal("gradients float64+float32 / gradcheck fast", "gradients both", 1.0),
    Goal("gradients float64 / gradcheck fast", "gradients float64", 0.7),
    # backward_size builds the float64 forward+backward the gradient check judges: with it counted
    Goal("gradients float64+float32+backward_size / gradcheck", "gradients with backward_size", 1.0),
    *(Goal(f"start-up: run {name} 8,16:BC", f"startup {name}", 1.2)
      for name in STARTUP if name not in ("import torch", "checks gradients")),
    Goal("start-up: checks gradients", "startup checks gradients", 0.3),
]
UNITS = {"worker": "x f+b", "api": "x f+b", "gradients": "x gradcheck", "startup": "x import torch"}


# -- the children: each measures one tree in a fresh process and prints its figures as JSON --


def _forward_backward(cls: type, layout: Any) -> float:
    """CPU seconds of one float64 forward+backward of the layer (inputs and parameters): the
    median of three after a warm-up."""
    import torch

    from layercheck.target.subject import Target

    subject = Target(cls, [layout]).build(dtype=torch.float64)
    times = []
    for _ in range(4):
        inputs = subject.inputs(requires_grad=True)
        start = time.process_time()
        out = subject.forward(inputs)
        torch.autograd.grad(out, [*inputs, *(p for _, p in subject.parameters())], torch.ones_like(out))
        times.append(time.process_time() - start)
    return statistics.median(times[1:])


def child_worker(repeat: int) -> dict[str, list[float]]:
    """The default suite as a worker of the fork server runs it: cold, then warm at both sizes."""
    import torch

    torch.set_num_threads(1)
    import layercheck.engine.serve  # noqa: F401  (what the fork server imports before it forks a worker)
    from layercheck.engine.runner import run_target
    from layercheck.parent.layout import Layout
    from layercheck.parent.registry import select
    from layercheck.target.loading import resolve
    from layercheck.target.subject import Target

    time.perf_counter = time.process_time  # the runner's clock: CPU time
    cls = resolve("layers/srelu.py:SReLU", base_dir=Path.cwd())
    sizes = {"small": Layout.parse(SMALL), "large": Layout.parse(LARGE)}

    def suite(layout: Layout) -> float:
        start = time.process_time()
        run_target(Target(cls, [layout], name="layers/srelu.py:SReLU"), select())
        return time.process_time() - start

    first = suite(sizes["small"])
    figures: dict[str, list[float]] = {"worker first small": [first / _forward_backward(cls, sizes["small"])]}
    for _ in range(repeat):
        for name, layout in sizes.items():
            fb = _forward_backward(cls, layout)
            seconds = suite(layout)
            figures.setdefault(f"worker warm {name}", []).append(seconds / fb)
            figures.setdefault(f"suite seconds {name}", []).append(seconds)
            figures.setdefault(f"reference seconds {name}", []).append(fb)
    return figures


def child_api(repeat: int) -> dict[str, list[float]]:
    """The first call of check_layer in a process that imported torch and layercheck."""
    import torch

    torch.set_num_threads(1)
    import layercheck
    from layercheck.parent.layout import Layout
    from layercheck.target.loading import resolve

    cls = resolve("layers/srelu.py:SReLU", base_dir=Path.cwd())
    start = time.process_time()
    layercheck.check_layer(cls, SMALL)
    first = time.process_time() - start
    return {"api first": [first / _forward_backward(cls, Layout.parse(SMALL))]}


def child_gradients(repeat: int) -> dict[str, list[float]]:
    """gradients[float64] and [float32] against gradcheck's fast mode, per repetition."""
    import torch

    torch.set_num_threads(1)
    from layercheck.engine.runner import run_target
    from layercheck.parent.layout import Layout
    from layercheck.parent.registry import select
    from layercheck.target.loading import resolve
    from layercheck.target.subject import Target

    time.perf_counter = time.process_time
    cls = resolve("layers/srelu.py:SReLU", base_dir=Path.cwd())
    layout = Layout.parse(SMALL)
    plan = select(only=("gradients",))  # its prerequisites run too: backward_size among them
    subject = Target(cls, [layout], seed=0).build(torch.float64)
    (x,) = [x.detach().requires_grad_() for x in subject.inputs()]
    params = [p.detach().clone().requires_grad_() for _, p in subject.parameters()]
    module = subject.module
    assert module is not None  # SReLU is a Module

    def f(x: torch.Tensor, *ps: torch.Tensor) -> torch.Tensor:  # the layer as a function of its tensors
        return torch.func.functional_call(module, dict(zip((n for n, _ in subject.parameters()), ps)), (x,))

    def ours() -> dict[str, float]:
        report = run_target(Target(cls, [layout], seed=0, name="layers/srelu.py:SReLU"), plan)
        return {r.variant or r.check: r.seconds for r in report.results if r.check in ("gradients", "backward_size")}

    def theirs() -> float:
        start = time.process_time()
        assert torch.autograd.gradcheck(f, (x, *params), fast_mode=True)
        return time.process_time() - start

    ours(), theirs()  # warm-up: first calls pay for allocations and caches
    figures: dict[str, list[float]] = {key: [] for key in
                                       ("gradients both", "gradients float64", "gradients with backward_size")}
    for _ in range(repeat):
        seconds, reference = ours(), theirs()
        both = seconds["float64"] + seconds.get("float32", 0.0)
        figures["gradients both"].append(both / reference)
        figures["gradients float64"].append(seconds["float64"] / reference)
        figures["gradients with backward_size"].append((both + seconds["backward_size"]) / reference)
    return figures


CHILDREN: dict[str, Callable[[int], dict[str, list[float]]]] = {
    "worker": child_worker, "api": child_api, "gradients": child_gradients}


# -- the parent ------------------------------------------------------------------------------


def _environment(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree),
           "PYTHONPYCACHEPREFIX": str(Path(tempfile.gettempdir()) / f"layercheck-goals-pycache-{os.getuid()}")}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def run_child(kind: str, tree: Path, repeat: int) -> dict[str, list[float]]:
    done = subprocess.run([sys.executable, "-W", "ignore", __file__, "--child", kind, "--repeat", str(repeat)],
                          cwd=tree, env=_environment(tree), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise SystemExit(f"{kind} in {tree} failed:\n{done.stderr[-3000:]}")
    figures: dict[str, list[float]] = json.loads(done.stdout.splitlines()[-1])
    return figures


def startup_round(tree: Path) -> dict[str, float]:
    """One round of the start-up commands: each command's CPU time over import torch's."""
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from startup_cpu import cpu

    seconds = {name: _tree_cpu(cpu, args, tree) for name, args in STARTUP.items()}
    return {f"startup {name}": s / seconds["import torch"] for name, s in seconds.items() if name != "import torch"}


def _tree_cpu(cpu: Callable[..., tuple[float, float]], args: list[str], tree: Path) -> float:
    saved = dict(os.environ)
    os.environ.clear()
    os.environ.update(_environment(tree))
    try:
        return cpu(args, tree)[0]
    finally:
        os.environ.clear()
        os.environ.update(saved)


def measure(trees: list[Path], kinds: list[str], repeat: int) -> dict[Path, dict[str, list[float]]]:
    """Every figure of every tree, the trees beside each other round after round."""
    figures: dict[Path, dict[str, list[float]]] = {tree: {} for tree in trees}
    if "startup" in kinds:
        from startup_cpu import _subreaper

        _subreaper()
        for tree in trees:  # a round not counted: each tree's bytecode cache filled
            startup_round(tree)
    for _ in range(repeat):
        for tree in trees:
            if "startup" in kinds:
                for key, value in startup_round(tree).items():
                    figures[tree].setdefault(key, []).append(value)
            for kind in kinds:
                if kind != "startup":
                    for key, values in run_child(kind, tree, 1).items():
                        figures[tree].setdefault(key, []).extend(values)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3, help="rounds; every figure is their median")
    parser.add_argument("--tree", type=Path, action="append", default=[], help="another checkout, measured beside")
    parser.add_argument("--only", default="worker,api,gradients,startup", help="which figures (comma-separated)")
    parser.add_argument("--child", choices=sorted(CHILDREN), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(CHILDREN[args.child](args.repeat)))
        return
    sys.path.insert(0, str(ROOT / "benchmarks"))
    kinds = [kind.strip() for kind in args.only.split(",") if kind.strip()]
    trees = [ROOT, *(tree.resolve() for tree in args.tree)]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    load = os.getloadavg()[0]
    figures = measure(trees, kinds, args.repeat)
    print(f"{started}: CPU time, medians of {args.repeat} rounds, {os.cpu_count()} CPUs, load average "
          f"{load:.1f} at the start and {os.getloadavg()[0]:.1f} at the end")
    names = ["this tree" if tree == ROOT else str(tree) for tree in trees]
    print(f"{'goal':<56}{'unit':>15}{'limit':>8}" + "".join(f"{name[-14:]:>16}" for name in names) + "  holds")
    for goal in GOALS:
        if goal.key not in figures[ROOT]:
            continue
        values = [statistics.median(figures[tree][goal.key]) if goal.key in figures[tree] else float("nan")
                  for tree in trees]
        unit = UNITS[goal.key.split()[0]]
        holds = "yes" if values[0] <= goal.limit else "NO"
        print(f"{goal.text:<56}{unit:>15}{goal.limit:>8.1f}" + "".join(f"{v:>16.2f}" for v in values) + f"  {holds}")
    # the warm ratios' two sides apart: the reference (one float64 forward+backward) moves with the
    # page faults of fresh allocations far more than the suite does (45-81 ms at the small size)
    for name, layout in (("small", SMALL), ("large", LARGE)):
        for side, what in (("suite", "the warm suite"), ("reference", "its reference, one float64 f+b")):
            key = f"{side} seconds {name}"
            if key in figures[ROOT]:
                values = [statistics.median(figures[tree][key]) if key in figures[tree] else float("nan")
                          for tree in trees]
                print(f"{what + ', ' + layout:<56}{'s of CPU':>15}{'':>8}" + "".join(f"{v:>16.3f}" for v in values))


if __name__ == "__main__":
    main()
