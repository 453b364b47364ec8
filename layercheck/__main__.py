"""``python -m layercheck`` works the same as ``layercheck``."""

from layercheck.cli import main

main()
