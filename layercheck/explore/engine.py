"""Replay, explore and shrink inside one target's run (Note [exploring]).

# Note [exploring]
#     A target's run with an Exploration (the command line and the Python API give one) does
#     three things beside its checks. Before them, the store's failures of this target are
#     replayed: each saved input through its check. After them, when every check passed, up to
#     ``draws`` explored draws (draws.py) run the checks that can fail on inputs (EXPLORED), each
#     draw a fresh target built for its inputs (Target.with_inputs), until one fails or the time
#     runs out. A draw on which the layer raises (a RUNS check fails) is a size or value it
#     refuses, not a failure: the record counts it. Every failure, of the default draws, a
#     replay or a draw, is then shrunk (shrink.py: a VALUED check in sizes and values, any other
#     in sizes only) and its result shows the smallest failing input, or says why there is none
#     (a BLIND check never calls the layer; no smaller input fails; the time ran out). A
#     check that passes at the declared inputs but fails at a replayed or explored one becomes
#     failed, naming both. Without failures none of this costs anything but the draws asked for.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import torch

from layercheck.explore import draws
from layercheck.explore.shrink import Shrunk, describe, shrink
from layercheck.parent.inputs import InputSpec
from layercheck.parent.layout import Layout
from layercheck.parent.plan import Listener, Options, Progress, Record
from layercheck.parent.registry import CheckInfo, Planned
from layercheck.parent.result import CheckResult, Status
from layercheck.store.settings import Exploration, Saved
from layercheck.target.subject import Target

EXPLORED = frozenset({"predict_runs", "forward_runs", "forward_predict_agree", "backward_runs", "backward_size",
                      "gradients", "dtype", "observations", "finite", "noncontiguous", "input_unchanged"})
"""The checks an explored draw runs: those whose verdict can change with the inputs."""

RUNS = frozenset({"signatures", "predict_runs", "forward_runs", "backward_runs"})
"""At an explored size or value, a failure of these says the layer refuses that input."""

AT_DIFFERENTIABLE = frozenset({"gradients"})
"""Checks not run at special values: they judge by finite differences.

# Note [special values and finite differences]
#     Exact zeros, ties, identity and one-hot rows are where functions stop being differentiable
#     (ReLU and abs at 0, max at ties, sqrt at 0): finite differences there disagree with any
#     gradient a correct layer may choose, and the gradient check cannot tell a kink from a bug
#     at every such point. A draw of special values therefore runs the other checks (finite
#     catches NaN and infinite gradients there, observations and noncontiguous their own), and
#     the gradient check judges the draws of standard-normal values at other sizes.
"""

VALUED = EXPLORED
"""Checks whose verdict depends on the inputs' values: shrunk in sizes and values. Every other
failing check (state_dict, copy, registered_tensors, ...) is shrunk in its inputs' sizes only."""

BLIND = {"signatures": "signatures reads the layer's call signatures and never calls it, so no input fails "
                       "differently"}
"""Checks that never look at the inputs: a failure says so instead of a smaller input."""

FAILS, PASSES, REFUSED, NOT_JUDGED = "fails", "passes", "refused", "not judged"

# Note [a replay that is not judged]
#     A saved failure is replayed through its check and the checks it requires. Where one of
#     those fails on the saved input (the layer now raises there: predict_runs), or the layer
#     cannot be built for it, the check itself never ran: that says nothing of the bug it was
#     kept for, so the replay is "not judged", never "passes". The store leaves such an entry as
#     it was (only a pass counts towards dropping it, store/folder.py), and the check's result,
#     which the declared inputs judged, carries a note saying so.


class Session(Protocol):
    """What the engine reads of the runner's TargetRun."""

    target: Target
    plan: list[Planned]
    options: Options
    results: dict[tuple[str, str], CheckResult]
    record: Record
    listener: Listener
    progress: Progress | None

    def start(self) -> str | None: ...

    def result(self, info: CheckInfo, variant: str) -> CheckResult: ...


class Explorer:
    """One target's replaying, exploring and shrinking around its ``session``'s checks;
    ``make`` runs other inputs: a TargetRun of a target and some of the session's checks."""

    def __init__(self, session: Session, exploration: Exploration,
                 make: Callable[[Target, list[Planned]], Session]) -> None:
        self.session = session
        self.exploration = exploration
        self.make = make
        self.target = session.target
        self.replayed: dict[tuple[str, str], tuple[Saved, CheckResult, Shrunk]] = {}
        self.unjudged: list[tuple[tuple[str, str], str]] = []  # (check, variant), the note to add
        self._shrink_deadline: float | None = None
        self._focus = functools.partial(focus_of, batch=[spec.layout.batch_dim for spec in self.target.specs])
        self.record: dict[str, Any] = {"store": None if exploration.store is None else str(exploration.store),
                                       "replayed": [], "asked": exploration.draws}

    # -- replaying -------------------------------------------------------------------------------

    def replay(self) -> None:
        """Run each saved failure's check on its saved input (before the checks: "replaying")."""
        saved = self.exploration.saved
        if not saved:
            return
        self._tell(f"replaying {len(saved)} saved failure{'s' * (len(saved) != 1)}", 0, len(saved))
        planned = {(p.info.id, v) for p in self.session.plan for v in p.variants}
        for index, entry in enumerate(saved):
            key = (entry.check, entry.variant)
            restored = self._restore(entry)
            if key not in planned or restored is None:
                self.record["replayed"].append({"index": index, "check": entry.label, "outcome": "not replayed"})
                continue
            specs, tensors = restored
            self.session.listener.phase(f"replaying {entry.label}")  # the watchdog hears
            outcome, result = self._run(specs, tensors, self._subplan({key[0]}, key), key)
            if outcome == REFUSED:  # Note [a replay that is not judged]
                why = f"{_refusal(result)} on its input {describe(specs, tensors, values=False)}"
                self.record["replayed"].append({"index": index, "check": entry.label, "outcome": NOT_JUDGED,
                                                "reason": why})
                self.unjudged.append((key, f"a saved failure of {entry.label} (found {entry.found or 'before'}) "
                                           f"was not judged: {why}; it stays in the store, not counted as fixed"))
                continue
            self.record["replayed"].append({"index": index, "check": entry.label, "outcome": outcome})
            if outcome == FAILS and result is not None and key not in self.replayed:
                self.replayed[key] = (entry, result, Shrunk(specs, list(tensors), result, values=key[0] in VALUED))

    def _restore(self, entry: Saved) -> tuple[tuple[InputSpec, ...], list[torch.Tensor]] | None:
        """The saved inputs as this target's inputs at the saved sizes; None where they do not fit."""
        specs = self.target.specs
        if len(entry.inputs) != len(specs) or any(v is None for v in entry.values):
            return None
        made, tensors = [], []
        for spec, item, value in zip(specs, entry.inputs, entry.values):
            if item.get("format") != spec.layout.format or item.get("name") != spec.name:
                return None
            try:
                layout = Layout(size=tuple(item["size"]), format=spec.layout.format)
                dtype = torch.float64 if spec.floating else torch.bool if spec.dtype == "bool" else torch.int64
                x = torch.tensor(value, dtype=dtype)
            except Exception:
                return None
            if tuple(x.shape) != layout.size:
                return None
            made.append(dataclasses.replace(spec, layout=layout))
            tensors.append(x)
        return tuple(made), tensors

    # -- after the checks ------------------------------------------------------------------------

    def finish(self) -> dict[str, Any]:
        """Explore where every check passed, shrink every failure, and put the replayed and
        explored failures in the session's results; the run report's ``explore`` record."""
        for key in dict.fromkeys([*self.replayed, *(key for key, _ in self.unjudged)]):  # in order
            self._replayed_into(key)
        self.explore()
        for key in [k for k, r in self.session.results.items() if r.status is Status.FAILED]:
            self._shrink(key)
        return self.record

    def settle(self, key: tuple[str, str]) -> CheckResult | None:
        """One check's result once it has run, as ``finish`` leaves it: what replaying its saved
        failures found, and its smallest failing input (the pytest plugin, one check an item)."""
        self._replayed_into(key)
        self._shrink(key)
        return self.session.results.get(key)

    def explore(self) -> None:
        """The explored draws, where they are asked for and every check passed."""
        if self.exploration.draws <= 0 or "explored" in self.record:
            return
        if any(r.status is Status.FAILED for r in self.session.results.values()):
            self.record["explored"] = 0
            self.record["stopped"] = "not explored: a check fails already"
        else:
            self._explore()

    def _replayed_into(self, key: tuple[str, str]) -> None:
        """``key``'s result with its replayed failure (once) and the notes of replays not judged."""
        if key in self.replayed:
            entry, result, shrunk = self.replayed.pop(key)
            self._merge(key, result, shrunk, f"a saved failure (found {entry.found or 'before'}, replayed from "
                                              f"{self.record['store'] or 'the store'})")
        own = self.session.results.get(key)
        notes = [note for of, note in self.unjudged if of == key and own is not None and note not in own.notes]
        if own is not None and notes:
            noted = dataclasses.replace(own, notes=(*own.notes, *notes))
            self.session.results[key] = noted
            self.session.listener.finished(key, noted, self.session.record)

    def _shrink(self, key: tuple[str, str]) -> None:
        """``key``'s failed result with its smallest failing input, or why there is none; the
        target's shrinking shares one time limit, from its first shrink."""
        result = self.session.results.get(key)
        if (result is None or result.status is not Status.FAILED or "shrunk" in result.details
                or self.exploration.shrink_seconds <= 0):
            return
        if key[0] in BLIND:
            self._attach(key, result, Shrunk(self.target.specs, [], None), reason=BLIND[key[0]])
            return
        if self._shrink_deadline is None:
            self._shrink_deadline = time.monotonic() + self.exploration.shrink_seconds
        shrunk = shrink(self.target.specs, self.target.base_inputs(torch.float64),
                        functools.partial(self._fails, key), deadline=self._shrink_deadline, found=result,
                        values=key[0] in VALUED, focus=self._focus)
        self._attach(key, result, shrunk if shrunk.result is not result else dataclasses.replace(shrunk, result=None))

    def _explore(self) -> None:
        exploration = self.exploration
        start = time.monotonic()
        deadline = start + exploration.seconds
        checks = {p.info.id for p in self.session.plan} & EXPLORED
        plan = self._subplan(checks)
        special = self._subplan(checks - AT_DIFFERENTIABLE)  # Note [special values and finite differences]
        varied = self._varied(deadline)
        self.record.update(explored=0, refused=[], fixed=sorted(g.name for g in draws.groups(self.target.specs)
                                                                if g.label in draws.VARIED and g not in varied))
        for drawn in draws.plan(self.target.specs, exploration.draws, self.target.seed, varied):
            if time.monotonic() > deadline:
                self.record["stopped"] = (f"stopped after {drawn.index} of {exploration.draws} draws: "
                                          f"--explore-time {exploration.seconds:g} s ran out")
                break
            self._tell(f"exploring: draw {drawn.index + 1} of {exploration.draws} ({drawn.describe()})",
                       drawn.index, exploration.draws)
            tensors = drawn.tensors()
            outcome, result = self._run(drawn.specs, tensors, plan if drawn.kind == "normal" else special)
            self.record["explored"] = drawn.index + 1
            if outcome == REFUSED:
                self.record["refused"].append(drawn.describe())
            elif outcome == FAILS and result is not None:
                key = (result.check, result.variant)
                shrunk = shrink(drawn.specs, tensors, functools.partial(self._fails, key),
                                deadline=time.monotonic() + exploration.shrink_seconds, found=result,
                                focus=self._focus)
                if shrunk.result is None:
                    shrunk = Shrunk(drawn.specs, tensors, result, shrunk.tries, shrunk.seconds, shrunk.complete)
                self.record["found"] = drawn.describe()
                self._merge(key, result, shrunk, f"explored draw {drawn.index + 1} of {exploration.draws} "
                                                 f"({drawn.describe()})")
                break
        self.record["seconds"] = round(time.monotonic() - start, 3)

    def _varied(self, deadline: float) -> list[draws.Group]:
        """The B, S and T groups whose size the layer lets change: each tried once at another size
        (its parameters must stay as they are, and it must run)."""
        runs = self._subplan({p.info.id for p in self.session.plan} & RUNS)
        labels = draws.VARIED if all(spec.floating for spec in self.target.specs) else "B"  # Note [shrinking]
        varied = []
        for group in draws.groups(self.target.specs):
            if group.label not in labels or time.monotonic() > deadline:
                continue
            self.session.listener.phase(f"exploring: does the layer take other sizes of {group.name}?")
            other = 3 if group.size != 3 else 5
            specs = draws.resized(self.target.specs, {group: other})
            outcome, _ = self._run(specs, draws.Draw(0, specs, "normal", self.target.seed + 99).tensors(), runs)
            if outcome == PASSES:
                varied.append(group)
        return varied

    # -- running other inputs --------------------------------------------------------------------

    def _subplan(self, checks: set[str], key: tuple[str, str] | None = None) -> list[Planned]:
        """The session's planned checks among ``checks`` and what they require, in the plan's
        order; ``key``'s check in its one variant."""
        need = set(checks)
        grown = True
        while grown:
            more = {req for p in self.session.plan if p.info.id in need for req in p.info.requires}
            grown = not more <= need
            need |= more
        return [dataclasses.replace(p, variants=(key[1],)) if key is not None and p.info.id == key[0] else p
                for p in self.session.plan if p.info.id in need]

    def _run(self, specs: Sequence[InputSpec], tensors: Sequence[torch.Tensor], plan: list[Planned],
             key: tuple[str, str] | None = None) -> tuple[str, CheckResult | None]:
        """Run ``plan`` on these inputs: FAILS with the first failed result (``key``'s only),
        PASSES, or REFUSED (the layer does not take them: building it or a RUNS check failed)."""
        try:
            target = self.target.with_inputs(specs)
        except Exception:
            return REFUSED, None
        if target is None:
            return REFUSED, None
        run = self.make(target.given_values(tensors), plan)
        if run.start() is not None:
            return REFUSED, None
        for planned in plan:
            for variant in planned.variants:
                result = run.result(planned.info, variant)
                if result.status is Status.ERROR:
                    return REFUSED, result
                if result.status is not Status.FAILED:
                    continue
                if key is not None:
                    return (FAILS, result) if (planned.info.id, variant) == key else (REFUSED, result)
                return (REFUSED, result) if planned.info.id in RUNS else (FAILS, result)
        return PASSES, None

    def _fails(self, key: tuple[str, str], specs: Sequence[InputSpec],
               tensors: Sequence[torch.Tensor]) -> CheckResult | None:
        """``key``'s failed result on these inputs, or None."""
        self.session.listener.phase(f"shrinking {key[0]}{f'[{key[1]}]' if key[1] else ''}")  # the watchdog hears
        outcome, result = self._run(specs, tensors, self._subplan({key[0]}, key), key)
        return result if outcome == FAILS else None

    # -- results ---------------------------------------------------------------------------------

    def _merge(self, key: tuple[str, str], result: CheckResult, shrunk: Shrunk, where: str) -> None:
        """A failure found beyond the declared inputs, in the session's results: a check that
        passed there is failed now, naming where it fails; one that failed keeps its own result,
        with this smaller input."""
        own = self.session.results.get(key)
        if own is not None and own.status is Status.FAILED:
            self._attach(key, own, shrunk)
            return
        first = dataclasses.replace(result, message=f"passes at the declared inputs, fails at {where}: "
                                                    f"{result.message}")
        self._attach(key, first, shrunk, found=where)

    def _attach(self, key: tuple[str, str], result: CheckResult, shrunk: Shrunk, *, found: str | None = None,
                reason: str | None = None) -> None:
        """``result`` with its smallest failing input (message and details), as the session's; where
        there is none, the ``reason`` (or why shrinking found none) instead."""
        details = dict(result.details)
        details["shrunk"] = {**shrunk.to_dict(), "seed": self.target.seed, "store": self.record["store"]}
        if found is not None:
            details["found"] = found
        if shrunk.result is not None:
            short = "" if shrunk.complete else f" (shrinking stopped short after {shrunk.seconds:.1f} s)"
            said = f"Smallest failing input{short}: {shrunk.text}."
        else:  # no smaller input fails: nothing to show or keep, and the reason why
            reason = reason or _none_smaller(shrunk)
            details["shrunk"] = {"text": None, "reason": reason, "tries": shrunk.tries,
                                 "seconds": round(shrunk.seconds, 3), "complete": shrunk.complete,
                                 "seed": self.target.seed, "store": self.record["store"]}
            said = f"Not shrunk: {reason}."
        head, fix, tail = result.message.rpartition(" Fix: ")
        message = f"{head.rstrip()} {said}{fix}{tail}" if fix else f"{result.message.rstrip()} {said}"
        changed = dataclasses.replace(result, message=message, details=details)
        self.session.results[key] = changed
        self.session.listener.finished(key, changed, self.session.record)

    def _tell(self, text: str, index: int, total: int) -> None:
        """Progress on long runs: the parent's watchdog hears of it (a phase), and the display."""
        self.session.listener.phase(text)
        if self.session.progress is not None:
            self.session.progress(self.target.name, text, index, total)


def _refusal(result: CheckResult | None) -> str:
    """What kept a replayed check from running: a check it needs failed, or the layer could not be built."""
    if result is None:
        return "the layer cannot be built"
    name = f"{result.check}[{result.variant}]" if result.variant else result.check
    return f"{name} {'fails' if result.status is Status.FAILED else 'gives an error'}"


def _none_smaller(shrunk: Shrunk) -> str:
    """Why shrinking shows no smaller input: it tried them all, or ran out of time first."""
    what = "smaller or simpler" if shrunk.values else "smaller"
    if shrunk.complete:
        return f"no {what} input than the declared {describe(shrunk.specs, shrunk.tensors, values=False)} fails"
    return (f"shrinking stopped after {shrunk.seconds:.1f} s and {shrunk.tries} tries (the run's shrinking time), "
            f"before any {what} input failed")


def focus_of(result: CheckResult, *, batch: Sequence[int | None]) -> list[dict[int, int]]:
    """Where a failed result says its failing elements are (Note [shrinking]): per input,
    dimension -> index. The gradient check's elements differenced one by one (details'
    ``wrong``), the observations check's failing observation on every input's batch dimension
    (``batch``: the inputs' batch dimensions)."""
    focus: list[dict[int, int]] = []

    def put(index: int, where: dict[int, int]) -> None:
        focus.extend({} for _ in range(index + 1 - len(focus)))
        focus[index].update({d: i for d, i in where.items() if d not in focus[index]})

    for wrong in result.details.get("wrong", ()) if isinstance(result.details.get("wrong"), list) else ():
        tensor = str(wrong.get("tensor", "")) if isinstance(wrong, dict) else ""
        if not tensor.startswith("input ") or not tensor[6:].isdigit():
            continue
        for element in wrong.get("elements", ())[:1]:  # the first (worst) failing entry
            put(int(tensor[6:]), dict(enumerate(int(i) for i in element.get("index", ()))))
    observation = result.details.get("observation")
    if isinstance(observation, int):
        for index, dim in enumerate(batch):
            if isinstance(dim, int):
                put(index, {dim: observation})
    return focus


def _record_of(session: Session) -> Any:
    return session.record
