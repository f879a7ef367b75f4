"""Reading validation: one error type naming the field; valid input normalised to UTC."""

from __future__ import annotations

import math
import re
from decimal import Decimal
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import InvalidInput, Reading, parse_timestamp
from keydesign.model import validate_event_id
from keydesign.timefmt import MAX_TS_MS
from local_runtime.moto_speedups import number_refusal

from .strategies import PROPERTY

VALID: dict[str, Any] = {
    "entity_id": "sensor-alpha-001",
    "timestamp": "2026-11-22T06:57:51.123Z",
    "event_id": "a1b2c3",
    "measures": {"temp": 21.5, "rh": 40},
    "dimensions": {"site": "plant-7"},
}


def parse_with(**changes: Any) -> Reading:
    raw = {**VALID, **changes}
    return Reading.parse({k: v for k, v in raw.items() if v is not _ABSENT})


class _Absent:
    """A field left out of the reading (its repr names the test case the same way in every run)."""

    def __repr__(self) -> str:
        return "absent"


_ABSENT = _Absent()


def assert_refused(field: str, **changes: Any) -> None:
    with pytest.raises(InvalidInput) as caught:
        parse_with(**changes)
    assert type(caught.value) is InvalidInput
    assert caught.value.field == field, caught.value


BAD_IDS = [
    "",
    "x" * 129,
    "a#b",
    "a\nb",
    "sensor-1\n",  # '$' in a regex would let a trailing newline through
    "a\x00b",
    "a\x7f",
    "a b",
    " sensor",
    'a"b',
    "a'b",
    "a~b",
    "a\\b",
    "sénsor",
    "傳感器",
    "sensor\u200b",
    None,
    42,
    True,
    ["sensor"],
]


@pytest.mark.parametrize("bad", BAD_IDS, ids=repr)
def test_bad_entity_ids_are_refused(bad: object) -> None:
    if bad is None:
        assert_refused("entity_id", entity_id=_ABSENT)
    assert_refused("entity_id", entity_id=bad)


@pytest.mark.parametrize("bad", [b for b in BAD_IDS if b is not None], ids=repr)
def test_bad_event_ids_are_refused(bad: object) -> None:
    assert_refused("event_id", event_id=bad)


def test_ids_accept_every_allowed_character_up_to_the_limit() -> None:
    allowed = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@+=/-"
    reading = parse_with(entity_id=allowed, event_id="e" * 128)
    assert reading.entity_id == allowed
    assert reading.event_id == "e" * 128


BAD_TIMESTAMPS = [
    "",
    "garbage",
    "yesterday",
    "2026-11-22",
    "2026-11-22T06:57:51",
    "2026-11-22T06:57:51.123",
    "2026-11-22T06:57Z",
    "2026-11-22T06:57:51+0100",
    "2026-11-22T06:57:51+01",
    "2026-11-22T06:57:51+24:00",
    "2026-11-22T06:57:51+01:60",
    "2026-11-22T06:57:51.1234567890Z",
    "2026-11-22T06:57:51.Z",
    "2016-12-31T23:59:60Z",
    "2026-02-30T00:00:00Z",
    "2026-13-01T00:00:00Z",
    "2026-11-22T24:00:00Z",
    "2026-11-22T06:61:00Z",
    "26-11-22T06:57:51Z",
    "10000-01-01T00:00:00Z",
    "0000-01-01T00:00:00Z",
    "1969-12-31T23:59:59.999Z",
    "1970-01-01T00:30:00+01:00",
    "9999-12-31T23:30:00-01:00",  # past the range only after the offset: must not overflow datetime
    "0001-01-01T00:30:00+01:00",
    " 2026-11-22T06:57:51Z",
    "2026-11-22T06:57:51Z\n",
    "\u0662\u0660\u0662\u0666-11-22T06:57:51Z",  # Arabic-Indic digits
    "2026-11-22T06:57:51Z garbage",
    1_700_000_000,
    1_700_000_000.0,
    99_999_999_999,
    0,
    -1,
    -1_700_000_000_000,
    MAX_TS_MS + 1,
    10**20,
    True,
    False,
    float("nan"),
    float("inf"),
    float("-inf"),
    1_795_330_671_123.5,
    None,
    [2026, 11, 22],
    {"iso": "2026-11-22T06:57:51Z"},
    Decimal("1795330671123.5"),
    Decimal("9" * 5000),  # past Python's int-from-text limit: decoders hand it over as Decimal
    Decimal("NaN"),
    b"2026-11-22T06:57:51Z",
]


@pytest.mark.parametrize("bad", BAD_TIMESTAMPS, ids=repr)
def test_bad_timestamps_are_refused(bad: object) -> None:
    assert_refused("timestamp", timestamp=bad)


def test_a_missing_timestamp_is_refused() -> None:
    assert_refused("timestamp", timestamp=_ABSENT)


@pytest.mark.parametrize(
    ("given_ts", "stored"),
    [
        ("2026-11-22T07:57:51.123456+01:00", "2026-11-22T06:57:51.123Z"),  # offset applied, sub-ms truncated
        ("2026-11-22T06:57:51Z", "2026-11-22T06:57:51.000Z"),
        ("2026-11-22t06:57:51.5z", "2026-11-22T06:57:51.500Z"),
        ("2026-11-22 06:57:51.12+00:00", "2026-11-22T06:57:51.120Z"),
        ("2026-11-21T22:57:51.123-08:00", "2026-11-22T06:57:51.123Z"),  # across midnight
        ("2026-11-22T06:57:51.9999999-00:30", "2026-11-22T07:27:51.999Z"),  # truncated toward the past
        ("2027-01-01T00:30:00+01:00", "2026-12-31T23:30:00.000Z"),  # across a year end
        ("1970-01-01T00:00:00Z", "1970-01-01T00:00:00.000Z"),
        ("9999-12-31T23:59:59.999Z", "9999-12-31T23:59:59.999Z"),
        (1_795_330_671_123, "2026-11-22T06:57:51.123Z"),  # epoch milliseconds
        (1_795_330_671_123.0, "2026-11-22T06:57:51.123Z"),
        (Decimal("1795330671123"), "2026-11-22T06:57:51.123Z"),
        (100_000_000_000, "1973-03-03T09:46:40.000Z"),  # the smallest value taken as ms
        (MAX_TS_MS, "9999-12-31T23:59:59.999Z"),
    ],
)
def test_valid_timestamps_are_normalised_to_utc_milliseconds(given_ts: object, stored: str) -> None:
    reading = parse_with(timestamp=given_ts)
    assert reading.ts == stored
    assert reading.to_json()["timestamp"] == stored


@pytest.mark.parametrize(
    ("measures", "field"),
    [
        (_ABSENT, "measures"),
        (None, "measures"),
        ({}, "measures"),
        ([21.5], "measures"),
        ("21.5", "measures"),
        ({f"m{i}": i for i in range(101)}, "measures"),
        ({"temp": "21.5"}, "measures.temp"),
        ({"temp": True}, "measures.temp"),
        ({"temp": False}, "measures.temp"),
        ({"temp": None}, "measures.temp"),
        ({"temp": float("nan")}, "measures.temp"),
        ({"temp": float("inf")}, "measures.temp"),
        ({"temp": float("-inf")}, "measures.temp"),
        ({"temp": [21.5]}, "measures.temp"),
        ({"temp": {"value": 21.5}}, "measures.temp"),
        ({"temp": Decimal("NaN")}, "measures.temp"),
        ({"temp": Decimal("Infinity")}, "measures.temp"),
        ({"temp": 1e200}, "measures.temp"),
        ({"temp": -1e200}, "measures.temp"),
        ({"temp": 1e-200}, "measures.temp"),
        ({"temp": 10**126}, "measures.temp"),
        ({"temp": Decimal("1E+126")}, "measures.temp"),
        ({"temp": 10**40 + 1}, "measures.temp"),  # 41 significant digits: DynamoDB keeps 38
        ({"ok": 1, "1temp": 2}, "measures.1temp"),
        ({"te mp": 1}, "measures.te mp"),
        ({"temp\n": 1}, "measures.temp\\n"),  # shown escaped: the field goes into logs and queues
        ({"tëmp": 1}, "measures.tëmp"),
        ({"": 1}, "measures."),
        ({"t" * 65: 1}, "measures." + "t" * 65),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_bad_measures_are_refused_naming_the_measure(measures: object, field: str) -> None:
    assert_refused(field, measures=measures)


def test_measures_accept_dynamodb_numbers_at_their_limits() -> None:
    measures = {
        "temp": 21.5,
        "rh": 40,
        "neg": -3,
        "zero": 0,
        "tiny": 1e-130,
        "huge": 9.99e125,
        "digits": 10**37 + 1,  # 38 significant digits
        "round": 10**120,  # one significant digit
        "dec": Decimal("2.5"),
        "whole": Decimal("7"),
    }
    reading = parse_with(measures=measures)
    assert reading.measures == {**measures, "dec": 2.5, "whole": 7}
    assert parse_with(measures={f"m{i}": i for i in range(100)}).measures["m99"] == 99


@pytest.mark.parametrize(
    ("dimensions", "field"),
    [
        ("plant-7", "dimensions"),
        (["plant-7"], "dimensions"),
        ({f"d{i}": "x" for i in range(51)}, "dimensions"),
        ({"site": 7}, "dimensions.site"),
        ({"site": None}, "dimensions.site"),
        ({"site": ["plant-7"]}, "dimensions.site"),
        ({"site": "x" * 257}, "dimensions.site"),
        ({"site": "plant\x007"}, "dimensions.site"),
        ({"site": "plant-7\n"}, "dimensions.site"),
        ({"1site": "x"}, "dimensions.1site"),
        ({"site\n": "x"}, "dimensions.site\\n"),
        ({"si-te": "x"}, "dimensions.si-te"),
    ],
    ids=lambda v: repr(v)[:40],
)
def test_bad_dimensions_are_refused_naming_the_dimension(dimensions: object, field: str) -> None:
    assert_refused(field, dimensions=dimensions)


def test_dimensions_are_optional_and_take_any_printable_text() -> None:
    assert parse_with(dimensions=_ABSENT).dimensions == {}
    assert parse_with(dimensions=None).dimensions == {}
    assert parse_with(dimensions={"city": "Zürich #7", "empty": ""}).dimensions == {"city": "Zürich #7", "empty": ""}


@pytest.mark.parametrize(
    ("raw", "field"),
    [
        ({**VALID, "mesures": {"temp": 1}}, "mesures"),
        ({**VALID, "ts": "2026-11-22T06:57:51Z"}, "ts"),
        ({**VALID, "ttl": 1}, "ttl"),
        ("not an object", "reading"),
        (None, "reading"),
        ([VALID], "reading"),
    ],
)
def test_unknown_fields_and_non_objects_are_refused(raw: object, field: str) -> None:
    with pytest.raises(InvalidInput) as caught:
        Reading.parse(raw)
    assert caught.value.field == field


def test_readings_outside_the_accepted_window_are_refused_when_asked() -> None:
    now = parse_timestamp("2026-11-22T07:00:00Z")
    window = {"now_ms": now, "max_future_ms": 60_000, "max_age_ms": 86_400_000}
    ok = Reading.parse({**VALID, "timestamp": now + 60_000}, **window)
    assert ok.ts_ms == now + 60_000
    assert Reading.parse({**VALID, "timestamp": now - 86_400_000}, **window).ts_ms == now - 86_400_000
    for ts in (now + 60_001, now - 86_400_001):
        with pytest.raises(InvalidInput) as caught:
            Reading.parse({**VALID, "timestamp": ts}, **window)
        assert caught.value.field == "timestamp"


# -- derived event ids ------------------------------------------------------------------


def test_a_reading_without_event_id_gets_a_deterministic_content_id() -> None:
    first = parse_with(event_id=_ABSENT)
    again = parse_with(event_id=None, measures={"rh": 40, "temp": 21.5})  # same content, other order
    assert first.event_id == again.event_id
    assert re.fullmatch(r"h-[0-9a-f]{16}", first.event_id)
    assert validate_event_id(first.event_id) == first.event_id
    changed = [
        parse_with(event_id=_ABSENT, entity_id="sensor-alpha-002"),
        parse_with(event_id=_ABSENT, timestamp="2026-11-22T06:57:51.124Z"),
        parse_with(event_id=_ABSENT, measures={"temp": 21.6, "rh": 40}),
        parse_with(event_id=_ABSENT, measures={"temp": 21.5}),
        parse_with(event_id=_ABSENT, measures={"temp": 21.5, "rh": 40, "co2": 400}),
        parse_with(event_id=_ABSENT, dimensions={"site": "plant-8"}),
        parse_with(event_id=_ABSENT, dimensions=_ABSENT),
    ]
    ids = {first.event_id, *(r.event_id for r in changed)}
    assert len(ids) == 1 + len(changed)


@PROPERTY
@given(
    measures=st.dictionaries(
        st.from_regex(r"[a-z_][a-z0-9_]{0,10}", fullmatch=True),
        st.one_of(
            st.integers(-(10**12), 10**12),
            st.floats(-1e9, 1e9, allow_nan=False).filter(lambda x: x == 0 or abs(x) > 1e-100),
        ),
        min_size=1,
        max_size=8,
    ),
    ts=st.integers(parse_timestamp("2020-01-01T00:00:00Z"), parse_timestamp("2030-01-01T00:00:00Z")),
)
def test_derived_ids_depend_on_content_not_on_key_order_and_round_trip(measures: dict[str, float], ts: int) -> None:
    raw = {"entity_id": "sensor-a", "timestamp": ts, "measures": measures}
    reversed_raw = {**raw, "measures": dict(reversed(list(measures.items())))}
    reading = Reading.parse(raw)
    assert Reading.parse(reversed_raw).event_id == reading.event_id
    # The reading a producer would send back parses to the same reading.
    assert Reading.parse(reading.to_json()) == reading


_NINES = "9.9999999999999999999999999999999999999"  # 38 significant digits: DynamoDB's largest mantissa
#: Each edge of DynamoDB's numbers, as the value a reading holds, and whether DynamoDB stores its text.
_EDGES = [
    (1e-130, True),  # written "1e-130", the smallest magnitude
    (math.nextafter(1e-130, 0.0), False),  # written "9.999999999999999e-131"
    (math.nextafter(1e126, 0.0), True),  # written "9.999999999999998e+125", the largest float
    (1e126, False),  # what the text of 38 nines e125 rounds to as a double: written "1e+126"
    (float(f"{_NINES}e125"), False),
    (10**126 - 10**88, True),  # 38 nines then 88 zeros: the largest number, exactly
    (10**126, False),
    (10**126 - 10**87, False),  # below the largest, but 39 significant digits
    (10**38 - 1, True),
    (10**38 + 1, False),
    (Decimal(f"{_NINES}E+125"), True),
    (Decimal(f"{_NINES}E-131"), False),  # past 28 digits: abs() would round it up to 1E-130
    (Decimal("1E-130"), True),
]


@pytest.mark.parametrize(("value", "stored"), _EDGES, ids=lambda v: repr(v)[:30])
@pytest.mark.parametrize("sign", [1, -1])
def test_measures_follow_dynamodb_number_rules_at_both_edges(value: Any, stored: bool, sign: int) -> None:
    # Given a measure at an edge of DynamoDB's numbers, positive or negative
    signed = value if sign > 0 else value.copy_negate() if isinstance(value, Decimal) else -value
    # Then ingest keeps it exactly when DynamoDB stores the text it is written as, and refuses it otherwise
    written = repr(signed) if isinstance(signed, float) else str(signed)
    assert (number_refusal(written) is None) == stored
    if stored:
        held = parse_with(measures={"m": signed}).measures["m"]
        if isinstance(signed, Decimal):  # an integral Decimal is held as an int, any other as a float
            signed = int(signed) if signed == signed.to_integral_value() else float(signed)
        assert held == signed
    else:
        assert_refused("measures.m", measures={"m": signed})
