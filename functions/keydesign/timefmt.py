"""Timestamps: parsing, and the fixed-width UTC form that sorts as time.

Internally every instant is an integer number of milliseconds since the Unix
epoch (UTC). In keys it is written as ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (24
characters, always UTC, always milliseconds), so lexical order is time order.
Sub-millisecond digits of an RFC 3339 input are truncated (toward the past);
the event id keeps two readings in the same millisecond apart.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from functools import lru_cache

from .errors import InvalidInput

#: Earliest instant accepted in epoch milliseconds: 1970-01-01T00:00:00.000Z.
MIN_TS_MS = 0
#: Latest instant that still has a four-digit year: 9999-12-31T23:59:59.999Z.
MAX_TS_MS = 253_402_300_799_999
#: Epoch values below this (1973-03-03) are almost certainly seconds, not ms.
EPOCH_SECONDS_SUSPECT_BELOW = 100_000_000_000

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
# \Z, not $: $ also matches before a trailing newline. ASCII: \d would accept
# any Unicode digit (e.g. Arabic-Indic), which RFC 3339 does not.
_RFC3339 = re.compile(
    r"^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d{1,9}))?"
    r"(?:([Zz])|([+-])(\d{2}):(\d{2}))\Z",
    re.ASCII,
)
#: Epoch milliseconds as a user types them: ASCII digits only (str.isdigit would take '١٢٣' or '²'),
#: no sign, no spaces, and at most 16 of them (MAX_TS_MS has 15): a longer run is refused as text.
_TYPED_EPOCH_MS = re.compile(r"[0-9]{1,16}\Z")


def parse_timestamp(value: object, field: str = "timestamp") -> int:
    """Parse an RFC 3339 string or integer epoch milliseconds into epoch ms (UTC).

    Raises :class:`InvalidInput` naming ``field`` for anything else: other
    string forms, a missing offset, booleans, fractional or non-finite numbers,
    values that look like epoch seconds, and instants outside
    1970-01-01 .. 9999-12-31 UTC.
    """
    if isinstance(value, bool):
        raise InvalidInput(field, "must be an RFC 3339 string or epoch milliseconds, not a boolean")
    if isinstance(value, Decimal):  # a number a float or an int could not hold as decoded
        if not value.is_finite() or value != value.to_integral_value():
            raise InvalidInput(field, f"epoch milliseconds must be a whole number, got {shown_number(value)}")
        if not MIN_TS_MS <= value <= MAX_TS_MS:
            raise InvalidInput(field, _RANGE)
        value = int(value)
    if isinstance(value, float):
        if not math.isfinite(value) or not value.is_integer():
            raise InvalidInput(field, f"epoch milliseconds must be a whole number, got {value!r}")
        value = int(value)
    if isinstance(value, int):
        if 0 <= value < EPOCH_SECONDS_SUSPECT_BELOW:
            raise InvalidInput(
                field,
                f"{value} looks like epoch seconds; send epoch milliseconds or an RFC 3339 string",
            )
        return _check_range(value, field)
    if isinstance(value, str):
        return _parse_rfc3339(value, field)
    raise InvalidInput(field, f"must be an RFC 3339 string or epoch milliseconds, got {type(value).__name__}")


def parse_instant(text: str, field: str) -> int:
    """An instant a user typed (a query parameter, a command-line option): whole epoch milliseconds
    or an RFC 3339 date-time with offset, as epoch ms. Raises :class:`InvalidInput` naming ``field``
    for anything else, as :func:`parse_timestamp` does."""
    if _TYPED_EPOCH_MS.match(text):
        return parse_timestamp(int(text), field)
    return _parse_rfc3339(text, field)


def _parse_rfc3339(text: str, field: str) -> int:
    match = _RFC3339.match(text)
    if match is None:
        raise InvalidInput(
            field,
            f"{text[:64]!r} is not an RFC 3339 date-time with offset (e.g. 2026-11-22T06:57:51.123Z)",
        )
    year, month, day, hour, minute, second = (int(match.group(i)) for i in range(1, 7))
    fraction = (match.group(7) or "").ljust(3, "0")[:3]
    if second == 60:
        raise InvalidInput(field, "leap seconds (:60) are not supported")
    try:
        local = datetime(year, month, day, hour, minute, second, int(fraction) * 1000)
    except ValueError as exc:
        raise InvalidInput(field, f"{text!r} is not a real date-time ({exc})") from None
    if match.group(8):
        offset = timedelta(0)
    else:
        sign = 1 if match.group(9) == "+" else -1
        off_h, off_m = int(match.group(10)), int(match.group(11))
        if off_h > 23 or off_m > 59:
            raise InvalidInput(field, f"{text!r} has an impossible UTC offset")
        offset = sign * timedelta(hours=off_h, minutes=off_m)
    # Subtract the offset from the timedelta, not the datetime: 9999-12-31T23:30-01:00
    # would overflow datetime before the range check could refuse it.
    delta = local.replace(tzinfo=UTC) - _EPOCH - offset
    ms = (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
    return _check_range(ms, field)


_RANGE = "must lie between 1970-01-01T00:00:00Z and 9999-12-31T23:59:59.999Z"


def _check_range(ms: int, field: str) -> int:
    if ms < MIN_TS_MS or ms > MAX_TS_MS:
        raise InvalidInput(field, _RANGE)
    return ms


def shown_number(value: Decimal, limit: int = 40) -> str:
    """A number for an error message: its text, cut to ``limit`` characters with its length."""
    text = str(value)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


def format_ts(ms: int) -> str:
    """Format epoch ms as the 24-character sortable UTC form ``YYYY-MM-DDTHH:MM:SS.mmmZ``."""
    if ms < MIN_TS_MS or ms > MAX_TS_MS:
        raise ValueError(f"timestamp {ms} ms is outside the supported range")
    return f"{second_text(ms // 1000)}.{ms % 1000:03d}Z"


@lru_cache(maxsize=16_384)
def second_text(seconds: int) -> str:
    # Readings arrive clustered in time, so the same second is formatted again
    # and again; datetime formatting is most of the cost of building a key.
    return f"{_EPOCH + timedelta(seconds=seconds):%Y-%m-%dT%H:%M:%S}"


def stamp_ms(text: str) -> int:
    """Epoch ms of a fixed-width UTC time as :func:`format_ts` writes it; ``ValueError`` for anything
    else. Readers parse the first time in every block's sort key: this is the fast path for that form,
    remembered by the second (blocks come clustered in time)."""
    if len(text) != 24 or text[19] != "." or text[23] != "Z" or not text[20:23].isdigit():
        raise ValueError(f"{text[:40]!r} is not a fixed-width UTC time")
    return _second_ms(text[:19]) + int(text[20:23])


@lru_cache(maxsize=16_384)
def _second_ms(text: str) -> int:
    return _parse_rfc3339(f"{text}Z", "sk")


def to_datetime(ms: int) -> datetime:
    """Return the aware UTC datetime of epoch ms."""
    return _EPOCH + timedelta(milliseconds=ms)


def from_datetime(dt: datetime) -> int:
    """Return epoch ms of an aware datetime."""
    if dt.tzinfo is None:
        raise ValueError("naive datetimes are ambiguous; pass an aware datetime")
    delta = dt - _EPOCH
    return (delta.days * 86_400 + delta.seconds) * 1000 + delta.microseconds // 1000
