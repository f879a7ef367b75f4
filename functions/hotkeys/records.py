"""A DynamoDB stream record, as Lambda delivers it, turned into an :class:`Observation` or a reason to skip it.

Pure (no boto3): the local runtime and the simulator parse with it too.

What a record must look like to count (anything else is skipped, counted and
logged by the caller; nothing here raises):

* ``eventName`` INSERT, MODIFY or REMOVE; ``eventSource`` ``aws:dynamodb`` when present;
* ``eventSourceARN``, when present, names the readings table (``TABLE_PREFIX``,
  or ``TABLE_PREFIX-<period>``);
* ``dynamodb.Keys`` is exactly ``pk`` and ``sk``, both strings, in one of the
  layout's key forms (see ``keydesign.layouts``): hybrid ``SSSS#YYYY-MM-DDTHH:MM``
  or ``SSSS#YYYY-MM-DDTHH:MM#<entity>#NNN`` with sort key ``<entity>#<ts>#<event id>``;
  random and calculated ``<entity>#<n>`` with sort key ``<ts>#<event id>``;
* ``dynamodb.SizeBytes`` a whole number of bytes, ``ApproximateCreationDateTime``
  epoch **seconds** (what Lambda sends).

Skip reasons: ``ttl_delete`` (a REMOVE by ``dynamodb.amazonaws.com``: TTL
deletes cost no write capacity), ``foreign`` (another table, key schema or
layout: not ours to judge), ``malformed`` (not a stream record at all).

Item size: a ``KEYS_ONLY`` stream (what the stack configures) carries only the
keys, and ``SizeBytes`` is the size of the *record*, so the write-unit count is
exact for items up to 1 KB and a lower bound above (set ``HOT_ASSUMED_ITEM_BYTES``).
When the record carries images, the larger image is measured instead, by
DynamoDB's own size rules: that is what the write was billed on.
"""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum

from hotkeys.detector import EVENT_NAMES, TTL_PRINCIPAL, Observation
from keydesign.items import MAX_ITEM_BYTES, number_size
from keydesign.layouts import LayoutKind, parse_keys

# Seconds since the epoch: 2001-09-09 .. 5138-11-16. Lambda sends seconds; a
# value past this range is almost certainly milliseconds.
_MIN_SECONDS = 1_000_000_000
_MAX_SECONDS = 100_000_000_000
# A stream record holds the keys and at most two images of a 400 KB item.
_MAX_RECORD_BYTES = 2 * MAX_ITEM_BYTES + 4096

_ARN_TABLE = re.compile(r"^arn:[^:]+:dynamodb:[^:]*:[^:]*:table/([^/]+)(?:/stream/.*)?\Z")


class SkipKind(StrEnum):
    TTL_DELETE = "ttl_delete"
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
        if table != table_prefix and not table.startswith(f"{table_prefix}-"):
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
        return Skipped(SkipKind.FOREIGN, f"key {pk[:80]!r} is not a {layout_kind} readings key")
    size = _size(body)
    if isinstance(size, str):
        return Skipped(SkipKind.MALFORMED, size)
    when = _seconds(body.get("ApproximateCreationDateTime"))
    if isinstance(when, str):
        return Skipped(SkipKind.MALFORMED, when)
    principal = _principal(raw.get("userIdentity"))
    if event_name == "REMOVE" and principal == TTL_PRINCIPAL:
        return Skipped(SkipKind.TTL_DELETE, "deleted by TTL")
    return Observation(pk, parts.entity, size, when, event_name, principal, parts.shared)


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


def _size(body: Mapping[str, object]) -> int | str:
    declared = body.get("SizeBytes")
    if isinstance(declared, bool) or not isinstance(declared, int) or not 1 <= declared <= _MAX_RECORD_BYTES:
        return "dynamodb.SizeBytes must be a whole number of bytes"
    images = [body[name] for name in ("NewImage", "OldImage") if name in body]
    if not images:
        return declared
    try:
        return max(_image_size(image) for image in images)
    except (TypeError, ValueError, KeyError, InvalidOperation, binascii.Error):
        return "dynamodb.NewImage/OldImage is not an item in DynamoDB JSON"


def _image_size(image: object) -> int:
    if not isinstance(image, Mapping):
        raise TypeError("image")
    return sum(len(str(name).encode("utf-8")) + _value_size(value) for name, value in image.items())


def _value_size(value: object) -> int:
    """DynamoDB's size of one typed value (as keydesign.items.value_size counts plain ones)."""
    if not isinstance(value, Mapping) or len(value) != 1:
        raise TypeError("value")
    ((kind, inner),) = value.items()
    if kind == "S":
        return len(str(inner).encode("utf-8"))
    if kind == "N":
        return number_size(Decimal(str(inner)))
    if kind == "B":
        return len(base64.b64decode(str(inner), validate=True))
    if kind in ("BOOL", "NULL"):
        return 1
    if kind == "SS":
        return sum(len(str(v).encode("utf-8")) for v in _list(inner))
    if kind == "NS":
        return sum(number_size(Decimal(str(v))) for v in _list(inner))
    if kind == "BS":
        return sum(len(base64.b64decode(str(v), validate=True)) for v in _list(inner))
    if kind == "M":
        if not isinstance(inner, Mapping):
            raise TypeError("map")
        return 3 + sum(len(str(k).encode("utf-8")) + _value_size(v) + 1 for k, v in inner.items())
    if kind == "L":
        return 3 + sum(_value_size(v) + 1 for v in _list(inner))
    raise ValueError(f"unknown type {kind!r}")


def _list(inner: object) -> list[object]:
    if not isinstance(inner, list):
        raise TypeError("list")
    return inner
