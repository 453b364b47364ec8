"""Correct: the bundled SReLU (layers/srelu.py), whose forward calls an autograd.Function
with a hand-written backward, must pass every default check, export (non-strict export
traces through the Function's forward) and compile (TorchDynamo traces its forward and
backward). Loaded through layercheck's loader, which registers the file's module by name
as torch.compile needs."""

from pathlib import Path

from layercheck.target.loading import resolve

LAYER = resolve(f"{Path(__file__).resolve().parents[2] / 'layers' / 'srelu.py'}:SReLU")
LAYOUTS = ["4,3,5:BCU"]
ENABLE = ("export", "compile")
EXPECT_FAIL: set[str] = set()
