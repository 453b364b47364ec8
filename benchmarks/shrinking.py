"""Shrinking over every failure of the zoo, and what the default run pays for it when nothing fails.

For each broken zoo layer (a non-empty ``EXPECT_FAIL``), the default suite runs with an
Exploration (failures shrunk, nothing explored, no store), as ``layercheck run`` does: every
failed check is shrunk (in sizes and values where its verdict reads the values, explore/engine.py's
VALUED; in sizes only otherwise), and the time each shrink took is listed with its tries, whether
it found a smaller failing input, whether it stopped short, and where it found none, why.
Then, on the correct zoo layers, the default suite with and without the
Exploration, alternated in one process, each first in every other round (CPU time of this process:
a busy machine moves it less than wall time): the ratio is what shrinking costs a run with no failure.

    python benchmarks/shrinking.py [--only NAME ...] [--budget 20] [--rounds 2] [--cost-only]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from layercheck.explore.engine import VALUED
from layercheck.store.settings import Exploration

from conftest import load_zoo, run_zoo, zoo_names


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None)
    parser.add_argument("--budget", type=float, default=20.0, help="shrink seconds per target")
    parser.add_argument("--rounds", type=int, default=2, help="rounds of the side-by-side cost comparison")
    parser.add_argument("--cost-only", action="store_true", help="only the side-by-side cost on the correct layers")
    args = parser.parse_args()
    names = args.only or zoo_names()
    broken = [n for n in names if load_zoo(n).EXPECT_FAIL]
    good = [n for n in names if not load_zoo(n).EXPECT_FAIL and not n.startswith("distributed")]
    exploration = Exploration(draws=0, shrink_seconds=args.budget)

    shrinks: list[tuple[str, str, float, int, bool, bool]] = []
    reasons: list[str] = []
    for name in [] if args.cost_only else broken:
        report = run_zoo(name, exploration=exploration)
        for result in report.results:
            if result.status.value != "failed":
                continue
            shrunk = result.details.get("shrunk", {})
            shrinks.append((name, result.check, float(shrunk.get("seconds", 0.0)), int(shrunk.get("tries", 0)),
                            shrunk.get("text") is not None, bool(shrunk.get("complete", True))))
            if shrunk.get("text") is None:
                reasons.append(str(shrunk.get("reason")))
            print(f"{name:50s} {result.check:22s} {shrunk.get('seconds', 0):6.2f} s {shrunk.get('tries', 0):4d} tries"
                  f" {'sizes and values' if result.check in VALUED else 'sizes':16s} "
                  f"{shrunk.get('text') or 'none: ' + str(shrunk.get('reason'))}"
                  f"{'' if shrunk.get('complete', True) else ' (stopped short)'}", flush=True)
    seconds = sorted(s[2] for s in shrinks)
    print(f"\n{len(broken)} broken zoo layers, {len(shrinks)} failures: {sum(s[4] for s in shrinks)} shrunk to a "
          f"smaller failing input ({sum(s[4] and s[1] not in VALUED for s in shrinks)} of them in sizes only), "
          f"{len(reasons)} with the reason there is none, {sum(not s[5] for s in shrinks)} stopped short")
    for reason in sorted(set(reasons)):
        print(f"  {reasons.count(reason)} x {reason}")
    if seconds:
        print(f"shrinking time per failure: median {statistics.median(seconds):.2f} s, worst {seconds[-1]:.2f} s "
              f"({max(shrinks, key=lambda s: s[2])[:2]}), total {sum(seconds):.1f} s")

    if args.rounds <= 0:
        return
    plain, shrinking = [], []
    for round_ in range(args.rounds):
        for name in good:
            pair = ((plain, None), (shrinking, exploration))
            for bucket, given in pair if round_ % 2 == 0 else pair[::-1]:  # either goes first as often
                start = time.process_time()
                run_zoo(name, exploration=given)
                bucket.append(time.process_time() - start)
    print(f"\n{len(good)} correct zoo layers, {args.rounds} rounds side by side (CPU time): default suite "
          f"{sum(plain):.1f} s without, {sum(shrinking):.1f} s with failures shrunk and kept "
          f"(ratio {sum(shrinking) / sum(plain):.3f})")


if __name__ == "__main__":
    main()
