from __future__ import annotations

from pathlib import Path

import pytest
import torch

from layercheck.parent.errors import LoadError
from layercheck.target.loading import TargetNotFound, resolve, split_reference


def test_file_with_one_candidate_needs_no_class_name(root: Path) -> None:
    cls = resolve("layers/prelu.py", base_dir=root)
    assert cls.__name__ == "PReLU" and issubclass(cls, torch.nn.Module)


def test_file_and_module_references(root: Path) -> None:
    assert resolve("layers/srelu.py:SReLU", base_dir=root).__name__ == "SReLU"
    fn = resolve("layers/srelu_function.py:SReLUFunction", base_dir=root)
    assert issubclass(fn, torch.autograd.Function)
    assert resolve("torch.nn:PReLU") is torch.nn.PReLU


def test_same_file_loads_once(root: Path) -> None:
    assert resolve("layers/prelu.py", base_dir=root) is resolve(str(root / "layers/prelu.py"))


def test_several_candidates_are_listed(tmp_path: Path) -> None:
    (tmp_path / "two.py").write_text("from torch import nn\nclass A(nn.Module): pass\nclass B(nn.Module): pass\n")
    with pytest.raises(TargetNotFound, match=r"several layers \(A, B\)"):
        resolve("two.py", base_dir=tmp_path)


def test_a_class_bound_to_two_names_is_one_candidate(tmp_path: Path) -> None:
    (tmp_path / "alias.py").write_text("from torch import nn\nclass Layer(nn.Module): pass\nLAYER = Layer\n")
    assert resolve("alias.py", base_dir=tmp_path).__name__ == "Layer"


def test_missing_file_module_and_class(tmp_path: Path, root: Path) -> None:
    with pytest.raises(TargetNotFound, match="no such file"):
        resolve("nope.py", base_dir=tmp_path)
    with pytest.raises(TargetNotFound, match="no module named 'no_such_package'"):
        resolve("no_such_package.layers:X")
    with pytest.raises(TargetNotFound, match=r"no 'Nope' in .*PReLU"):
        resolve("layers/prelu.py:Nope", base_dir=root)


def test_not_a_layer_class() -> None:
    with pytest.raises(LoadError, match=r"not a torch\.nn\.Module or torch\.autograd\.Function"):
        resolve("torch:Tensor")


def test_import_error_in_user_file_names_the_line(tmp_path: Path) -> None:
    (tmp_path / "bad.py").write_text("import torch\n\nraise RuntimeError('boom')\n")
    with pytest.raises(LoadError, match=r"RuntimeError: boom \(at bad.py:3\)") as info:
        resolve("bad.py", base_dir=tmp_path)
    assert not isinstance(info.value, TargetNotFound)


def test_file_may_import_its_siblings(tmp_path: Path) -> None:
    (tmp_path / "helper_mod_xyz.py").write_text("SCALE = 3\n")
    (tmp_path / "uses.py").write_text(
        "from torch import nn\nfrom helper_mod_xyz import SCALE\n"
        "class L(nn.Module):\n    def forward(self, x): return x * SCALE\n"
    )
    assert resolve("uses.py", base_dir=tmp_path).__name__ == "L"


@pytest.mark.parametrize(
    ("reference", "expected"),
    [
        ("a/b.py:Cls", ("a/b.py", "Cls")),
        ("a/b.py", ("a/b.py", None)),
        ("torch.nn:PReLU", ("torch.nn", "PReLU")),
        ("C:/x/b.py", ("C:/x/b.py", None)),
    ],
)
def test_split_reference(reference: str, expected: tuple[str, str | None]) -> None:
    assert split_reference(reference) == expected
