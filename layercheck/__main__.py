"""``python -m layercheck`` works the same as ``layercheck``."""

from layercheck.launch import main

main()
