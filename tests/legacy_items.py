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

from keydesign import Layout, Reading, ShardMap
from keydesign.legacy import legacy_item as plain_item


def legacy_item(reading: Reading, layout: Layout, shard_map: ShardMap, *, ttl: int | None = None) -> dict[str, Any]:
    """``keydesign.legacy.legacy_item`` in DynamoDB JSON, numbers written as the code then wrote them."""
    return {name: _attribute(value) for name, value in plain_item(reading, layout, shard_map, ttl).items()}


def _attribute(value: object) -> dict[str, Any]:
    if isinstance(value, str):
        return {"S": value}
    if isinstance(value, dict):
        return {"M": {name: _attribute(inner) for name, inner in value.items()}}
    return {"N": repr(value)}
