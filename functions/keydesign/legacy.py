"""Items of the format before blocks: one reading per item, read as a block of one reading.

Until blocks (commit 32ccbd3), ingest stored every reading as an item of its own::

    pk   S  the partition key, as a block's now (the layouts' partition keys did not change)
    sk   S  hybrid: <entity>#<ts>#<event id>; random, calculated: <ts>#<event id>
    e    S  entity id
    t    S  event time, fixed-width UTC (as the sort key's)
    i    S  event id
    m    M  measures, name -> N
    d    M  dimensions, name -> S (only when the reading has some)
    ttl  N  expiry, epoch seconds

A table deployed before blocks holds such items beside the blocks written since. Every
reader takes one as a block of one reading (:func:`legacy_block`): span 0, so the
readers' look-back (a block starts at most ``MAX_BLOCK_SPAN_MS`` before its readings)
holds for it; its sort key starts ``<prefix><ts>#`` as a block's does, so it sorts
among blocks by its time; and its version is :data:`LEGACY_VERSION`, below every
block's (a Kinesis sequence number), so of a reading stored both ways (a batch
delivered again after the upgrade) the block's copy wins. The attributes are read as
the reader before blocks read them: measures that are numbers, as ``int`` when the
number is written whole and ``float`` otherwise; dimensions that are strings.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from .blocks import BlockError, BlockHeader
from .errors import KeyDesignError
from .hashing import shard_of
from .layouts import _STAMP, Layout, LayoutKind, entity_keys
from .model import Reading
from .shardmap import ShardMap
from .timefmt import stamp_ms

#: The version of a reading stored before blocks: older than every block's copy of it.
LEGACY_VERSION = -1
_HYBRID_SK = re.compile(rf"^([^#]+)#{_STAMP}#[^#]+\Z")
_SUFFIX_SK = re.compile(rf"^{_STAMP}#[^#]+\Z")


def legacy_item(reading: Reading, layout: Layout, shard_map: ShardMap, ttl: int | None = None) -> dict[str, object]:
    """The item ``reading`` had before blocks, with plain values (the format above; a split entity's
    partition chosen by its event id, as then): what a table deployed then holds, and the baseline
    the benchmarks and the demo price blocks against. ``ttl``: its expiry, epoch seconds."""
    pks = layout.partitions_of(reading.entity_id, reading.ts_ms, shard_map)
    item: dict[str, object] = {
        "pk": pks[shard_of(reading.event_id, len(pks))],
        "sk": layout.reading_key(reading.entity_id, reading.ts, reading.event_id),
        "e": reading.entity_id,
        "t": reading.ts,
        "i": reading.event_id,
        "m": dict(reading.measures),
    }
    if reading.dimensions:
        item["d"] = dict(reading.dimensions)
    if ttl is not None:
        item["ttl"] = ttl
    return item


def is_legacy(item: Mapping[str, Any]) -> bool:
    """Whether a stored item (DynamoDB JSON: each value ``{type: value}``) is a reading of the
    format before blocks: no payload ``b``, an event time ``t``."""
    return "b" not in item and "t" in item


def legacy_block(item: Mapping[str, Any]) -> tuple[BlockHeader, Reading]:
    """The header of the one-reading block an item of the format before blocks stands for, and its
    reading; :class:`BlockError` naming what is wrong when the item is not one."""
    sk, entity, ts, event_id = (_string(item, name) for name in ("sk", "e", "t", "i"))
    try:
        ts_ms = stamp_ms(ts)
    except (KeyDesignError, ValueError):
        raise BlockError("t", f"an item without a block has 't' {ts[:40]!r}, not a fixed-width UTC time") from None
    if sk not in (f"{ts}#{event_id}", f"{entity}#{ts}#{event_id}"):
        raise BlockError("sk", "an item without a block whose sort key is not its <e>#<t>#<i> or <t>#<i>")
    try:
        measures = {name: _number(value["N"]) for name, value in _map(item, "m").items() if _holds(value, "N")}
    except ValueError:
        raise BlockError("m", "an item without a block has a measure in 'm' that is not a number") from None
    dimensions = {name: value["S"] for name, value in _map(item, "d").items() if _holds(value, "S")}
    reading = Reading(entity, event_id, ts_ms, measures, dimensions)
    return BlockHeader(count=1, first_ms=ts_ms, span_ms=0, version=LEGACY_VERSION, body_at=0), reading


def legacy_entity(pk: str, sk: str, layout_kind: LayoutKind) -> tuple[str, bool] | None:
    """The entity of a key of the format before blocks, and whether its partition key is shared
    (a hybrid base shard); None if the key is not one. Keys only, as a ``KEYS_ONLY`` stream has."""
    found = entity_keys(pk, sk, layout_kind, _HYBRID_SK, _SUFFIX_SK)
    return None if found is None else found[:2]


def _string(item: Mapping[str, Any], name: str) -> str:
    value = item.get(name)
    text = value.get("S") if isinstance(value, Mapping) else None
    if not isinstance(text, str) or not text:
        raise BlockError(name, f"an item without a block 'b' and without a string '{name}' (the format before blocks)")
    return text


def _map(item: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    value = item.get(name)
    inner = value.get("M") if isinstance(value, Mapping) else None
    return inner if isinstance(inner, Mapping) else {}


def _holds(value: object, kind: str) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get(kind), str)


def _number(text: str) -> int | float:
    """A DynamoDB number as JSON carries it: ``int`` when written whole, else ``float``."""
    try:
        return int(text)
    except ValueError:
        return float(text)
