from __future__ import annotations

from pathlib import Path

import pytest

from layercheck import Layout, SpecError
from layercheck.parent.spec import find_specs, load_spec


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_bundled_specs_load(root: Path) -> None:
    specs = [load_spec(p) for p in find_specs(root / "specs")[0]]
    assert {s.source.name for s in specs} >= {"prelu.yaml", "srelu.yaml", "srelu_function.yaml"}
    srelu = load_spec(root / "specs" / "srelu.yaml")
    assert srelu.layouts == (Layout.parse("24,24,20,128:SSCB"),)
    assert srelu.base_dir == root / "specs"


def test_full_spec_is_read_into_typed_fields(tmp_path: Path) -> None:
    spec = load_spec(write(tmp_path, """
layer: torch.nn:Conv2d
args: [3, 4]
kwargs: {kernel_size: 3}
inputs:
  - layout: {size: [2, 3, 6, 6], format: BCSS}
checks: {skip: [initialize], enable: []}
seed: 7
tolerance: {float32: 1.0e-3}
"""))
    assert spec.layer == "torch.nn:Conv2d"
    assert spec.args == (3, 4) and spec.kwargs == {"kernel_size": 3}
    assert spec.layouts == (Layout.parse("2,3,6,6:BCSS"),)
    assert spec.skip == ("initialize",) and spec.seed == 7
    assert spec.tolerance == {"float32": 1e-3}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("layer: a.py\ninputs: [{layout: 2:B}]\nlayers: x\n",
         "layers: unknown key; did you mean 'layer'? (keys: layer, args"),
        ("layer: a.py\ninputs: [{layout: '24,24:SSCB'}]\n", 'inputs[0].layout: "24,24:SSCB": 2 sizes but 4 labels'),
        ("layer: a.py\ninputs: [{layout: 24,24:SSCB}]\n", "inputs[0]: the layout was split at a comma; quote it"),
        ("layer: a.py\ninputs:\n  - layout: 2:B\n  - layout: 2,2:CC\n", 'inputs[1].layout: "2,2:CC": 2 C labels'),
        ("layer: a.py\ninputs: [{layout: 2:B, colour: x}]\n", "inputs[0].colour: unknown key"),
        ("layer: a.py\ninputs: {layout: 2:B}\n", "inputs: expected a list"),
        ("layer: [a]\ninputs: [{layout: 2:B}]\n", "layer: expected a layer reference"),
        ("inputs: [{layout: 2:B}]\n", "layer: missing"),
        ("layer: a.py\n", "inputs: missing or empty"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\nseed: abc\n", "seed: expected an integer, got a string"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\nseed: true\n", "seed: expected an integer, got a boolean"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\nargs: 3\n", "args: expected a list"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\nchecks: {only: [x]}\n", "checks.only: unknown key"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\ntolerance: {float8: 1}\n", "tolerance.float8: unknown dtype"),
        ("layer: a.py\ninputs: [{layout: 2:B}]\ntolerance: {float32: -1}\n",
         "tolerance.float32: expected a positive number"),
        ("- just\n- a list\n", "expected a mapping"),
    ],
)
def test_invalid_specs_name_file_key_and_expectation(tmp_path: Path, text: str, message: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(SpecError) as info:
        load_spec(path)
    assert str(path) in str(info.value)
    assert message in str(info.value)


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    path = write(tmp_path, "layer: a.py\ninputs:\n  - layout: [1, 2\n")
    with pytest.raises(SpecError, match=r"line \d+, column \d+: YAML syntax error"):
        load_spec(path)


def test_missing_spec_file(tmp_path: Path) -> None:
    with pytest.raises(SpecError, match="no such spec file"):
        load_spec(tmp_path / "nope.yaml")
