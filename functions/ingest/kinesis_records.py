"""Kinesis records as Lambda delivers them, and KPL aggregation.

A Lambda Kinesis event holds records whose ``kinesis.data`` is base64. A
record written by the Kinesis Producer Library (KPL) may be an *aggregated*
record: several user records packed into one, in this documented format::

    0xF3 0x89 0x9A 0xC2                      magic
    AggregatedRecord (protocol buffers v2)   see below
    MD5 of the protobuf bytes (16 bytes)     integrity check

    message AggregatedRecord {
      repeated string partition_key_table     = 1;
      repeated string explicit_hash_key_table = 2;
      repeated Record records                 = 3;
    }
    message Record {
      required uint64 partition_key_index     = 1;
      optional uint64 explicit_hash_key_index = 2;
      required bytes  data                    = 3;
      repeated Tag    tags                    = 4;
    }
    message Tag { required string key = 1; optional string value = 2; }

The decoder here is hand-written (on ``ingest.protowire``, no dependency) rather
than taken from ``aws-kinesis-agg``: that package pulls in ``protobuf``, has
not been released since 2022, and on a digest mismatch silently hands the
aggregate back as if it were one plain record. Here a record that starts with
the magic but fails the digest or the parse is *corrupt* and says so; a plain
JSON payload can never start with the magic (0xF3 0x89 0x9A 0xC2 is not valid
UTF-8), so there is no ambiguity to guess about.

Only the tests write aggregates (``tests/unit/ingest/kpl.py``): nothing here encodes.
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Mapping
from dataclasses import dataclass

from adapters.stream_events import NotAStreamEvent, stream_records
from ingest.protowire import VARINT, ProtobufError, fields, message, text

KPL_MAGIC = b"\xf3\x89\x9a\xc2"
#: Kinesis' own pattern for a sequence number: ``0|([1-9]\d{0,128})``.
MAX_SEQUENCE_DIGITS = 129
_DIGEST_BYTES = 16


class MalformedRecord(ValueError):  # noqa: N818 - reads as the condition, like keydesign's InvalidInput
    """A Kinesis record whose bytes cannot be turned into user records.

    ``field`` names what is wrong (``data`` for bad base64, ``kpl`` for a
    corrupt aggregate) so the caller can put it in a reject as is.
    """

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        self.reason = reason
        super().__init__(f"{field}: {reason}")


@dataclass(frozen=True, slots=True)
class StreamRecord:
    """One record of a Lambda Kinesis event, parsed once at the edge: where it came from, its
    version and its bytes. Everything downstream takes this, never the event's dict.

    ``version`` is the sequence number as an integer (Kinesis writes it as a decimal string
    that grows along a shard): every block holding a reading of this record carries the
    largest version among its records (``keydesign.blocks``). ``sequence_number`` keeps the
    string for reporting (the partial batch response, rejects, logs).

    ``data`` is ``kinesis.data`` decoded from base64. When it is not base64, ``malformed``
    says why and ``data`` holds the text as it arrived (UTF-8), for the reject that carries it.
    """

    shard_id: str
    sequence_number: str
    version: int
    partition_key: str
    data: bytes
    arrival_ms: int | None
    stream_arn: str
    malformed: str | None = None


@dataclass(frozen=True, slots=True)
class UserRecord:
    """One user record: the whole Kinesis record, or one member of a KPL aggregate.

    ``sub_sequence_number`` is the member's position in the aggregate (as the
    KPL numbers them), None for a record that was not aggregated.
    """

    data: bytes
    partition_key: str
    sub_sequence_number: int | None = None


def parse_records(event: object) -> list[StreamRecord]:
    """Every record of a Lambda Kinesis event, parsed (:func:`parse_event_record`).

    Raises :class:`~adapters.stream_events.NotAStreamEvent` naming the first record that
    is not a Kinesis record: such an event cannot be answered record by record.
    """
    records = stream_records(event)
    out: list[StreamRecord] = []
    for position, raw in enumerate(records):
        try:
            out.append(parse_event_record(raw))
        except NotAStreamEvent as exc:
            raise NotAStreamEvent(f"Records[{position}] {exc}") from None
    return out


def parse_event_record(raw: object) -> StreamRecord:
    """Parse one record of a Lambda Kinesis event.

    Raises :class:`~adapters.stream_events.NotAStreamEvent` when it has no sequence number,
    or one that is not a decimal number: then it is not a Kinesis record and cannot even be
    reported back. Data that is not base64 is not an error here: the record is one reject
    (``malformed`` says why).
    """
    if (
        not isinstance(raw, Mapping)
        or not isinstance(kinesis := raw.get("kinesis"), Mapping)
        or not isinstance(sequence_number := kinesis.get("sequenceNumber"), str)
    ):
        raise NotAStreamEvent("has no kinesis.sequenceNumber")
    if not (sequence_number.isdigit() and sequence_number.isascii() and len(sequence_number) <= MAX_SEQUENCE_DIGITS):
        raise NotAStreamEvent(f"has kinesis.sequenceNumber {sequence_number[:64]!r}, not a Kinesis sequence number")
    encoded = kinesis.get("data")
    malformed: str | None = None
    if isinstance(encoded, str):
        try:
            data = binascii.a2b_base64(encoded, strict_mode=True)  # what b64decode(validate=True) calls
        except (binascii.Error, ValueError):
            data, malformed = encoded.encode("utf-8", errors="replace"), "is not valid base64"
    else:
        data, malformed = b"", "is missing or not a base64 string"
    arrival = kinesis.get("approximateArrivalTimestamp")
    event_id = raw.get("eventID")
    shard, sep, _ = event_id.partition(":") if isinstance(event_id, str) else ("", "", "")
    return StreamRecord(
        shard_id=shard if sep else "unknown",  # eventID is <shard id>:<sequence number>
        sequence_number=sequence_number,
        version=int(sequence_number),
        partition_key=str(kinesis.get("partitionKey", "")),
        data=data,
        arrival_ms=round(float(arrival) * 1000) if isinstance(arrival, int | float) else None,
        stream_arn=str(raw.get("eventSourceARN", "")),
        malformed=malformed,
    )


def user_records(record: StreamRecord) -> list[UserRecord]:
    """The user records inside ``record``: its members if it is a KPL aggregate, else itself."""
    if record.data[: len(KPL_MAGIC)] != KPL_MAGIC:
        return [UserRecord(record.data, record.partition_key)]
    return deaggregate(record.data)


def deaggregate(data: bytes) -> list[UserRecord]:
    """Split a KPL aggregated record (``data`` starts with :data:`KPL_MAGIC`) into its user records.

    Raises :class:`MalformedRecord` (field ``kpl``) when the digest does not
    match or the protobuf is malformed: a corrupt aggregate is rejected whole,
    never half-read.
    """
    if len(data) < len(KPL_MAGIC) + _DIGEST_BYTES:
        raise MalformedRecord("kpl", f"an aggregate of {len(data)} bytes is too short to hold a digest")
    body, digest = data[len(KPL_MAGIC) : -_DIGEST_BYTES], data[-_DIGEST_BYTES:]
    if hashlib.md5(body, usedforsecurity=False).digest() != digest:
        raise MalformedRecord("kpl", "the MD5 digest does not match the aggregated record (corrupt or truncated)")
    try:
        return _parse_aggregate(body)
    except ProtobufError as exc:
        raise MalformedRecord("kpl", f"the aggregated record is not valid protobuf: {exc}") from None


def _parse_aggregate(body: bytes) -> list[UserRecord]:
    keys: list[str] = []
    raw_records: list[bytes] = []
    for number, _wire, value in fields(body):
        if number == 1:
            keys.append(text(value, "partition_key_table entry"))
        elif number == 3:
            raw_records.append(message(value, "records entry"))
        # field 2 (explicit hash keys) and unknown fields do not matter to a consumer
    out: list[UserRecord] = []
    for sub, raw in enumerate(raw_records):
        key_index: int | None = None
        data: bytes | None = None
        for number, wire, value in fields(raw):
            if number == 1:
                if wire != VARINT or not isinstance(value, int):
                    raise ProtobufError(f"record {sub}: partition_key_index is not a varint")
                key_index = value
            elif number == 3:
                if not isinstance(value, bytes):
                    raise ProtobufError(f"record {sub}: data is not length-delimited")
                data = value
        if key_index is None or data is None:
            raise ProtobufError(f"record {sub} lacks its required partition_key_index or data")
        if key_index >= len(keys):
            raise ProtobufError(f"record {sub} points at partition key {key_index} of {len(keys)}")
        out.append(UserRecord(data, keys[key_index], sub))
    return out
