"""The cursor codec: round trips, and every way a cursor can be wrong is a CursorError naming ``cursor``."""

from __future__ import annotations

import base64
import hashlib
import hmac
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from query.cursor import MAX_CURSOR_CHARS, VERSION, CursorCodec, CursorError, binding
from query.merge import Position

KEY = b"k" * 40
BOUND = binding(route="entity_readings", entity="sensor-1", frm=0, to=10, order="asc", measures=None)
POSITION = Position("2026-11-22T06:57:51.123Z", "sensor-1#2026-11-22T06:57:51.123Z#evt-1")


def codec(key: bytes = KEY) -> CursorCodec:
    return CursorCodec(lambda: key)


def raw_bytes(token: str) -> bytes:
    return base64.urlsafe_b64decode(token + "=" * (-len(token) % 4))


def as_token(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def test_a_cursor_round_trips_to_the_same_position() -> None:
    token = codec().encode(BOUND, POSITION)

    assert codec().decode(token, BOUND) == POSITION


def test_a_cursor_is_opaque_url_safe_text() -> None:
    token = codec().encode(BOUND, POSITION)

    assert set(token) <= set("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_")
    assert raw_bytes(token)[0] == VERSION


def test_binding_depends_on_every_parameter() -> None:
    base = {"route": "r", "entity": "e", "frm": 1, "to": 2, "order": "asc", "measures": None}
    variants = [
        {**base, name: value}
        for name, value in [
            ("route", "r2"),
            ("entity", "e2"),
            ("frm", 0),
            ("to", 3),
            ("order", "desc"),
            ("measures", ["t"]),
        ]
    ]

    digests = {binding(**base), *(binding(**v) for v in variants)}

    assert len(digests) == 1 + len(variants)


@pytest.mark.parametrize("index", range(1, 60))
def test_flipping_any_byte_is_detected(index: int) -> None:
    # Given a valid cursor
    raw = bytearray(raw_bytes(codec().encode(BOUND, POSITION)))
    # When one byte after the version is altered
    raw[index] ^= 0x01
    # Then it is refused, never decoded into another position
    with pytest.raises(CursorError) as caught:
        codec().decode(as_token(bytes(raw)), BOUND)
    assert caught.value.field == "cursor"


def test_only_the_canonical_spelling_is_accepted() -> None:
    token = codec().encode(BOUND, POSITION)
    # Every other letter in the last place decodes to the same bytes or to others: none is accepted.
    for letter in "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_":
        if letter != token[-1]:
            with pytest.raises(CursorError):
                codec().decode(token[:-1] + letter, BOUND)


def test_every_truncation_is_refused() -> None:
    token = codec().encode(BOUND, POSITION)

    for length in range(len(token)):
        with pytest.raises(CursorError):
            codec().decode(token[:length] or "A", BOUND)


def test_a_cursor_for_another_query_is_refused_as_foreign() -> None:
    other = binding(route="entity_readings", entity="sensor-2", frm=0, to=10, order="asc", measures=None)
    token = codec().encode(other, POSITION)

    with pytest.raises(CursorError, match="different query"):
        codec().decode(token, BOUND)


def test_a_cursor_signed_with_another_key_is_refused() -> None:
    token = codec(b"x" * 40).encode(BOUND, POSITION)

    with pytest.raises(CursorError, match="altered"):
        codec().decode(token, BOUND)


def test_an_unknown_version_is_refused_with_the_version_named() -> None:
    raw = bytearray(raw_bytes(codec().encode(BOUND, POSITION)))
    raw[0] = 9

    with pytest.raises(CursorError, match="version 9"):
        codec().decode(as_token(bytes(raw)), BOUND)


@pytest.mark.parametrize(
    "token",
    ["", "!!!", "a b", "abc=", "Zm9v", "é", "A" * (MAX_CURSOR_CHARS + 1), "\x00", "null", "' OR 1=1 --"],
)
def test_garbage_is_refused(token: str) -> None:
    with pytest.raises(CursorError):
        codec().decode(token, BOUND)


def forge(payload: bytes, key: bytes = KEY) -> str:
    """A correctly signed cursor with an arbitrary payload: what a leaked key allows."""
    body = bytes([VERSION]) + BOUND + payload
    mac = hmac.new(key, b"timeseries-query-cursor" + body, hashlib.sha256).digest()
    return as_token(body[:1] + mac + body[1:])


@pytest.mark.parametrize(
    "payload",
    [
        b"not json",
        b"[]",
        b'{"a": "2026-11-22T06:57:51.123Z"}',
        b'{"a": 5, "s": "x"}',
        b'{"a": "2026-11-22T06:57:51Z", "s": "x"}',
        b'{"a": "2026-11-22T06:57:51.123Z", "s": "x", "extra": 1}',
        json.dumps({"a": "2026-11-22T06:57:51.123Z", "s": "x" * 600}).encode(),
        b"\xff\xfe",
    ],
)
def test_a_signed_but_malformed_position_is_still_a_400_not_a_crash(payload: bytes) -> None:
    with pytest.raises(CursorError, match="unreadable position"):
        codec().decode(forge(payload), BOUND)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=200))
def test_no_string_decodes_to_anything_but_a_position_or_a_cursor_error(token: str) -> None:
    try:
        position = codec().decode(token, BOUND)
    except CursorError:
        return
    assert isinstance(position, Position)  # pragma: no cover - a 2^-256 forgery


@settings(max_examples=200, deadline=None)
@given(st.binary(min_size=0, max_size=120))
def test_no_byte_string_decodes(raw: bytes) -> None:
    with pytest.raises(CursorError):
        codec().decode(as_token(bytes([VERSION]) + raw) if raw else "A", BOUND)
