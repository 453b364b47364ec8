"""Reporters: one module per format, each reads a Report and nothing else."""

from __future__ import annotations

from collections.abc import Callable

from layercheck.result import Report

Renderer = Callable[[Report], str]

_FORMATS: dict[str, str] = {
    "table": "layercheck.reporting.console:render_text",
    "json": "layercheck.reporting.json:render",
    "junit": "layercheck.reporting.junit:render",
    "markdown": "layercheck.reporting.markdown:render",
}


def register_format(name: str, path: str) -> None:
    """Make ``--format name`` render with the function at ``module:function``."""
    _FORMATS[name] = path


def formats() -> list[str]:
    return list(_FORMATS)


def render(report: Report, fmt: str) -> str:
    """The report as text in format ``fmt``."""
    import importlib

    if fmt not in _FORMATS:
        raise ValueError(f"unknown report format {fmt!r}; choose from {', '.join(_FORMATS)}")
    module, _, name = _FORMATS[fmt].partition(":")
    renderer: Renderer = getattr(importlib.import_module(module), name)
    return renderer(report)
