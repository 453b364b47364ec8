"""The buggy twins' one helper: a fresh copy of a correct layer's module, with the constants
that switch its bug on changed (the kernels read them at launch)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any


def with_bug(file: str, **constants: Any) -> ModuleType:
    """The module in ``file`` (beside this one), imported afresh under a name of its own."""
    path = Path(__file__).with_name(file)
    spec = importlib.util.spec_from_file_location(f"layercheck_gpu_{path.stem}_bug_base", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for name, value in constants.items():
        setattr(module, name, value)
    return module
