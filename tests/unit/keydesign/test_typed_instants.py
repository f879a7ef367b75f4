"""An instant a user typed (the API's ``from``/``to``, tsctl's ``--from``/``--start``): one parser,
whole epoch milliseconds in ASCII digits or RFC 3339 with offset."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import InvalidInput, format_ts
from keydesign.timefmt import EPOCH_SECONDS_SUSPECT_BELOW, MAX_TS_MS, MIN_TS_MS, parse_instant

from .strategies import PROPERTY

instants = st.integers(MIN_TS_MS, MAX_TS_MS)
#: Text near what a user types: digits (ASCII and not), signs, spaces, RFC 3339's punctuation.
typed = (
    st.text(st.sampled_from("0123456789\u0661\u00b2+-: .TZtz\n"), max_size=30)
    | st.text(st.sampled_from("123456789\u0661\u0662\u0663\u0664\u0665\u0666"), min_size=12, max_size=16)
    | st.text(max_size=40)
)


@PROPERTY
@given(ms=instants)
def test_a_typed_instant_round_trips_through_format_ts(ms: int) -> None:
    assert parse_instant(format_ts(ms), "from") == ms
    if ms >= EPOCH_SECONDS_SUSPECT_BELOW:
        assert parse_instant(str(ms), "from") == ms


@PROPERTY
@given(text=typed)
def test_any_text_is_an_instant_in_range_or_refused_naming_the_field(text: str) -> None:
    try:
        ms = parse_instant(text, "--from")
    except InvalidInput as exc:
        assert exc.field == "--from"
    else:
        assert MIN_TS_MS <= ms <= MAX_TS_MS
        assert text.isascii()


@pytest.mark.parametrize(
    ("text", "hint"),
    [
        ("\u0661\u0667\u0669\u0665" + "\u0660" * 9, "RFC 3339"),  # Arabic-Indic digits: str.isdigit says yes
        ("\u00b2", "RFC 3339"),
        ("+1795000000000", "RFC 3339"),
        ("-1795000000000", "RFC 3339"),
        (" 1795000000000", "RFC 3339"),
        ("1795000000000\n", "RFC 3339"),
        ("9" * 16, "must lie between"),
        ("9" * 17, "RFC 3339"),
        ("1" * 5000, "RFC 3339"),  # int() would refuse it past 4,300 digits with a message of its own
        ("1795000000", "epoch seconds"),
        ("", "RFC 3339"),
    ],
    ids=repr,
)
def test_typed_instants_that_are_not_ascii_epoch_ms_or_rfc3339_are_refused(text: str, hint: str) -> None:
    with pytest.raises(InvalidInput, match=hint) as caught:
        parse_instant(text, "to")
    assert caught.value.field == "to"
