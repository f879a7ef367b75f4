"""From a Kinesis event record to reading candidates, or to rejects saying why not.

A record's data (after KPL de-aggregation) is UTF-8 JSON: one reading (an
object) or several (an array of objects). Anything else is rejected, with the
part that is wrong, never dropped:

* data that is not base64, a corrupt KPL aggregate, bytes that are not UTF-8
  JSON, or JSON that is neither an object nor an array: one reject for the
  whole (user) record, carrying its bytes as they arrived;
* an array element that is not a valid reading: one reject for that element
  (its index says where it was), while its neighbours go on.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.kinesis_records import MalformedRecord, StreamRecord, parse_event_record, user_records
from adapters.rejects import Reject


@dataclass(frozen=True, slots=True)
class Candidate:
    """One decoded JSON value that should be a reading, and where it came from.

    ``raw`` is the user record's bytes when the value is the whole record
    (so a reject can carry them exactly); for an array element it is None and
    the element is re-serialised.
    """

    record: int
    value: object
    sub_sequence_number: int | None
    index: int | None
    raw: bytes | None

    def payload(self) -> bytes:
        if self.raw is not None:
            return self.raw
        return json.dumps(self.value, ensure_ascii=False, separators=(",", ":"), default=str).encode("utf-8")


@dataclass(slots=True)
class DecodedRecord:
    """A Kinesis record split into candidates and rejects (``units`` counts both)."""

    position: int
    sequence_number: str
    shard_id: str
    partition_key: str
    stream_arn: str
    kpl_members: int = 0
    candidates: list[Candidate] = field(default_factory=list)
    rejects: list[Reject] = field(default_factory=list)

    @property
    def units(self) -> int:
        return len(self.candidates) + len(self.rejects)

    def reject(
        self, payload: bytes, field_name: str, reason: str, sub: int | None = None, index: int | None = None
    ) -> Reject:
        made = Reject(
            payload=payload,
            field=field_name,
            reason=reason,
            shard_id=self.shard_id,
            sequence_number=self.sequence_number,
            sub_sequence_number=sub,
            index=index,
            partition_key=self.partition_key,
            stream_arn=self.stream_arn,
        )
        self.rejects.append(made)
        return made


def decode_record(position: int, raw: Mapping[str, Any], shard_id: str, sequence_number: str) -> DecodedRecord:
    """Split one event record into reading candidates and rejects."""
    kinesis = raw.get("kinesis") or {}
    decoded = DecodedRecord(
        position=position,
        sequence_number=sequence_number,
        shard_id=shard_id,
        partition_key=str(kinesis.get("partitionKey", "")),
        stream_arn=str(raw.get("eventSourceARN", "")),
    )
    try:
        record: StreamRecord = parse_event_record(raw)
    except MalformedRecord as exc:
        data = kinesis.get("data")
        decoded.reject(data.encode("utf-8", errors="replace") if isinstance(data, str) else b"", exc.field, exc.reason)
        return decoded
    try:
        members = user_records(record)
    except MalformedRecord as exc:
        decoded.reject(record.data, exc.field, exc.reason)
        return decoded
    if members and members[0].sub_sequence_number is not None:
        decoded.kpl_members = len(members)
    for member in members:
        sub = member.sub_sequence_number
        try:
            value = json.loads(member.data)
        except UnicodeDecodeError:
            decoded.reject(member.data, "data", "is not UTF-8 text", sub)
            continue
        except json.JSONDecodeError as exc:
            decoded.reject(member.data, "data", f"is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})", sub)
            continue
        except RecursionError:
            decoded.reject(member.data, "data", "is JSON nested too deeply to be a reading", sub)
            continue
        if isinstance(value, dict):
            decoded.candidates.append(Candidate(position, value, sub, None, member.data))
        elif isinstance(value, list):
            decoded.candidates.extend(Candidate(position, item, sub, i, None) for i, item in enumerate(value))
        else:
            decoded.reject(
                member.data,
                "data",
                f"must be a JSON object (one reading) or an array of readings, got {_json_type(value)}",
                sub,
            )
    return decoded


def _json_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, str):
        return "a string"
    return "a number"
