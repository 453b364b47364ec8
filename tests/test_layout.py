from __future__ import annotations

import pytest

from layercheck import Layout, LayoutError


def test_parse_gives_sizes_and_format_in_written_order() -> None:
    layout = Layout.parse("24,24,20,128:SSCB")
    assert layout.size == (24, 24, 20, 128)
    assert layout.format == "SSCB"
    assert str(layout) == "24,24,20,128:SSCB"
    assert layout == Layout(size=(24, 24, 20, 128), format="SSCB")


def test_finddim_returns_every_position_of_a_label() -> None:
    layout = Layout.parse("128,20,24,24:BCSS")
    assert layout.finddim("S") == (2, 3)
    assert layout.finddim("C") == (1,)
    assert layout.finddim("T") == ()
    assert layout.batch_dim == 0


def test_lowercase_labels_and_spaces_are_accepted() -> None:
    assert Layout.parse(" 4, 3 :bc") == Layout(size=(4, 3), format="BC")


def test_with_size_resizes_one_labelled_dimension() -> None:
    assert Layout.parse("8,3,5:BCU").with_size("B", 1) == Layout.parse("1,3,5:BCU")


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("24,24:SSCB", '"24,24:SSCB": 2 sizes but 4 labels'),
        ("24,x,20:SSC", 'size "x" is not an integer'),
        ("24,2.5:SC", 'size "2.5" is not an integer'),
        ("24,0,3:SSC", "size 0 must be a positive integer"),
        ("24,-3,3:SSC", "size -3 must be a positive integer"),
        ("24,24,3:SSX", 'unknown label "X"'),
        ("3,4,5:CCB", "2 C labels, at most one allowed"),
        ("3,4,5:BSB", "2 B labels, at most one allowed"),
        ("3,4,5", "expected SIZES:FORMAT"),
        (":", "a layout needs at least one dimension"),
    ],
)
def test_invalid_layouts_say_what_is_wrong_with_which_part(text: str, message: str) -> None:
    with pytest.raises(LayoutError, match=None) as info:
        Layout.parse(text)
    assert message in str(info.value)


def test_constructor_validates_too() -> None:
    with pytest.raises(LayoutError, match="at most one"):
        Layout(size=(2, 3), format="TT")
    with pytest.raises(LayoutError, match="not an integer"):
        Layout(size=(2, "3"), format="BC")  # type: ignore[arg-type]
