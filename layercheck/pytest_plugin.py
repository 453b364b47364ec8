"""pytest plugin (entry point ``pytest11``): layercheck spec files collected as tests.

Spec files whose names match the ini option ``layercheck_patterns`` (default
``layercheck_*.yaml layercheck_*.yml``) become test items, one per check and variant, so
``pytest`` alone gates a layer library; ``pytest --layercheck`` collects every YAML file
that is a spec (a mapping with ``layer`` and ``inputs``), and a spec file named on the
command line is collected whatever its name.

Each item runs its own check, through the runner's :class:`~layercheck.engine.runner.TargetRun`
for its file: the check's prerequisites first (each run once per file and remembered, as
are the runs of the layer that checks share), then the check. So ``-k gradients`` runs the
gradient check and what it needs, ``-x`` stops after the first failed check, and
``--durations`` charges each check's time to its own item (the layer's construction to the
first item of its file). A failed check fails its item with the check's message and the
command that reproduces it; a check that could not complete, or a layer that cannot be
loaded or constructed, is an error; a skipped check is skipped with its reason.

The file's TargetRun lives from its first item's setup to its last item's teardown
(pytest's setup of the file node), so a session holds the layers of one file at a time.
Nothing is kept at module level: under pytest-xdist each worker collects the same items
and builds its own TargetRun for the files whose items it gets.

A spec's ``explore:`` key is honoured as ``layercheck run`` honours it, and so is the failure
store (``.layercheck/`` beside the spec; ``--layercheck-no-store`` to skip it): the file's
setup replays its saved failures, each check's item fails with a saved failure its check still
fails and shows every failure's smallest failing input, and where the spec asks for explored
draws a last item, ``explore``, draws them once every check has run and fails with what they
find. The file's teardown keeps its failures in the store.

The module imports nothing heavy at start-up: pytest loads it in every session.
"""

from __future__ import annotations

import dataclasses
import fnmatch
import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from layercheck.engine.runner import Checks, TargetRun
    from layercheck.explore.engine import Explorer
    from layercheck.parent.plan import Options, TargetPlan
    from layercheck.parent.registry import CheckInfo, Planned
    from layercheck.parent.result import CheckResult

DEFAULT_PATTERNS = ["layercheck_*.yaml", "layercheck_*.yml"]
SPEC_SUFFIXES = (".yaml", ".yml")


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("layercheck", "layercheck: check custom PyTorch layers")
    group.addoption(
        "--layercheck",
        action="store_true",
        default=False,
        help="collect every YAML layercheck spec (a mapping with 'layer' and 'inputs') as tests, "
             "not only files matching layercheck_patterns",
    )
    group.addoption(
        "--layercheck-strict",
        action="store_true",
        default=False,
        help="fail a layercheck check that applies but could not judge the layer (layercheck run --strict)",
    )
    group.addoption(
        "--layercheck-no-store",
        action="store_true",
        default=False,
        help="neither replay nor keep failures in the .layercheck/ store beside each spec (layercheck run --no-store)",
    )
    parser.addini(
        "layercheck_patterns",
        type="args",
        default=DEFAULT_PATTERNS,
        help="glob patterns of spec file names collected as layercheck tests "
             f"(default: {' '.join(DEFAULT_PATTERNS)})",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "layercheck: a check of a layer, collected from a layercheck spec file")


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix.lower() not in SPEC_SUFFIXES:
        return None
    patterns = parent.config.getini("layercheck_patterns")
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns):
        return SpecFile.from_parent(parent, path=file_path)
    # pytest's own rule for test files: one named on the command line is collected whatever its name.
    named = parent.session.isinitpath(file_path)
    if not (named or parent.config.getoption("layercheck")):
        return None
    from layercheck.parent.spec import looks_like_spec

    if looks_like_spec(file_path):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    """One spec file: its items are the planned checks of its layer, which share one TargetRun."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.plan: TargetPlan | None = None  # the spec file and the session's options, resolved once
        self.checks: Checks | None = None
        self.load_error: str | None = None  # the layer could not be imported: the file's one item says why
        self.target_run: TargetRun | None = None  # set while the file's items run (setup to teardown)
        self.build_error: str | None = None  # the layer could not be built: its first item errors with it
        self._interpret: str | None = None  # TRITON_INTERPRET before setup, put back at teardown
        self.explorer: Explorer | None = None  # replays, shrinks and explores around the file's checks
        self._started = 0.0

    def collect(self) -> Any:
        from layercheck.engine import runner
        from layercheck.parent.errors import LoadError
        from layercheck.parent.result import label
        from layercheck.parent.spec import load_spec
        from layercheck.target import prepare

        spec = load_spec(self.path)  # an invalid spec is a collection error naming file and key
        self.plan = runner.TargetPlan.of(spec, self._options())
        self.checks = runner.checks_of(self.plan)
        given = os.environ.get(prepare.INTERPRET)
        try:  # imported as layercheck run imports it: under Triton's interpreter where it is asked for
            runner.load_target(self.plan, self._options(), announce=False)
        except LoadError as exc:
            # A layer that cannot be imported is this file's error, not the session's: one item,
            # so that the other spec files (and the rest of the suite) still run.
            self.load_error = str(exc)
            yield LoadItem.from_parent(self, name="load", reason=self.load_error)
            return
        finally:
            prepare.put_back_interpreter(given)  # setup sets it again
        for planned in self.checks.planned:
            for variant in planned.variants:
                name = label(planned.info.id, variant)
                yield CheckItem.from_parent(self, name=name, planned=planned, variant=variant)
        if self.plan.exploration is not None and self.plan.exploration.draws > 0:
            yield ExploreItem.from_parent(self, name="explore")

    def setup(self) -> None:
        """Construct the layer for this file's items (pytest runs this before the first of them
        and, when it fails, fails every item of the file with the same error)."""
        from layercheck.engine import runner
        from layercheck.parent.errors import LoadError
        from layercheck.target import prepare

        assert self.plan is not None and self.checks is not None
        if self.load_error is not None:
            return  # its LoadItem reports it
        self._interpret = os.environ.get(prepare.INTERPRET)
        try:  # a spec's interpret: and interpret_sizes: as layercheck run honours them
            target = runner.load_target(self.plan, self._options())
        except LoadError as exc:
            pytest.fail(f"the layer could not be loaded: {exc}", pytrace=False)
        target_run = runner.TargetRun(target, self.checks.planned, options=self._options(),
                                      tolerances=self.checks.tolerances)
        error = target_run.start()
        if error is not None:
            # Not raised here: pytest would repeat it as the error of every item of the file. The
            # first item errors with it, and where the user's code raised; the others are skipped.
            from layercheck.parent.traces import trace_text

            trace = trace_text(target_run.raised)
            self.build_error = f"the layer could not be checked: {error}" + (f"\n\n{trace}" if trace else "")
            return
        self.target_run = target_run
        self._started = time.perf_counter()
        if self.plan.exploration is not None:
            self._replay(target_run)

    def _replay(self, target_run: TargetRun) -> None:
        """The file's saved failures replayed before its checks, as layercheck run does."""
        from layercheck.engine import runner
        from layercheck.explore.engine import Explorer
        from layercheck.store import keeping

        (self.plan,), said = keeping.prepare([self.plan])
        self._say(said)
        assert self.plan.exploration is not None
        self.explorer = Explorer(target_run, self.plan.exploration, lambda other, checks: runner.TargetRun(
            other, checks, options=self._options(), tolerances=target_run.tolerances))
        self.explorer.replay()

    def _say(self, lines: list[str]) -> None:
        """Lines for the user ("replaying 2 saved failures"), on pytest's terminal where it has one."""
        terminal = self.config.pluginmanager.get_plugin("terminalreporter")
        for line in lines:
            if terminal is not None:
                terminal.write_line(line)

    def first_selected(self) -> pytest.Item | None:
        """This file's first item of the session (after -k and -m): the one that reports an error
        of the whole file. The same in every xdist worker, whichever items each one runs."""
        return next((item for item in self.session.items if item.parent is self), None)

    def _options(self) -> Options:
        from layercheck.parent.plan import Options

        return Options(strict=self.config.getoption("layercheck_strict"), exploring=True,
                       store=not self.config.getoption("layercheck_no_store"))

    def teardown(self) -> None:
        from layercheck.store import keeping
        from layercheck.target import prepare

        if self.explorer is not None and self.target_run is not None and self.plan is not None:
            run = self.target_run.report(time.perf_counter() - self._started)
            self._say(keeping.keep([self.plan], [dataclasses.replace(run, explore=self.explorer.record)]))
        self.explorer = None
        self.target_run = None  # the layer, its inputs and the shared runs go with it
        self.build_error = None
        prepare.put_back_interpreter(self._interpret)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        from layercheck.parent.errors import UsageError

        if isinstance(excinfo.value, UsageError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)


class CheckItem(pytest.Item):
    """One check (and variant) of a spec file's layer."""

    parent: SpecFile

    def __init__(self, *, planned: Planned, variant: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.info: CheckInfo = planned.info
        self.check = planned.info.id
        self.variant = variant
        self.add_marker("layercheck")
        self._result: CheckResult | None = None

    def setup(self) -> None:
        """Run the check (after its prerequisites, unless they ran already). It runs here, not
        in runtest, so that a check that could not complete is reported as an ERROR; a skip is
        settled here too, a failure in runtest."""
        from layercheck.parent.result import Status

        if self.parent.build_error is not None:  # once per file, not once per check
            first = self.parent.first_selected()
            if first is None or first is self:
                pytest.fail(self.parent.build_error, pytrace=False)
            _skip(f"the layer could not be built (the error is reported once, at {first.nodeid})")
        assert self.parent.target_run is not None  # the file's setup ran, or raised
        result = self._result = self.parent.target_run.result(self.info, self.variant)
        if self.parent.explorer is not None:  # a saved failure of this check, and the smallest failing input
            result = self._result = self.parent.explorer.settle((self.check, self.variant)) or result
        if result.status is Status.SKIPPED:
            _skip(result.message)
        if result.status is Status.ERROR:
            pytest.fail(self._failure_text(result), pytrace=False)

    def runtest(self) -> None:
        from layercheck.parent.result import Status

        if self._result is not None and self._result.status is Status.FAILED:
            pytest.fail(self._failure_text(self._result), pytrace=False)

    def teardown(self) -> None:
        self._result = None

    def _failure_text(self, result: CheckResult) -> str:
        """As the command line's failure block: the message (the first line, which pytest's short
        summary shows), the layer's traceback for a failure (for an error too with -v), and the
        command that reproduces the check."""
        from layercheck.parent.result import Status

        lines = [result.message]
        trace = result.details.get("traceback")
        if trace and (result.status is Status.FAILED or self.config.option.verbose > 0):
            lines += ["", str(trace).rstrip("\n")]
        if "reproduce" in result.details:
            lines += ["", f"reproduce: {result.details['reproduce']}"]
        return "\n".join(lines)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"layercheck {self.name} of {self.path.name}"


class ExploreItem(pytest.Item):
    """The explored draws a spec asks for (``explore:``), after every check of its file has run:
    it fails with the failures they find, each shrunk, and passes where they find none."""

    parent: SpecFile

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_marker("layercheck")

    def runtest(self) -> None:
        from layercheck.parent.result import Status

        target_run, explorer = self.parent.target_run, self.parent.explorer
        if target_run is None or explorer is None:
            _skip("the layer could not be built: nothing to explore")
        assert target_run is not None and explorer is not None
        for info, variant in target_run.steps():  # every check first, as layercheck run explores after them
            target_run.result(info, variant)
            explorer.settle((info.id, variant))
        explorer.explore()
        record = explorer.record
        found = [r for r in target_run.results.values()
                 if r.status is Status.FAILED and str(r.details.get("found", "")).startswith("explored draw")]
        if found:
            pytest.fail("\n\n".join(f"{r.check}{f'[{r.variant}]' if r.variant else ''}: {r.message}"
                                    for r in found), pytrace=False)
        if record.get("stopped"):
            _skip(str(record["stopped"]))

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"layercheck explore of {self.path.name}"


class LoadItem(pytest.Item):
    """Stands for a spec file whose layer cannot be imported: it errors with the reason."""

    def __init__(self, *, reason: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.reason = reason
        self.add_marker("layercheck")

    def setup(self) -> None:
        pytest.fail(f"the layer could not be loaded: {self.reason}", pytrace=False)

    def runtest(self) -> None:  # setup always fails
        raise AssertionError("unreachable")

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"layercheck load of {self.path.name}"


def _skip(reason: str) -> None:
    """Skip, reported at the spec file rather than at this plugin's line."""
    try:
        skipped = pytest.skip.Exception(reason, _use_item_location=True)
    except TypeError:  # a pytest without item locations for skips
        skipped = pytest.skip.Exception(reason)
    raise skipped
