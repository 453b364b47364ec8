"""``--emit-test DIR``: a self-contained pytest file per kept failure, no torch here.

Each file imports the layer, and runs the one check that failed through the Python API on the
shrunk input itself (``check_layer(..., values=...)``): it fails while the layer has the bug and
passes once it is fixed, so the user keeps it in their own suite.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

_TEMPLATE = '''"""layercheck found this failure and shrank it: {target} fails {label} at {text}.

Written by `layercheck run --emit-test`: it fails while the layer has this bug and passes once
the layer is fixed. The input is the smallest failing one found, given here value by value.
"""

from pathlib import Path

from layercheck import check_layer
from layercheck.engine.api import failure_message
from layercheck.target.loading import resolve

LAYER = {layer!r}
BASE_DIR = Path({base_dir!r})
INPUTS = {inputs!r}
CALL_KWARGS = {call_kwargs!r}
VALUES = {values!r}


def test_{name}() -> None:
    layer = resolve(LAYER, base_dir=BASE_DIR)
    report = check_layer(layer, *INPUTS, call_kwargs=CALL_KWARGS, checks=[{selector!r}], args={args!r},
                         kwargs={kwargs!r}, seed={seed!r}, values=VALUES)
    assert report.passed, failure_message(report)
'''


def emit(folder: Path, plan: Any, run: Any) -> tuple[list[Path], list[str]]:
    """Write a test file per failure of ``run`` (a RunReport) with a kept input into ``folder``;
    the files written and the lines to say why some were not."""
    written: list[Path] = []
    said: list[str] = []
    for result in run.results:
        shrunk = result.details.get("shrunk") if result.status.value == "failed" else None
        if not shrunk or shrunk.get("text") is None or any(v is None for v in shrunk.get("values", [None])):
            continue
        label = f"{result.check}[{result.variant}]" if result.variant else result.check
        literal = (plan.args, dict(plan.kwargs), dict(plan.constants))
        if plan.invocation.target is None or not _literal(literal):
            said.append(f"{run.target}: {label}: no test written: the layer or its arguments cannot be written "
                        "as Python literals")
            continue
        inputs, call_kwargs = [], dict(plan.constants)
        for spec, size in zip(plan.inputs, shrunk["inputs"]):
            text = " ".join([f"{','.join(str(n) for n in size['size'])}:{size['format']}",
                             *spec.describe().split()[1:]])
            if spec.name is None:
                inputs.append(text)
            else:
                call_kwargs[spec.name] = text
        name = _slug(f"{Path(str(run.target)).stem}_{label}")
        path = folder / f"test_layercheck_{name}.py"
        folder.mkdir(parents=True, exist_ok=True)
        path.write_text(_TEMPLATE.format(
            target=run.target, label=label, text=shrunk["text"], layer=plan.layer,
            base_dir=str(Path(plan.base_dir).resolve()), inputs=inputs, call_kwargs=call_kwargs,
            values=shrunk["values"], name=name, selector=f"{result.check}:{result.variant}" if result.variant
            else result.check, args=list(plan.args), kwargs=dict(plan.kwargs), seed=shrunk.get("seed", 0)),
            encoding="utf-8")
        written.append(path)
    return written, said


def _literal(value: Any) -> bool:
    try:
        return bool(ast.literal_eval(repr(value)) == value)
    except (ValueError, SyntaxError):
        return False


def _slug(text: str) -> str:
    return re.sub(r"[^0-9a-zA-Z]+", "_", text).strip("_").lower()
