"""Every zoo layer against the whole default suite: broken layers are caught by exactly the
checks meant for them, correct layers pass everything (a false alarm fails this test too)."""

from __future__ import annotations

import pytest

from layercheck.parent.result import RunReport
from layercheck.target import subject

from conftest import failed_checks, load_zoo, run_zoo, zoo_names


@pytest.mark.parametrize("name", zoo_names())
def test_zoo_layer_is_judged_right(name: str) -> None:
    _assert_judged_right(name, run_zoo(name))


@pytest.mark.slow
@pytest.mark.parametrize("name", zoo_names())
def test_zoo_layer_is_judged_right_on_a_sample_of_its_batch(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The checks that run on a few observations at large sizes (any_batch) give every zoo
    layer the same verdicts when made to run on two of them at the zoo's small sizes."""
    monkeypatch.setattr(subject, "SAMPLE_ELEMENTS", 1)
    _assert_judged_right(name, run_zoo(name))


def _assert_judged_right(name: str, report: RunReport) -> None:
    expected = set(load_zoo(name).EXPECT_FAIL)
    assert report.error is None, report.error
    failed = failed_checks(report)
    details = "\n".join(
        f"  {r.check}[{r.variant}] {r.status.value}: {r.message}"
        for r in report.results if r.check in failed ^ expected
    )
    assert failed == expected, f"{name}: failed {sorted(failed)}, expected {sorted(expected)}\n{details}"
    notes = {r.check: " ".join(r.notes) for r in report.results if r.notes}
    wanted = dict(getattr(load_zoo(name), "EXPECT_NOTES", {}))
    assert set(notes) == set(wanted), f"{name}: notes from {sorted(notes)}, expected from {sorted(wanted)}: {notes}"
    for check, text in wanted.items():
        assert text in notes[check], f"{name}: {check} notes {notes[check]!r} lack {text!r}"


def test_zoo_has_broken_and_correct_layers() -> None:
    names = zoo_names()
    broken = [n for n in names if load_zoo(n).EXPECT_FAIL]
    good = [n for n in names if not load_zoo(n).EXPECT_FAIL]
    assert broken and good
