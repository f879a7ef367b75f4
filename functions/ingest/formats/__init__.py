"""The agents' formats ingest reads beside its own JSON: what a record is, and its metrics as readings.

Telegraf (``outputs.kinesis``) writes Influx line protocol or its JSON serializer's
metrics; the OpenTelemetry Collector (``awskinesisexporter``) writes an OTLP
``ExportMetricsServiceRequest``, protobuf or JSON, optionally compressed whole.
docs/ingest.md ("Agents") has the rules with examples; in short:

**What a record is** (:func:`sniff`, after KPL de-aggregation), the first that fits:

1. it starts with ``{`` or ``[`` (today's records): JSON. An object with
   ``resourceMetrics`` is OTLP JSON; one with ``name`` and ``fields`` (and no
   ``entity_id``) a Telegraf JSON metric; one with a ``metrics`` array (and no
   ``entity_id``) a Telegraf JSON batch; anything else ingest's own reading(s);
2. it starts with byte 0x0A and reads completely as an OTLP request: OTLP protobuf;
3. it is UTF-8 text: JSON if its first non-blank character is ``{`` or ``[``,
   else line protocol (unless no line of it is line protocol: then it is rejected
   as neither);
4. it is binary: gzip (``1F 8B``), zlib (a valid two-byte header) or raw deflate
   (flate) that inflates completely, to at most :data:`MAX_INFLATION` times its size
   and :data:`MAX_INFLATED` bytes, is
   read as its inflated bytes by steps 1 to 3 (never inflated twice). Complete:
   the stream ends there (and its checksum holds), or it ends on a flush
   (:data:`SYNC_FLUSH`), as the Collector's exporter writes it; a UTF-16
   or UTF-32 JSON text is JSON, as before; anything else is rejected.

Only the formats a deployment enables (``ingest_formats``) are read; a record of
another is rejected saying which format it is and that it is not enabled.

**Metrics as readings** (:func:`reading`): the entity is the first of
``entity_tags`` present among a metric's tags (attributes); the other tags are
dimensions; the values are measures; names are made storable (:func:`storable`);
timestamps are cut to the millisecond (floor).
"""

from __future__ import annotations

import json
import math
import re
import zlib
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from functools import lru_cache
from typing import Literal

from keydesign.model import NAME_PATTERN

INFLUX = "influx"
TELEGRAF_JSON = "telegraf_json"
OTLP_PROTO = "otlp_proto"
OTLP_JSON = "otlp_json"
#: The agents' formats a deployment can enable (``ingest_formats``), all by default.
AGENT_FORMATS = (INFLUX, TELEGRAF_JSON, OTLP_PROTO, OTLP_JSON)
#: What each is called in a reason.
FORMAT_NAMES = {
    INFLUX: "Influx line protocol",
    TELEGRAF_JSON: "Telegraf JSON",
    OTLP_PROTO: "OTLP protobuf",
    OTLP_JSON: "OTLP JSON",
}
#: Nanoseconds per unit of a line-protocol timestamp (``influx_precision``).
INFLUX_PRECISIONS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}
#: Nanoseconds per unit of a Telegraf JSON timestamp (``telegraf_json_timestamp_units``, as Telegraf names them).
TELEGRAF_JSON_UNITS = {
    "1ns": 1,
    "10ns": 10,
    "100ns": 100,
    "1us": 1_000,
    "10us": 10_000,
    "100us": 100_000,
    "1ms": 1_000_000,
    "10ms": 10_000_000,
    "100ms": 100_000_000,
    "1s": 1_000_000_000,
}
#: The most a compressed record may inflate to: 8 times Kinesis' 1 MiB record. A larger one is rejected,
#: so a small record cannot cost the function its memory (a 1 MiB gzip of zeros inflates to 1 GiB).
MAX_INFLATED = 8 * 1024 * 1024
#: ... and at most this many times its own size. The Collector's records inflate 2 to 3 times (protobuf) and
#: about 8 times (OTLP/JSON), measured; a bomb inflates a thousand times. With it, a batch (at most 6 MB of
#: event) can make at most about 66 MB to read, where a batch of plain records holds at most 4 MB.
MAX_INFLATION = 16
NS_PER_MS = 1_000_000
#: How a deflate stream flushed, not closed, ends (an empty stored block): what the Collector's exporter writes.
#: Its compressor (Go's compress/flate, gzip, zlib) is flushed after each record, never closed, so a record has
#: no final block and, with gzip or zlib, no checksum trailer.
SYNC_FLUSH = b"\x00\x00\xff\xff"

_NOT_A_NAME_CHARACTER = re.compile(r"[^A-Za-z0-9_]")


@dataclass(frozen=True, slots=True)
class Formats:
    """Which agents' formats a deployment reads and how their metrics become readings (``IngestSettings.formats``)."""

    enabled: frozenset[str] = frozenset(AGENT_FORMATS)
    entity_tags: tuple[str, ...] = ("host", "service.instance.id")
    influx_unit_ns: int = 1
    telegraf_json_unit_ns: int = 1_000_000_000

    def describe(self) -> str:
        return ", ".join(f for f in AGENT_FORMATS if f in self.enabled) or "none"


@dataclass(slots=True)
class Part:
    """One part of an agent's record: a line, a Telegraf metric, an OTLP data point.

    ``value`` is the reading it maps to (a dict ``keydesign.Reading.parse`` takes) or, when it maps
    to none, what was read of it; then ``error`` is (field, reason). ``where`` names the part in a
    reason (``line 3``); ``raw`` is its own text when it has some (a line), which its reject carries."""

    value: object
    where: str
    raw: str | None = None
    error: tuple[str, str] | None = None


Kind = Literal["json", "influx", "otlp_proto", "reject"]


@dataclass(slots=True)
class Sniffed:
    """What :func:`sniff` made of a user record: its kind, the bytes to read (inflated when it was
    compressed), and for a reject, why; ``text`` when it was decoded already."""

    kind: Kind
    data: bytes
    reason: str = ""
    text: str | None = None
    otlp: object = field(default=None)


def sniff(data: bytes, formats: Formats) -> Sniffed:
    """What kind of record ``data`` is (the module docstring's steps); JSON is read by the caller."""
    head = data[:1]
    if head in (b"{", b"["):
        return Sniffed("json", data)
    found = _uncompressed(data, formats)
    if found is not None:
        return found
    for compression, wbits in _compressions(data):
        inflated = _inflate(data, wbits)
        if isinstance(inflated, str):  # it is this compression, and it does not inflate
            if compression == "gzip":
                return Sniffed("reject", data, f"is gzip that does not decompress: {inflated}")
            continue
        if inflated is None:
            limit = f"{MAX_INFLATION} times its size, {_limit(data):,} bytes"
            return Sniffed("reject", data, f"is {compression} that inflates past {limit} (a compression bomb?)")
        inner = Sniffed("json", inflated) if inflated[:1] in (b"{", b"[") else _uncompressed(inflated, formats)
        if inner is not None:
            return inner
        reason = f"is {compression}-compressed, and what it inflates to is no format ingest reads"
        return Sniffed("reject", data, reason)
    if data[:1] == b"\xef\xbb\xbf" or not data or json.detect_encoding(data) != "utf-8":
        return Sniffed("json", data)  # UTF-16/32 JSON (and a BOM, and nothing): the JSON reader says what it is
    return Sniffed(
        "reject",
        data,
        "is not UTF-8 text (JSON or line protocol), nor OTLP protobuf, nor a gzip, zlib or flate-compressed record",
    )


def _uncompressed(data: bytes, formats: Formats) -> Sniffed | None:
    """Steps 2 and 3: OTLP protobuf, or UTF-8 text (JSON or line protocol); None for other binary."""
    if data[:1] == b"\n" and OTLP_PROTO in formats.enabled:
        from ingest.formats import otlp  # noqa: PLC0415 - only OTLP records need it

        try:
            request = otlp.read_proto(data)
        except ValueError:
            pass  # not a request: text with a leading blank line, or binary
        else:
            return Sniffed("otlp_proto", data, otlp=request)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    stripped = text.lstrip(" \t\r\n")
    if stripped[:1] in ("{", "[") or not stripped or INFLUX not in formats.enabled:
        return Sniffed("json", data, text=text)
    return Sniffed("influx", data, text=text)


def _compressions(data: bytes) -> Iterable[tuple[str, int]]:
    if data[:2] == b"\x1f\x8b":
        yield "gzip", 31
        return
    header = len(data) >= 2 and data[0] & 0x0F == 8 and data[0] >> 4 <= 7 and not data[1] & 0x20
    if header and (data[0] << 8 | data[1]) % 31 == 0:
        yield "zlib", 15
    yield "flate", -15


def _limit(data: bytes) -> int:
    return min(MAX_INFLATED, MAX_INFLATION * len(data))


def _inflate(data: bytes, wbits: int) -> bytes | str | None:
    """``data`` inflated; the error's text when it is not one complete stream; None when it inflates too far."""
    inflater = zlib.decompressobj(wbits)
    try:
        out = inflater.decompress(data, _limit(data) + 1)
    except zlib.error as exc:
        return str(exc)
    if len(out) > _limit(data):
        return None
    if inflater.eof:
        if inflater.unused_data:
            return f"{len(inflater.unused_data)} bytes follow the compressed stream"
        return out
    if data.endswith(SYNC_FLUSH):  # the Collector's exporter flushes its compressor, never closes it
        return out
    return "the compressed stream is truncated (it neither ends nor ends on a flush)"


def json_kind(value: Mapping[str, object]) -> str | None:
    """The agent format a decoded JSON object is in, None for ingest's own reading."""
    if "entity_id" in value:
        return None
    if "resourceMetrics" in value:
        return OTLP_JSON
    if ("fields" in value and "name" in value) or isinstance(value.get("metrics"), list):
        return TELEGRAF_JSON
    return None


def not_enabled(kind: str, formats: Formats) -> str:
    return f"is {FORMAT_NAMES[kind]}, a format this deployment does not read (ingest_formats: {formats.describe()})"


# -- metrics as readings ----------------------------------------------------------------------


@lru_cache(maxsize=4096)  # names repeat from reading to reading; a bounded cache of their storable forms
def storable(name: str) -> str:
    """A measure or dimension name as a reading may hold it: every character other than a letter, digit or ``_``
    becomes ``_`` (``system.cpu.time`` -> ``system_cpu_time``), and a leading digit gets a ``_`` before it.
    Names longer than 64 characters are left so: validation rejects them, naming them."""
    if NAME_PATTERN.match(name) is not None:
        return name
    name = _NOT_A_NAME_CHARACTER.sub("_", name)
    return f"_{name}" if name[:1].isdigit() else name


def reading(
    tags: Mapping[str, str],
    measures: Mapping[str, object],
    ts_ms: int,
    formats: Formats,
    *,
    strings: Mapping[str, str] | None = None,
    what: str = "tag",
) -> dict[str, object] | tuple[str, str]:
    """The reading of one metric: the entity from ``tags`` (the first of ``formats.entity_tags``), the other
    tags and ``strings`` (string fields) as dimensions, ``measures`` (storable names already) as they are;
    (field, reason) when it has no entity or two of its names become one."""
    entity = None
    for tag in formats.entity_tags:
        entity = tags.get(tag)
        if entity is not None:
            break
    else:
        names = ", ".join(formats.entity_tags)
        return "entity_id", f"no {what} names the entity: none of {names} (entity_tags) is present"
    dimensions: dict[str, str] = {}
    sources: dict[str, str] = {}
    for source, value in (*tags.items(), *(strings or {}).items()):
        if source == tag:
            continue
        name = storable(source)
        if name in dimensions:
            return f"dimensions.{name}", f"{what}s {sources[name]!r} and {source!r} are both stored as {name!r}"
        if name in measures:
            return f"dimensions.{name}", f"{what} {source!r} and a measure are both named {name!r}"
        dimensions[name] = value
        sources[name] = source
    out: dict[str, object] = {"entity_id": entity, "timestamp": ts_ms, "measures": measures}
    if dimensions:
        out["dimensions"] = dimensions
    return out


def exact_float(text: str) -> float | Decimal:
    """A float literal's value; a Decimal when a float would round it to zero or infinity."""
    value = float(text)
    # Zero from a literal with a non-zero digit is an underflow (1e-400); infinity is an overflow.
    mantissa = text.partition("e")[0].partition("E")[0]
    if (value == 0.0 and any(c in "123456789" for c in mantissa)) or math.isinf(value):
        return Decimal(text)
    return value


def exact_int(text: str) -> int | Decimal:
    """An integer literal's value; a Decimal past the 4,000 digits Python converts from text."""
    return int(text) if len(text) <= 4_000 else Decimal(text)
