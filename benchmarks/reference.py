"""The cost of the ``reference`` check (issue 48): each of its variants, and the four together,
as multiples of one float32 forward+backward of the same layer measured side by side in this run
(CPU time of this process, medians over ``--repeat`` rounds), on the docs' RMS norm kernel against
its PyTorch reference. A variant's cost is the CPU time of a run of it (``--check
reference:DTYPE``) less that of a run of its prerequisites alone (``--check backward_runs``),
made in the same round.

    python benchmarks/reference.py [--layout 256,1024:BC] [--repeat 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from layercheck.engine.runner import run_target  # noqa: E402
from layercheck.parent.layout import Layout  # noqa: E402
from layercheck.parent.registry import select  # noqa: E402
from layercheck.target.loading import resolve  # noqa: E402
from layercheck.target.reference import reference_of  # noqa: E402
from layercheck.target.subject import Target  # noqa: E402

EXAMPLE = ROOT / "docs" / "examples" / "rmsnorm_kernel.py"


def forward_backward(layer: torch.nn.Module, x: torch.Tensor) -> float:
    """CPU seconds of one training forward and backward with a random output gradient."""
    x = x.detach().clone().requires_grad_(True)
    start = time.process_time()
    y = layer(x)
    y.backward(torch.randn_like(y))
    return time.process_time() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layout", default="256,1024:BC")
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    layout = Layout.parse(args.layout)
    kernel = resolve(f"{EXAMPLE}:RMSNormKernel")
    variants = ("float64", "float32", "bfloat16", "float16")
    base: list[float] = []
    costs: dict[str, list[float]] = {}

    def run(only: tuple[str, ...]) -> float:
        target = Target(kernel, [layout], kwargs={"dim": layout.size[-1]})
        target.reference = reference_of(f"{EXAMPLE}:RMSNormRef", base_dir=ROOT)
        start = time.process_time()
        run_target(target, select(only=only))
        return time.process_time() - start

    for _ in range(args.repeat):
        layer, x = kernel(dim=layout.size[-1]), torch.randn(layout.size)
        forward_backward(layer, x)  # warm
        base.append(statistics.median(forward_backward(layer, x) for _ in range(3)))
        prerequisites = run(("backward_runs",))
        for variant in variants:
            costs.setdefault(variant, []).append(run((f"reference:{variant}",)) - prerequisites)
        costs.setdefault("all four", []).append(run(("reference",)) - prerequisites)
    print(f"one float32 forward+backward of RMSNormKernel at {args.layout}: {statistics.median(base) * 1e3:.1f} ms CPU "
          f"(median of {args.repeat} rounds)")
    for name, seconds in costs.items():
        ratios = sorted(s / b for s, b in zip(seconds, base))
        print(f"reference[{name}]: {statistics.median(ratios):.1f}x (range {ratios[0]:.1f}-{ratios[-1]:.1f}x)")


if __name__ == "__main__":
    main()
