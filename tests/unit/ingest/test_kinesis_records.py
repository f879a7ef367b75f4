"""Kinesis event records and KPL de-aggregation, checked against hand-assembled bytes."""

from __future__ import annotations

import base64
import hashlib

import pytest

from adapters.stream_events import NotAStreamEvent
from ingest.kinesis_records import (
    KPL_MAGIC,
    MalformedRecord,
    StreamRecord,
    deaggregate,
    parse_event_record,
    parse_records,
    user_records,
)
from tests.unit.ingest.kinesis_events import SHARD_ID, STREAM_ARN, kinesis_record, sequence_number
from tests.unit.ingest.kpl import aggregate


def _wrap(message: bytes) -> bytes:
    return KPL_MAGIC + message + hashlib.md5(message, usedforsecurity=False).digest()


# AggregatedRecord written out field by field from the published .proto:
#   partition_key_table = ["pk-a", "pk-b"], explicit_hash_key_table = ["123"],
#   records = [{pk 1, ehk 0, data "one", tags [{"k": "v"}]}, {pk 0, data "two"}]
HAND_ASSEMBLED = (
    b"\x0a\x04pk-a"
    b"\x0a\x04pk-b"
    b"\x12\x03123"
    b"\x1a\x11"
    b"\x08\x01"
    b"\x10\x00"
    b"\x1a\x03one"
    b"\x22\x06\x0a\x01k\x12\x01v"
    b"\x1a\x07"
    b"\x08\x00"
    b"\x1a\x03two"
)


def test_a_hand_assembled_aggregate_decodes_to_its_members_in_order() -> None:
    members = deaggregate(_wrap(HAND_ASSEMBLED))
    assert [(m.partition_key, m.data, m.sub_sequence_number) for m in members] == [
        ("pk-b", b"one", 0),
        ("pk-a", b"two", 1),
    ]


def test_the_encoder_produces_what_the_decoder_reads_back() -> None:
    members = [("sensör-1", b'{"a":1}'), ("sensor-2", b""), ("sensör-1", b"\x00" * 300)]
    encoded = aggregate(members, explicit_hash_keys=["1", None, "1"])
    assert encoded.startswith(KPL_MAGIC)
    decoded = deaggregate(encoded)
    assert [(m.partition_key, m.data) for m in decoded] == members
    assert [m.sub_sequence_number for m in decoded] == [0, 1, 2]


def test_unknown_fields_with_every_wire_type_are_skipped() -> None:
    extra = b"\x28\x96\x01" + b"\x31" + b"\x00" * 8 + b"\x3d" + b"\x00" * 4  # field 5 varint, 6 fixed64, 7 fixed32
    assert [m.data for m in deaggregate(_wrap(HAND_ASSEMBLED + extra))] == [b"one", b"two"]


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (_wrap(HAND_ASSEMBLED)[:-1] + b"\x00", "MD5"),
        (KPL_MAGIC + b"\x00" * 5, "too short"),
        (_wrap(b"\x1a\x05\x08\x00"), "past the end"),
        (_wrap(b"\x0a\x01a\x1a\x05\x08\x05\x1a\x01x"), "points at partition key 5"),
        (_wrap(b"\x0a\x01a\x1a\x02\x08\x00"), "lacks its required"),
        (_wrap(b"\x0b"), "wire type 3"),
        (_wrap(b"\x08" + b"\xff" * 11), "varint"),
        (_wrap(b"\x0a\x02\xff\xfe"), "not UTF-8"),
    ],
)
def test_a_corrupt_aggregate_is_refused_whole_with_the_reason(data: bytes, fragment: str) -> None:
    with pytest.raises(MalformedRecord) as caught:
        deaggregate(data)
    assert caught.value.field == "kpl"
    assert fragment in caught.value.reason


def test_a_record_is_parsed_once_into_its_origin_version_and_bytes() -> None:
    record = parse_event_record(kinesis_record(b'{"x":1}', 4, partition_key="sensor-9"))
    seq = sequence_number(4)
    assert record == StreamRecord(SHARD_ID, seq, int(seq), "sensor-9", b'{"x":1}', 1_795_000_000_004, STREAM_ARN)
    assert [(m.data, m.partition_key, m.sub_sequence_number) for m in user_records(record)] == [
        (b'{"x":1}', "sensor-9", None)
    ]


def test_versions_order_as_the_sequence_numbers_grow_along_the_shard() -> None:
    # 56-digit decimals: compared as text they would not order (a 57-digit one sorts below "9...")
    records = [parse_event_record(kinesis_record(b"{}", p)) for p in (0, 1, 2)]
    assert records[0].version < records[1].version < records[2].version
    longer = kinesis_record(b"{}", 0)
    longer["kinesis"]["sequenceNumber"] = "1" + "0" * 56
    nines = kinesis_record(b"{}", 0)
    nines["kinesis"]["sequenceNumber"] = "9" * 56
    assert parse_event_record(nines).version < parse_event_record(longer).version


@pytest.mark.parametrize(
    ("data", "reason", "payload"),
    [
        ("not*base64!", "is not valid base64", b"not*base64!"),
        ("eyJhIjoxfQ", "is not valid base64", b"eyJhIjoxfQ"),  # without its padding
        ("eyJhIjo\nxfQ==", "is not valid base64", b"eyJhIjo\nxfQ=="),  # a line break inside
        ("\u00e9yJhIjoxfQ==", "is not valid base64", "\u00e9yJhIjoxfQ==".encode()),  # not ASCII
        (b"eyJhIjoxfQ==", "is missing or not a base64 string", b""),  # bytes, not text
        (None, "is missing or not a base64 string", b""),
    ],
    ids=repr,
)
def test_data_that_is_not_base64_is_kept_for_the_reject_not_raised(data: object, reason: str, payload: bytes) -> None:
    raw = kinesis_record(b"x", 0)
    raw["kinesis"]["data"] = data
    record = parse_event_record(raw)
    assert (record.malformed, record.data) == (reason, payload)
    assert parse_event_record(kinesis_record(b"x", 0)).malformed is None


@pytest.mark.parametrize(
    ("sequence", "reason"),
    [
        (None, "has no kinesis.sequenceNumber"),
        (42, "has no kinesis.sequenceNumber"),
        ("4965x", "has kinesis.sequenceNumber .4965x., not a Kinesis sequence number"),
        ("\u0664\u0662", "has kinesis.sequenceNumber .*, not a Kinesis sequence number"),  # isdigit() says yes
        ("", "has kinesis.sequenceNumber .., not a Kinesis sequence number"),
        ("1" * 130, "has kinesis.sequenceNumber .*, not a Kinesis sequence number"),  # Kinesis allows 129 digits
    ],
    ids=repr,
)
def test_a_record_without_a_sequence_number_is_not_a_kinesis_record(sequence: object, reason: str) -> None:
    raw = kinesis_record(b"x", 0)
    if sequence is None:
        del raw["kinesis"]["sequenceNumber"]
    else:
        raw["kinesis"]["sequenceNumber"] = sequence
    with pytest.raises(NotAStreamEvent, match=reason):
        parse_event_record(raw)
    with pytest.raises(NotAStreamEvent, match=r"^Records\[1\] " + reason):
        parse_records({"Records": [kinesis_record(b"x", 0), raw]})
    raw["kinesis"]["sequenceNumber"] = "1" * 129
    assert parse_event_record(raw).version == int("1" * 129)


def test_the_shard_comes_from_the_event_id() -> None:
    raw = kinesis_record(b"x", 0)
    raw["eventID"] = "shardId-000000000042:123"
    assert parse_event_record(raw).shard_id == "shardId-000000000042"
    del raw["eventID"]
    assert parse_event_record(raw).shard_id == "unknown"


def test_json_never_starts_with_the_magic() -> None:
    # The magic is not valid UTF-8, so no JSON text can be mistaken for an aggregate.
    with pytest.raises(UnicodeDecodeError):
        KPL_MAGIC.decode("utf-8")
    assert base64.b64encode(KPL_MAGIC)
