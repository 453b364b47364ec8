"""Sphinx configuration: MyST pages, and reference pages generated from the code at build time.

Built strictly by .ci/run: ``python -m sphinx -W --keep-going -b html docs docs/_build/html``.
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).parent
sys.path.insert(0, str(HERE / "_ext"))
sys.path.insert(0, str(HERE.parent))

from layercheck import __version__  # noqa: E402

project = "layercheck"
author = "the layercheck authors"
copyright = "2026, the layercheck authors"
version = release = __version__

extensions = ["myst_parser", "layercheck_docs"]
myst_enable_extensions = ["colon_fence"]
myst_heading_anchors = 3
source_suffix = {".md": "markdown"}
exclude_patterns = ["_build", "examples", "Thumbs.db", ".DS_Store"]
suppress_warnings: list[str] = []

html_theme = "alabaster"
html_title = f"layercheck {release}"
html_theme_options = {"description": "checkLayer for PyTorch, and better", "page_width": "1100px"}
