"""The old module paths (before the packages of issue 47) keep working for a release: each is the
very module at its new path, with a DeprecationWarning that names the new one.

The old paths are what this file tests: rewrite_imports: skip this file."""

from __future__ import annotations

import importlib
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

import layercheck
from layercheck._moved import MOVED

ROOT = Path(__file__).resolve().parent.parent
OLD = sorted(old for old in MOVED if old != "layercheck.cli")  # layercheck.cli is a package now


def _forget(monkeypatch: pytest.MonkeyPatch, old: str) -> None:
    """As if the old path had never been imported in this process."""
    monkeypatch.delitem(sys.modules, old, raising=False)
    monkeypatch.delattr(layercheck, old.rpartition(".")[2], raising=False)


@pytest.mark.parametrize("old", OLD)
def test_an_old_path_is_the_new_module_with_a_warning(old: str, monkeypatch: pytest.MonkeyPatch) -> None:
    _forget(monkeypatch, old)
    new = importlib.import_module(MOVED[old])
    with pytest.warns(DeprecationWarning, match=rf"^{old} moved to {MOVED[old]}; import it from there"):
        module = importlib.import_module(old)
    assert module is new
    assert module.__name__ == MOVED[old] and module.__spec__ is not None and module.__spec__.name == MOVED[old]


def test_every_form_of_an_old_import_gives_the_same_objects(monkeypatch: pytest.MonkeyPatch) -> None:
    for old in ("layercheck.runner", "layercheck.subject", "layercheck.limits"):
        _forget(monkeypatch, old)
    from layercheck.engine import runner
    from layercheck.target.subject import Target

    with pytest.warns(DeprecationWarning, match="layercheck.runner moved to layercheck.engine.runner") as caught:
        from layercheck import runner as old_runner
    assert caught[0].filename == __file__  # the warning points at the import statement, not at importlib
    with pytest.warns(DeprecationWarning, match="layercheck.subject moved to layercheck.target.subject"):
        from layercheck.subject import Target as OldTarget
    with pytest.warns(DeprecationWarning, match="layercheck.limits moved to layercheck.parent.limits"):
        import layercheck.limits
    assert old_runner is runner and OldTarget is Target
    assert layercheck.limits is sys.modules["layercheck.parent.limits"]


def test_monkeypatching_an_old_path_patches_the_module_the_code_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    from layercheck.target import subject

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        monkeypatch.setattr("layercheck.subject.SAMPLE_ELEMENTS", 7)
    assert subject.SAMPLE_ELEMENTS == 7


def test_the_command_line_names_still_resolve_from_layercheck_cli() -> None:
    from layercheck.cli import commands

    with pytest.warns(DeprecationWarning, match=r"layercheck\.cli\.app moved to layercheck\.cli\.commands\.app"):
        from layercheck.cli import app
    assert app is commands.app
    with pytest.raises(ImportError):
        from layercheck.cli import no_such_name  # noqa: F401


def test_the_table_names_modules_that_exist_and_files_that_do_not() -> None:
    for old, new in MOVED.items():
        assert (ROOT / (new.replace(".", "/") + ".py")).is_file(), new
        if old != "layercheck.cli":
            assert not (ROOT / (old.replace(".", "/") + ".py")).exists(), f"{old} is both moved and present"


def test_an_old_path_in_a_fresh_interpreter() -> None:
    """The finder comes with ``import layercheck`` alone: a plug-in's ``from layercheck.registry
    import check`` works as its first line."""
    code = ("import warnings; warnings.simplefilter('error')\n"
            "try:\n    from layercheck.registry import check\nexcept DeprecationWarning as w:\n    print(w)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.startswith("layercheck.registry moved to layercheck.parent.registry")
