"""The version, in a module of its own: the package's modules read it from here, never from the
package root (which imports them), and the build reads it too (pyproject.toml)."""

__version__ = "0.1.0"
