"""The Markdown summary's size for 100 and 1,000 layers (issue 51): GitHub Actions cuts a step
summary at 1 MiB.

    python benchmarks/markdown_size.py [--counts 5,100,1000] [--failing 0.02]

Real runs give the runs copied: two bundled layers (passing, with their notes) and a
broken zoo layer (a failed gradient check with its long message); the report of N layers holds N
runs, a share ``--failing`` of them the broken one's, the others the passing ones' in turn, each
named apart. The sizes are of the rendered Markdown, in bytes; nothing is timed.
"""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from layercheck.engine import runner
from layercheck.parent.result import Report, RunReport
from layercheck.parent.spec import load_spec

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 1024 * 1024  # GitHub's step-summary limit


def sample_runs(folder: Path) -> tuple[list[RunReport], list[RunReport]]:
    """Real runs, at small sizes (a message does not grow with the input): PReLU and SReLU pass,
    the zoo's batch-averaged PReLU fails its gradient check."""
    layers = {"prelu": ("layers/prelu.py:PReLU", "4,3,5:BCU"), "srelu": ("layers/srelu.py:SReLU", "4,3,5:BCU"),
              "broken": ("tests/zoo/gradients_batch_mean.py", "8,3,5:BCU")}
    options = runner.Options()
    runs = {}
    for name, (layer, layout) in layers.items():
        spec = folder / f"{name}.yaml"
        spec.write_text(f"layer: {ROOT / layer}\ninputs:\n  - layout: {layout}\n")
        runs[name] = runner.run_plan(runner.TargetPlan.of(load_spec(spec), options), options)
    return [runs["prelu"], runs["srelu"]], [runs["broken"]]


def report_of(count: int, failing_share: float, passing: list, failing: list) -> Report:
    bad = round(count * failing_share)
    runs = [dataclasses.replace(failing[0], target=f"layers/broken_{i}.py") for i in range(bad)]
    runs += [dataclasses.replace(passing[i % len(passing)], target=f"layers/layer_{i}.py") for i in range(count - bad)]
    return Report(runs=runs, environment={"python": "3.11", "torch": "2.13.0", "devices": ["cpu"]}, version="0.1.0",
                  seconds=1.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--counts", default="5,100,1000")
    parser.add_argument("--failing", type=float, default=0.02, help="share of the layers that fail")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        passing, failing = sample_runs(Path(folder))
    print(f"{'layers':>7} {'failing':>8} {'bytes':>10} {'of 1 MiB':>9}")
    for count in (int(n) for n in args.counts.split(",")):
        for bad in sorted({0, round(count * args.failing)}):
            size = len(report_of(count, bad / count, passing, failing).render("markdown").encode())
            print(f"{count:>7} {bad:>8} {size:>10} {size / LIMIT:>9.1%}")


if __name__ == "__main__":
    main()
