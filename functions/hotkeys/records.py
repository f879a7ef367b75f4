"""A DynamoDB stream record, as Lambda delivers it, turned into an :class:`Observation` or a reason to skip it.

Pure (no boto3): the local runtime and the simulator parse with it too.

What a record must look like to count (anything else is skipped, counted and
logged by the caller; nothing here raises):

* ``eventName`` INSERT, MODIFY or REMOVE; ``eventSource`` ``aws:dynamodb`` when present;
* ``eventSourceARN``, when present, names the readings table (``TABLE_PREFIX``,
  or ``TABLE_PREFIX-<period>``);
* ``dynamodb.Keys`` is exactly ``pk`` and ``sk``, both strings, in one of the
  layout's block key forms (see ``keydesign.layouts``): hybrid ``SSSS#YYYY-MM-DDTHH:MM``
  or ``SSSS#YYYY-MM-DDTHH:MM#<entity>#NNN`` with sort key
  ``<entity>#<first ts>#<block id>#<write units>``; random and calculated
  ``<entity>#<n>`` with sort key ``<first ts>#<block id>#<write units>``;
* ``dynamodb.SequenceNumber`` a string;
* ``ApproximateCreationDateTime`` epoch **seconds** (what Lambda sends).

Skip reasons: ``ttl_delete`` (a REMOVE by ``dynamodb.amazonaws.com``: TTL
deletes cost no write capacity), ``write_tier`` (an item of the write tier,
``keydesign.writetier``: a group item or dense mark in ``w#<group>#<hour>``, a
sub-item in ``s#...``, a cluster block in ``c#...``, a compacted block in ``<...>#c``;
none is one entity's write, and a group's
partition of an hour takes what its entities send), ``foreign`` (another table,
key schema or layout: not ours to judge), ``malformed`` (not a stream record at all).

Write units: every stored item is a block, and its sort key ends with the write
units a put of it is billed (``<...>#<block id>#<write units>``, see
``keydesign.blocks``). So the ``KEYS_ONLY`` stream the stack configures is
enough to count exactly what each write cost, however large the block: a put
and a user delete of a block are both billed by its size (a block is never
changed in place: a redelivered ingest batch writes the same blocks again, and a
put that changes nothing is billed but leaves no stream record, so it goes
uncounted). Nothing is read from ``SizeBytes`` (the size of the stream
*record*) or from images, but for an item of the format before blocks (one
reading, sort key ``<entity>#<ts>#<event id>`` or ``<ts>#<event id>``, no write
units: ``keydesign.legacy``; nothing writes one any more, but a user may delete
one): its write units are counted from ``SizeBytes`` as they were before blocks,
exact up to 1 KB and a lower bound above.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

from hotkeys.detector import EVENT_NAMES, Observation
from keydesign.items import write_units
from keydesign.layouts import KeyParts, LayoutKind, parse_keys
from keydesign.legacy import legacy_entity
from keydesign.periods import table_head
from keydesign.writetier import CLUSTER_PK_PREFIX, COMPACTED_PK_SUFFIX, GROUP_PK_PREFIX, SUB_PK_PREFIX

# Seconds since the epoch: 2001-09-09 .. 5138-11-16. Lambda sends seconds; a
# value past this range is almost certainly milliseconds.
_MIN_SECONDS = 1_000_000_000
_MAX_SECONDS = 100_000_000_000
#: The principal of a TTL deletion (userIdentity.principalId, type "Service").
TTL_PRINCIPAL = "dynamodb.amazonaws.com"

_ARN_TABLE = re.compile(r"^arn:[^:]+:dynamodb:[^:]*:[^:]*:table/([^/]+)(?:/stream/.*)?\Z")


class SkipKind(StrEnum):
    TTL_DELETE = "ttl_delete"
    WRITE_TIER = "write_tier"
    FOREIGN = "foreign"
    MALFORMED = "malformed"


@dataclass(frozen=True, slots=True)
class Skipped:
    kind: SkipKind
    reason: str


def parse_record(raw: object, *, layout_kind: LayoutKind, table_prefix: str) -> Observation | Skipped:
    """Turn one Lambda DynamoDB stream event record into an observation, or say why not."""
    if not isinstance(raw, Mapping):
        return Skipped(SkipKind.MALFORMED, f"a record must be an object, got {type(raw).__name__}")
    source = raw.get("eventSource")
    if source is not None and source != "aws:dynamodb":
        return Skipped(SkipKind.FOREIGN, f"eventSource {str(source)[:40]!r} is not aws:dynamodb")
    arn = raw.get("eventSourceARN")
    if arn is not None:
        match = _ARN_TABLE.match(arn) if isinstance(arn, str) else None
        if match is None:
            return Skipped(SkipKind.MALFORMED, "eventSourceARN is not a DynamoDB table or stream ARN")
        table = match.group(1)
        if table != table_prefix and not table.startswith(table_head(table_prefix)):
            return Skipped(SkipKind.FOREIGN, f"table {table[:64]!r} is not the readings table")
    event_name = raw.get("eventName")
    if event_name not in EVENT_NAMES:
        return Skipped(SkipKind.MALFORMED, f"eventName {str(event_name)[:20]!r} is not INSERT, MODIFY or REMOVE")
    body = raw.get("dynamodb")
    if not isinstance(body, Mapping):
        return Skipped(SkipKind.MALFORMED, "the record has no dynamodb object")
    sequence = body.get("SequenceNumber")
    if not isinstance(sequence, str) or not sequence:
        return Skipped(SkipKind.MALFORMED, "dynamodb.SequenceNumber is missing")
    keys = body.get("Keys")
    if not isinstance(keys, Mapping) or not keys:
        return Skipped(SkipKind.MALFORMED, "dynamodb.Keys is missing")
    pk, sk = _string_key(keys, "pk"), _string_key(keys, "sk")
    if set(keys) != {"pk", "sk"} or pk is None or sk is None:
        names = ", ".join(sorted(str(k)[:32] for k in keys)[:4])
        return Skipped(SkipKind.FOREIGN, f"key schema ({names}) is not the readings table's (pk, sk strings)")
    parts = parse_keys(pk, sk, layout_kind)
    if parts is None:
        legacy = legacy_entity(pk, sk, layout_kind)
        tiered = pk.startswith((GROUP_PK_PREFIX, SUB_PK_PREFIX, CLUSTER_PK_PREFIX)) or pk.endswith(COMPACTED_PK_SUFFIX)
        if legacy is None and tiered:
            return Skipped(SkipKind.WRITE_TIER, "an item of the write tier, not of one entity's blocks")
        if legacy is None:
            return Skipped(SkipKind.FOREIGN, f"key {pk[:80]!r} is not a {layout_kind} readings key")
        size = body.get("SizeBytes")
        if isinstance(size, bool) or not isinstance(size, int) or size < 1:
            return Skipped(SkipKind.MALFORMED, "dynamodb.SizeBytes must be a whole number of bytes")
        parts = KeyParts(*legacy, write_units=write_units(size))
    when = _seconds(body.get("ApproximateCreationDateTime"))
    if isinstance(when, str):
        return Skipped(SkipKind.MALFORMED, when)
    principal = _principal(raw.get("userIdentity"))
    if event_name == "REMOVE" and principal == TTL_PRINCIPAL:
        return Skipped(SkipKind.TTL_DELETE, "deleted by TTL")
    return Observation(
        partition_key=pk,
        entity=parts.entity,
        write_units=parts.write_units,
        approx_time_ms=when,
        event_name=event_name,
        shared_key=parts.shared,
    )


def table_of(raw: Mapping[str, object]) -> str:
    """The table whose stream sent ``raw`` (a record :func:`parse_record` accepted), or ''
    when it names none: with a table per period, each table has a stream of its own."""
    arn = raw.get("eventSourceARN")
    match = _ARN_TABLE.match(arn) if isinstance(arn, str) else None
    return match.group(1) if match is not None else ""


def _string_key(keys: Mapping[object, object], name: str) -> str | None:
    value = keys.get(name)
    if isinstance(value, Mapping) and set(value) == {"S"} and isinstance(value["S"], str) and value["S"]:
        return value["S"]
    return None


def _principal(identity: object) -> str | None:
    if not isinstance(identity, Mapping):
        return None
    principal = identity.get("principalId")
    if identity.get("type") == "Service" and isinstance(principal, str):
        return principal
    return None


def _seconds(value: object) -> int | str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "ApproximateCreationDateTime must be epoch seconds"
    if not _MIN_SECONDS <= value < _MAX_SECONDS:
        return f"ApproximateCreationDateTime {value!r} is not epoch seconds (milliseconds?)"
    return int(value * 1000)
