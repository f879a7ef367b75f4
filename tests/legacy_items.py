"""Items of the format before blocks (one reading each), as ingest wrote them up to commit b224d42.

``keydesign.build_item`` and ``Layout.key_for`` of that commit: the partition key of the
layout (hybrid ``<shard>#<bucket>``, or a split entity's ``...#<entity>#<sub>`` with sub =
hash(event id) mod k; calculated ``<entity>#<hash(event id) mod n>``; random any of the n,
here the same rule), the sort key ``<entity>#<ts>#<event id>`` (hybrid) or ``<ts>#<event id>``,
and the reading in ``e``, ``t``, ``i``, ``m``, ``d``; in DynamoDB JSON, as the low-level
client takes it and an export holds it.
"""

from __future__ import annotations

from typing import Any

from keydesign import Layout, Reading, ShardMap, shard_of


def legacy_item(reading: Reading, layout: Layout, shard_map: ShardMap, *, ttl: int | None = None) -> dict[str, Any]:
    pks = layout.partitions_of(reading.entity_id, reading.ts_ms, shard_map)
    item: dict[str, Any] = {
        "pk": {"S": pks[shard_of(reading.event_id, len(pks))]},
        "sk": {"S": layout.reading_key(reading.entity_id, reading.ts, reading.event_id)},
        "e": {"S": reading.entity_id},
        "t": {"S": reading.ts},
        "i": {"S": reading.event_id},
        "m": {"M": {name: {"N": repr(value)} for name, value in reading.measures.items()}},
    }
    if reading.dimensions:
        item["d"] = {"M": {name: {"S": value} for name, value in reading.dimensions.items()}}
    if ttl is not None:
        item["ttl"] = {"N": str(ttl)}
    return item
