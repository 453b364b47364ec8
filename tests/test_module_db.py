"""``benchmarks/module_db.py`` on a handful of PyTorch's own modules: its output parses, and
none of them fails a check without a written reason (a new false alarm fails this test)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from conftest import ROOT

pytest.importorskip("expecttest")  # torch.testing._internal imports it
pytestmark = pytest.mark.slow  # importing module_db alone takes seconds

# A convolution, a normalisation with running statistics, a loss with integer targets, a
# recurrent layer (sequence-first), attention with masks (twice: MultiheadAttention had a false
# alarm of needs_input_grad on NaN gradients), and CTCLoss, whose exception is written.
MODULES = ["nn.Conv2d", "nn.BatchNorm2d", "nn.CrossEntropyLoss", "nn.GRU", "nn.TransformerEncoderLayer",
           "nn.MultiheadAttention", "nn.CTCLoss"]


def test_module_db_script_explains_every_failure() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "module_db.py"), "--modules", *MODULES,
                           "--samples", "2", "--json"], capture_output=True, text=True, cwd=ROOT, timeout=600)
    figures = json.loads(done.stdout)
    assert figures["modules"] == len(MODULES)
    assert figures["checked"] == 2 * len(MODULES), figures["checked"]
    assert figures["expressible"] + sum(map(len, figures["not_expressible"].values())) == figures["samples"]
    unexplained = [f"{f['sample']} {f['check']}: {f['message'][:300]}" for f in figures["failures"] if not f["reason"]]
    assert not unexplained, "\n".join(unexplained)
    assert done.returncode == 0, done.stderr[-2000:]
    # which samples come first depends on torch's version (2.11 puts BatchNorm2d without running
    # statistics, an explained exception, among them); these have no exception on any
    failing = {f["sample"].split("[")[0] for f in figures["failures"]}
    assert not failing & {"nn.Conv2d", "nn.CrossEntropyLoss", "nn.GRU", "nn.TransformerEncoderLayer"}, failing


def test_module_db_script_refuses_an_unknown_module() -> None:
    done = subprocess.run([sys.executable, str(ROOT / "benchmarks" / "module_db.py"), "--modules", "nn.NoSuchThing"],
                          capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert done.returncode == 2
    assert "nn.NoSuchThing" in done.stderr
