"""The reading: what producers send and what the table stores.

A reading is one JSON object::

    {"entity_id": "sensor-alpha-001",          # required
     "timestamp": "2026-11-22T06:57:51.123Z",  # required: RFC 3339 or epoch ms
     "event_id": "a1b2c3",                     # optional; derived when absent
     "measures": {"temp": 21.5, "rh": 40},     # required: 1..100 finite numbers
     "dimensions": {"site": "plant-7"}}        # optional: string values

Unknown top-level fields are refused (a typo such as ``mesures`` would
otherwise silently drop data). Every problem raises :class:`InvalidInput`
naming the field.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from .errors import InvalidInput
from .timefmt import format_ts, parse_timestamp

ENTITY_ID_MAX = 128
EVENT_ID_MAX = 128
MAX_MEASURES = 100
MAX_DIMENSIONS = 50
DIMENSION_VALUE_MAX = 256

# Printable ASCII that is safe inside a key and a URL path segment; '#' is the
# key separator and '~' is the sort-key range sentinel, so neither is allowed.
# \Z, not $: $ also matches before a trailing newline.
_ID_RE = re.compile(r"^[A-Za-z0-9._:@+=/-]+\Z")
_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,63}\Z")
_CONTROL_RE = re.compile(r"[\x00-\x1f\x7f]")
#: The same rules, for readers that check stored data against them (:mod:`keydesign.blocks`).
ID_PATTERN, NAME_PATTERN, CONTROL_CHARACTERS = _ID_RE, _NAME_RE, _CONTROL_RE
_ALLOWED_FIELDS = frozenset({"entity_id", "event_id", "timestamp", "measures", "dimensions"})

# DynamoDB numbers: 0, or a magnitude from 1E-130 to 9.9999999999999999999999999999999999999E+125 (38
# nines), at most 38 significant digits. A float is written as its shortest text (repr): 1e-130 is
# written "1e-130" (the float below it, "9.999999999999999e-131"), and every float below 1e126 is
# written with at most 17 digits, so at most 9.999999999999998e+125; 1e126 itself, which the text of
# 38 nines rounds to, is written "1e+126" and refused.
_DDB_MIN = 1e-130
_FLOAT_PAST_MAX = 1e126
_DDB_MAX_INT = 10**126 - 10**88
# The same bounds exactly, for numbers a float cannot hold (decoders hand those over as Decimal).
_DDB_MAX_EXACT = Decimal(_DDB_MAX_INT)
_DDB_MIN_EXACT = Decimal("1E-130")
_OUT_OF_RANGE = (
    "is outside the range DynamoDB can store: 0, or a magnitude from 1e-130 to 9.99e125 "
    "(a float is at most 9.999999999999998e125)"
)
_NOT_FINITE = "must be a finite number (NaN, infinity and literals past a double's range such as 1e400 are not)"
# DynamoDB keeps at most 38 significant digits; a longer integer fails the write.
_DDB_DIGITS = 38


def validate_entity_id(value: object, field_name: str = "entity_id") -> str:
    """Return ``value`` if it is a valid entity id, else raise :class:`InvalidInput`.

    Valid: a string of 1-128 characters from ``A-Z a-z 0-9 . _ : @ + = / -``.
    """
    return _validate_id(value, field_name, ENTITY_ID_MAX)


def validate_event_id(value: object, field_name: str = "event_id") -> str:
    """Return ``value`` if it is a valid event id (same rules as entity ids)."""
    return _validate_id(value, field_name, EVENT_ID_MAX)


def _validate_id(value: object, field_name: str, max_len: int) -> str:
    if not isinstance(value, str):
        raise InvalidInput(field_name, f"must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidInput(field_name, "must not be empty")
    if len(value) > max_len:
        raise InvalidInput(field_name, f"is {len(value)} characters long; the maximum is {max_len}")
    if _ID_RE.match(value) is None:
        if "#" in value:
            reason = "must not contain '#', the key separator"
        elif _CONTROL_RE.search(value):
            reason = "must not contain control characters"
        else:
            bad = next(ch for ch in value if _ID_RE.match(ch) is None)
            reason = f"contains {bad!r}; allowed are letters, digits and . _ : @ + = / -"
        raise InvalidInput(field_name, reason)
    return value


def _validate_number(value: object, field_name: str) -> int | float:
    if type(value) is float:  # the usual measure: one range check (NaN and infinities fail it)
        magnitude = abs(value)
        if magnitude < _FLOAT_PAST_MAX and (magnitude >= _DDB_MIN or magnitude == 0.0):
            return value
    if isinstance(value, bool) or not isinstance(value, int | float | Decimal):
        raise InvalidInput(field_name, f"must be a number, got {type(value).__name__}")
    if isinstance(value, Decimal):
        value = _exact_number(value, field_name)
    if isinstance(value, float):
        if not math.isfinite(value):
            raise InvalidInput(field_name, _NOT_FINITE)
        magnitude = abs(value)
        if magnitude >= _FLOAT_PAST_MAX or (magnitude != 0 and magnitude < _DDB_MIN):
            raise InvalidInput(field_name, _OUT_OF_RANGE)
        return value
    if abs(value) > _DDB_MAX_INT:
        raise InvalidInput(field_name, _OUT_OF_RANGE)
    if len(str(abs(value)).rstrip("0")) > _DDB_DIGITS:
        raise InvalidInput(field_name, f"has more than the {_DDB_DIGITS} significant digits DynamoDB can store")
    return value


def _exact_number(value: Decimal, field_name: str) -> int | float:
    """A Decimal checked against DynamoDB's range *before* it becomes an int or a float:
    ``1e-400`` would round to 0.0 and a 5,000-digit integer is too long for ``str(int)``."""
    if not value.is_finite():
        raise InvalidInput(field_name, _NOT_FINITE)
    magnitude = value.copy_abs()  # exact: abs() rounds to the context's 28 digits
    if magnitude > _DDB_MAX_EXACT or (magnitude != 0 and magnitude < _DDB_MIN_EXACT):
        raise InvalidInput(field_name, _OUT_OF_RANGE)
    return int(value) if value == value.to_integral_value() else float(value)


def shown_name(name: object, limit: int = 100) -> str:
    """``name`` as it may appear in a field path: control characters, lone surrogates and
    other unprintable characters escaped (``t\\x01``), cut at ``limit`` characters, so an
    error naming a bad field is itself safe to log, queue or return."""
    text = name if isinstance(name, str) else str(name)
    if text.isascii() and text.isprintable() and len(text) <= limit:
        return text
    shown = repr(text[:limit])[1:-1]
    return shown + "..." if len(text) > limit else shown


def _check_text(value: str, field_name: str) -> None:
    """Refuse a string a UTF-8 store cannot hold (a lone surrogate decoded from ``\\udc80``)."""
    if not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            raise InvalidInput(field_name, "is not valid Unicode text (it holds a lone surrogate)") from None


@dataclass(frozen=True, slots=True)
class Reading:
    """A validated reading. Build it with :meth:`parse`, not by hand."""

    entity_id: str
    event_id: str
    ts_ms: int
    measures: Mapping[str, int | float]
    dimensions: Mapping[str, str] = field(default_factory=dict)
    #: Set by :meth:`parse` when it derived the event id itself, so :attr:`derived_id` need not hash the
    #: content again (ingest encodes every reading it parses). Not an argument: a copy made with
    #: ``dataclasses.replace`` may hold other content, and starts unset.
    _derived: bool = field(default=False, init=False, repr=False, compare=False)

    @property
    def ts(self) -> str:
        """The fixed-width, sortable UTC timestamp."""
        return format_ts(self.ts_ms)

    @property
    def derived_id(self) -> bool:
        """Whether the event id is the one :func:`derive_event_id` gives this reading's content
        (the producer sent none): blocks do not store such an id, readers derive it again."""
        if self._derived:
            return True
        event_id = self.event_id
        return event_id.startswith("h-") and event_id == derive_event_id(
            self.entity_id, self.ts_ms, self.measures, self.dimensions
        )

    @classmethod
    def parse(
        cls,
        obj: object,
        *,
        now_ms: int | None = None,
        max_future_ms: int | None = None,
        max_age_ms: int | None = None,
    ) -> Reading:
        """Validate one decoded JSON object into a :class:`Reading`.

        ``now_ms`` with ``max_future_ms`` / ``max_age_ms`` bound how far from
        now the event time may lie (ingest sets them; other callers may not).
        Raises :class:`InvalidInput` naming the first bad field.
        """
        if not isinstance(obj, Mapping):
            raise InvalidInput("reading", f"must be a JSON object, got {type(obj).__name__}")
        unknown = [] if _ALLOWED_FIELDS.issuperset(obj) else sorted(set(obj) - _ALLOWED_FIELDS)
        if unknown:
            raise InvalidInput(
                shown_name(unknown[0]) or '""', f"is not a reading field; expected {', '.join(sorted(_ALLOWED_FIELDS))}"
            )
        if "entity_id" not in obj:
            raise InvalidInput("entity_id", "is required")
        entity_id = validate_entity_id(obj["entity_id"])
        if "timestamp" not in obj:
            raise InvalidInput("timestamp", "is required")
        ts_ms = parse_timestamp(obj["timestamp"])
        if now_ms is not None:
            if max_future_ms is not None and ts_ms > now_ms + max_future_ms:
                raise InvalidInput("timestamp", f"{format_ts(ts_ms)} is too far in the future")
            if max_age_ms is not None and ts_ms < now_ms - max_age_ms:
                raise InvalidInput("timestamp", f"{format_ts(ts_ms)} is older than the accepted age")
        measures = _parse_measures(obj.get("measures"))
        dimensions = _parse_dimensions(obj.get("dimensions", {}))
        if "event_id" in obj and obj["event_id"] is not None:
            return cls(entity_id, validate_event_id(obj["event_id"]), ts_ms, measures, dimensions)
        reading = cls(entity_id, derive_event_id(entity_id, ts_ms, measures, dimensions), ts_ms, measures, dimensions)
        object.__setattr__(reading, "_derived", True)
        return reading

    def to_json(self) -> dict[str, object]:
        """The reading as the JSON object a producer would send."""
        out: dict[str, object] = {
            "entity_id": self.entity_id,
            "event_id": self.event_id,
            "timestamp": self.ts,
            "measures": dict(self.measures),
        }
        if self.dimensions:
            out["dimensions"] = dict(self.dimensions)
        return out


def _parse_measures(raw: object) -> dict[str, int | float]:
    if raw is None:
        raise InvalidInput("measures", "is required: an object of at least one numeric measure")
    if not isinstance(raw, Mapping):
        raise InvalidInput("measures", f"must be an object of name to number, got {type(raw).__name__}")
    if not raw:
        raise InvalidInput("measures", "must hold at least one measure")
    if len(raw) > MAX_MEASURES:
        raise InvalidInput("measures", f"holds {len(raw)} measures; the maximum is {MAX_MEASURES}")
    out: dict[str, int | float] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or _NAME_RE.match(name) is None:
            raise InvalidInput(
                f"measures.{shown_name(name)}", "measure names are 1-64 letters, digits or _, not starting with a digit"
            )
        out[name] = _validate_number(value, f"measures.{name}")
    return out


def _parse_dimensions(raw: object) -> dict[str, str]:
    if raw is None:
        return {}
    if not isinstance(raw, Mapping):
        raise InvalidInput("dimensions", f"must be an object of name to string, got {type(raw).__name__}")
    if len(raw) > MAX_DIMENSIONS:
        raise InvalidInput("dimensions", f"holds {len(raw)} dimensions; the maximum is {MAX_DIMENSIONS}")
    out: dict[str, str] = {}
    for name, value in raw.items():
        if not isinstance(name, str) or _NAME_RE.match(name) is None:
            raise InvalidInput(
                f"dimensions.{shown_name(name)}",
                "dimension names are 1-64 letters, digits or _, not starting with a digit",
            )
        if not isinstance(value, str):
            raise InvalidInput(f"dimensions.{name}", f"must be a string, got {type(value).__name__}")
        if len(value) > DIMENSION_VALUE_MAX:
            raise InvalidInput(f"dimensions.{name}", f"is longer than {DIMENSION_VALUE_MAX} characters")
        if _CONTROL_RE.search(value):
            raise InvalidInput(f"dimensions.{name}", "must not contain control characters")
        _check_text(value, f"dimensions.{name}")
        out[name] = value
    return out


def derive_event_id(
    entity_id: str, ts_ms: int, measures: Mapping[str, int | float], dimensions: Mapping[str, str]
) -> str:
    """A deterministic event id for a reading sent without one.

    It hashes the reading's content, so a redelivered copy gets the same id
    and overwrites itself instead of being stored twice. Two genuinely
    different readings of one entity in the same millisecond with identical
    content are indistinguishable; producers that can send those should send
    their own event ids.

    The id is ``h-`` and the first 8 bytes of SHA-256 (hex) over the compact JSON
    text of ``[entity_id, ts_ms, sorted(measures.items()), sorted(dimensions.items())]``.
    Readers compute it again for every such reading they decode (blocks do not store
    it), so the text is written directly: entity ids and names need no JSON escaping
    (``_ID_RE``, ``_NAME_RE``), and ``repr`` of an int or a finite float is what
    ``json.dumps`` writes. A test holds it equal to ``json.dumps``.
    """
    number = _JSON_NUMBER.get
    values = ",".join([f'["{name}",{number(type(v), json.dumps)(v)}]' for name, v in sorted(measures.items())])
    labels = ",".join([f'["{name}",{json.dumps(v)}]' for name, v in sorted(dimensions.items())]) if dimensions else ""
    canonical = f'["{entity_id}",{ts_ms},[{values}],[{labels}]]'
    return f"h-{hashlib.sha256(canonical.encode()).digest()[:8].hex()}"


#: ``json.dumps`` of a measure: an int or a finite float, exactly (bool is not a measure).
_JSON_NUMBER: dict[type, Callable[[Any], str]] = {int: int.__repr__, float: float.__repr__}
