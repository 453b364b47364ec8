"""pytest plugin (entry point ``pytest11``): layercheck spec files collected as tests.

Spec files whose names match the ini option ``layercheck_patterns`` (default
``layercheck_*.yaml layercheck_*.yml``) become test items, one per check and variant, so
``pytest`` alone gates a layer library; ``pytest --layercheck`` collects every YAML file
that is a spec (a mapping with ``layer`` and ``inputs``). A failed check fails its item
with the check's message and details, a check that could not complete (or a layer that
cannot be loaded) is an error, a skipped check is skipped with its reason. The layer is checked once per spec file, when its first item
runs; with ``-k``/``-m`` only the selected checks (and what they need) run.

The module imports nothing heavy at start-up: pytest loads it in every session.
"""

from __future__ import annotations

import fnmatch
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from layercheck.result import CheckResult, RunReport
    from layercheck.spec import TargetSpec

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
    if any(fnmatch.fnmatch(file_path.name, pattern) for pattern in patterns) or (
        parent.config.getoption("layercheck") and _is_spec(file_path)
    ):
        return SpecFile.from_parent(parent, path=file_path)
    return None


class SpecFile(pytest.File):
    """One spec file: its items are the planned checks of its layer."""

    spec: TargetSpec
    _run: RunReport | None = None
    _items = 0  # how many check items were collected

    def collect(self) -> Any:
        from layercheck import runner
        from layercheck.errors import LoadError
        from layercheck.spec import load_spec

        self.spec = load_spec(self.path)  # an invalid spec is a collection error naming file and key
        options = runner.Options()
        plan = runner.plan_for(self.spec, options)
        try:
            runner.make_target(self.spec, options)
        except LoadError as exc:
            # A layer that cannot be imported is this file's error, not the session's: one item,
            # so that the other spec files (and the rest of the suite) still run.
            yield LoadItem.from_parent(self, name="load", reason=str(exc))
            return
        for planned in plan:
            for variant in planned.variants:
                name = f"{planned.info.id}[{variant}]" if variant else planned.info.id
                self._items += 1
                yield CheckItem.from_parent(self, name=name, check=planned.info.id, variant=variant)

    def repr_failure(self, excinfo: pytest.ExceptionInfo[BaseException]) -> Any:  # type: ignore[override]
        from layercheck.errors import UsageError

        if isinstance(excinfo.value, UsageError):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def run_report(self) -> RunReport:
        """Check the layer (once per file): every planned check, or only the selected ones."""
        if self._run is None:
            from layercheck import runner

            selected = [item for item in self.session.items if isinstance(item, CheckItem) and item.parent is self]
            only = () if len(selected) == self._items else tuple(dict.fromkeys(item.check for item in selected))
            self._run = runner.run_spec(self.spec, runner.Options(only=only))
        return self._run


class CheckItem(pytest.Item):
    """One check (and variant) of a spec file's layer."""

    parent: SpecFile

    def __init__(self, *, check: str, variant: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.check = check
        self.variant = variant
        self.add_marker("layercheck")
        self._result: CheckResult | None = None

    def setup(self) -> None:
        """Errors and skips are settled here, so pytest reports them as ERROR and SKIPPED."""
        from layercheck.reporting.details import result_text
        from layercheck.result import Status

        run = self.parent.run_report()
        if run.error is not None:
            pytest.fail(f"{run.target} could not be checked: {run.error}", pytrace=False)
        found = [r for r in run.results if r.check == self.check and r.variant == self.variant]
        if not found:
            pytest.fail(f"{self.name} did not run (it is not in the plan of {run.target})", pytrace=False)
        result = self._result = found[0]
        if result.status is Status.SKIPPED:
            _skip(result.message)
        if result.status is Status.ERROR:
            pytest.fail(result_text(result), pytrace=False)

    def runtest(self) -> None:
        from layercheck.reporting.details import result_text
        from layercheck.result import Status

        if self._result is not None and self._result.status is Status.FAILED:
            pytest.fail(result_text(self._result), pytrace=False)

    def reportinfo(self) -> tuple[Path, int, str]:
        return self.path, 0, f"layercheck {self.name} of {self.path.name}"


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
        skipped = pytest.skip.Exception(reason, _use_item_location=True)  # type: ignore[call-arg]
    except TypeError:  # a pytest without item locations for skips
        skipped = pytest.skip.Exception(reason)
    raise skipped


def _is_spec(path: Path) -> bool:
    """Whether a YAML file is a layercheck spec (other YAML files are left alone)."""
    import yaml

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    return isinstance(data, dict) and "layer" in data and "inputs" in data
