"""What answers before torch is imported, and plug-ins that fail to load.

A usage error, ``--help``, ``--version`` and ``layercheck checks`` never import torch (a
fraction of a second rather than seconds); a run's parent process does not either (its
workers do). Plug-ins are found without being loaded: a broken one is one line naming its
package and the error, and exit status 2 only where it is asked for.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import install_package

ROOT = Path(__file__).resolve().parent.parent

# Runs the command line in this interpreter and prints, last, whether torch was imported.
PROBE = textwrap.dedent("""
    import atexit, sys
    atexit.register(lambda: print("torch imported:", "torch" in sys.modules))
    sys.argv = ["layercheck", *sys.argv[1:]]
    from layercheck.launch import main
    main()
""")


def _env(*paths: Path) -> dict[str, str]:
    path = os.pathsep.join([*map(str, paths), str(ROOT), os.environ.get("PYTHONPATH", "")])
    return {**os.environ, "PYTHONPATH": path}


def probe(*args: str, cwd: Path = ROOT, paths: tuple[Path, ...] = ()) -> tuple[int, str, str, bool]:
    """(exit status, stdout without the probe's line, stderr, whether torch was imported)."""
    done = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, cwd=cwd,
                          env=_env(*paths), timeout=300)
    out, _, last = done.stdout.rstrip("\n").rpartition("\n")
    assert last.startswith("torch imported: "), done.stdout + done.stderr
    return done.returncode, out, done.stderr, last.endswith("True")


@pytest.mark.parametrize(("args", "message"), [
    (["run", "nosuchfile.py", "--layout", "8,16:BC"], "nosuchfile.py: no such file"),
    (["run", "layers/srelu.py:SReLu", "--layout", "8,16:BC"],
     "layers/srelu.py:SReLu: no 'SReLu' in layers/srelu.py; did you mean 'SReLU'?"),
    (["run", "nosuchpackage:Layer", "--layout", "8,16:BC"], "nosuchpackage:Layer: no module named 'nosuchpackage'"),
    (["run", "layers/srelu.py:SReLU", "--layout", "8,16:BQ"], "8,16:BQ"),
    (["run", "specs/srelu.yaml", "--check", "gradiens"], "unknown check id 'gradiens'"),
    (["run", "specs/nosuch.yaml"], "specs/nosuch.yaml: no such spec file"),
])
def test_a_usage_error_is_one_line_before_torch(args: list[str], message: str) -> None:
    rc, out, err, torch_imported = probe(*args)
    assert rc == 2 and out == ""
    assert err.startswith("layercheck: error: ") and err.count("\n") == 1 and message in err, err
    assert not torch_imported


def test_a_bad_spec_is_a_usage_error_before_torch(tmp_path: Path) -> None:
    spec = f"layer: {ROOT}/layers/srelu.py:SReLU\ninputs: [{{layout: '8,16:BC'}}]\nsed: 1\n"
    (tmp_path / "bad.yaml").write_text(spec)
    rc, _, err, torch_imported = probe("run", str(tmp_path / "bad.yaml"), cwd=tmp_path)
    assert rc == 2 and "sed" in err and err.count("\n") == 1
    assert not torch_imported


@pytest.mark.slow
def test_a_class_bound_where_the_source_does_not_show_it_is_left_to_the_import(tmp_path: Path) -> None:
    """A star import may bind the name: the source cannot settle it, and the worker's import does
    (still a usage error)."""
    (tmp_path / "star.py").write_text(f"import sys\nsys.path.insert(0, {str(ROOT / 'layers')!r})\n"
                                      "from srelu import *\n")
    rc, _, err, _ = probe("run", "star.py:SReLu", "--layout", "8,16:BC", cwd=tmp_path)
    assert rc == 2 and "no 'SReLu' in star.py" in err


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["checks"], ["checks", "gradients"], ["checks", "device"],
                                  ["checks", "autocast"], ["run", "--help"]])
def test_help_version_and_the_catalogue_do_not_import_torch(args: list[str]) -> None:
    rc, out, _, torch_imported = probe(*args)
    assert rc == 0 and out
    assert not torch_imported


def test_the_parent_of_a_run_does_not_import_torch() -> None:
    rc, out, err, torch_imported = probe("run", "layers/srelu.py:SReLU", "--layout", "8,16:BC", "--check", "signatures")
    assert rc == 0, err
    assert "passed" in out
    assert not torch_imported


# -- plug-ins ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def broken_reporter(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    install_package(site, "broken_shout", "raise ImportError('needs shoutlib')\n", "layercheck.reporters")
    return site


@pytest.fixture(scope="module")
def broken_check(tmp_path_factory: pytest.TempPathFactory) -> Path:
    site = tmp_path_factory.mktemp("site")
    install_package(site, "broken_extra", "import nosuchmodule_for_layercheck\n", "layercheck.checks")
    return site


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["run", "--help"]])
@pytest.mark.parametrize("plugin", ["broken_reporter", "broken_check"])
def test_a_broken_plugin_never_breaks_version_or_help(args: list[str], plugin: str,
                                                      request: pytest.FixtureRequest) -> None:
    rc, out, err, _ = probe(*args, paths=(request.getfixturevalue(plugin),))
    assert rc == 0 and out and err == ""


def test_a_broken_reporter_is_one_line_when_its_format_is_asked_for(broken_reporter: Path) -> None:
    rc, out, err, _ = probe("run", "layers/srelu.py:SReLU", "--layout", "8,16:BC", "--check", "signatures",
                            "--format", "broken_shout", paths=(broken_reporter,))
    assert rc == 2 and out == ""
    assert err == ("layercheck: error: reporter plug-in 'broken_shout' (broken_shout) from broken_shout 0.1 failed to "
                   "load: ImportError: needs shoutlib\n")


@pytest.mark.slow
def test_a_broken_reporter_is_not_asked_for_by_a_run_in_another_format(broken_reporter: Path) -> None:
    rc, out, err, _ = probe("run", "layers/srelu.py:SReLU", "--layout", "8,16:BC", "--check", "signatures",
                            "--format", "json", paths=(broken_reporter,))
    assert rc == 0, err
    assert '"schema": "layercheck.report/1"' in out


def test_a_broken_check_plugin_is_one_line_for_a_run(broken_check: Path) -> None:
    """Its checks would join the default suite: a run without them would pass for less than asked."""
    rc, out, err, _ = probe("run", "layers/srelu.py:SReLU", "--layout", "8,16:BC", paths=(broken_check,))
    assert rc == 2 and out == ""
    assert err == ("layercheck: error: check plug-in 'broken_extra' (broken_extra) from broken_extra 0.1 failed "
                   "to load: ModuleNotFoundError: No module named 'nosuchmodule_for_layercheck'\n")


def test_plugins_lists_what_is_installed_and_whether_it_loads(broken_reporter: Path, broken_check: Path) -> None:
    rc, out, err, _ = probe("plugins", paths=(broken_reporter, broken_check))
    assert rc == 0, err
    rows = [line.split(maxsplit=4) for line in out.splitlines()]
    assert rows[0] == ["name", "kind", "package", "version", "status"]
    assert ["broken_extra", "check", "broken_extra", "0.1",
            "failed: ModuleNotFoundError: No module named 'nosuchmodule_for_layercheck'"] in rows
    assert ["broken_shout", "reporter", "broken_shout", "0.1", "failed: ImportError: needs shoutlib"] in rows


@pytest.mark.slow
def test_plugins_says_when_there_are_none() -> None:
    rc, out, _, _ = probe("plugins")
    assert rc == 0 and out.startswith("no plug-ins installed")
