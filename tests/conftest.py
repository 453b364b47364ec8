"""Shared fixtures: the repository root and a way to run the checks on a zoo layer."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

import pytest

from layercheck.engine.runner import Options, run_target
from layercheck.parent.inputs import InputSpec, looks_like_input, parse_input
from layercheck.parent.registry import select
from layercheck.parent.result import RunReport
from layercheck.store import folder as store
from layercheck.store.settings import Exploration
from layercheck.target.subject import Target

ROOT = Path(__file__).resolve().parent.parent
ZOO = Path(__file__).resolve().parent / "zoo"


def zoo_names() -> list[str]:
    return sorted(p.stem for p in ZOO.glob("*.py") if not p.stem.startswith("_"))


def load_zoo(name: str) -> ModuleType:
    path = ZOO / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"layercheck_zoo_{name}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # as layercheck's loader does: torch.compile imports a Function's module by name
    spec.loader.exec_module(module)
    return module


def zoo_inputs(module: ModuleType) -> tuple[list[InputSpec], dict[str, object]]:
    """A zoo layer's tensor inputs (its LAYOUTS, then the CALL_KWARGS that read as inputs)
    and the plain keyword values of its call."""
    inputs = [parse_input(text) for text in module.LAYOUTS]
    constants = {}
    for key, value in getattr(module, "CALL_KWARGS", {}).items():
        if isinstance(value, str) and looks_like_input(value):
            inputs.append(parse_input(value, name=key))
        else:
            constants[key] = value
    return inputs, constants


def run_zoo(name: str, *, only: tuple[str, ...] = (), enable: tuple[str, ...] = (), seed: int = 0,
            reference: bool = True, exploration: Exploration | None = None) -> RunReport:
    """Run the default checks (or ``only`` these) on one zoo layer; ``reference``: against its
    REFERENCE where it names one; ``exploration``: with
    failures shrunk, replayed and explored (layercheck.explore)."""
    module = load_zoo(name)
    inputs, constants = zoo_inputs(module)
    target = Target(
        module.LAYER,
        inputs,
        args=getattr(module, "ARGS", ()),
        kwargs=getattr(module, "KWARGS", {}),
        seed=seed,
        name=f"tests/zoo/{name}.py",
        constants=constants,
    )
    if reference and hasattr(module, "REFERENCE"):  # the implementation the layer must match (the reference check)
        from layercheck.target.reference import reference_of

        target.reference = reference_of(module.REFERENCE, mapping=getattr(module, "REFERENCE_MAP", {}))
        enable = (*enable, "reference")  # as the plan of a target that names a reference enables it
    plan = select(only=only, skip=tuple(getattr(module, "SKIP", ())),
                  enable=tuple(getattr(module, "ENABLE", ())) + enable)
    return run_target(target, plan, options=Options(seed=seed), exploration=exploration)


def write_spec(folder: Path, name: str, layer: str, *layouts: str, **keys: object) -> Path:
    """Write a spec file ``folder/name`` (small layouts: the bundled specs use a big one)."""
    import yaml

    path = folder / name
    path.write_text(yaml.safe_dump({"layer": layer, "inputs": [{"layout": text} for text in layouts], **keys}))
    return path


def failed_checks(report: RunReport) -> set[str]:
    return {r.check for r in report.results if r.status.value in ("failed", "error")}


@pytest.fixture
def root() -> Path:
    return ROOT


DEFAULT_STORE_FOLDER = store.default_folder


@pytest.fixture(autouse=True)
def _failure_store_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The command line keeps failures in .layercheck/ beside a spec or in the working directory:
    in a test, in its own folder, so that no test replays another's failures (or the repository's)."""
    monkeypatch.setattr(store, "default_folder", lambda source: tmp_path / ".layercheck")


def install_package(folder: Path, package: str, module_text: str, group: str) -> None:
    """A package as pip would leave it in ``folder``: the module, and a dist-info folder with its
    entry point (named as the package, version 0.1) in ``group``."""
    (folder / f"{package}.py").write_text(module_text)
    info = folder / f"{package}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {package}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{group}]\n{package} = {package}\n")
