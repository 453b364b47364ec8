"""Reporters: one module per format, each reads a Report and nothing else.

Each module registers its format with :func:`reporter`; see :mod:`layercheck.reporting.registry`.
"""

from __future__ import annotations

from layercheck.reporting.registry import (
    ReporterInfo,
    catalogue,
    formats,
    get,
    render,
    reporter,
)

__all__ = ["ReporterInfo", "catalogue", "formats", "get", "render", "reporter"]
