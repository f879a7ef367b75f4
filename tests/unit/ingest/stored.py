"""What a readings table holds, read back as readers read it: every block, write-tier group item and
compacted block decoded (dense marks hold no readings), and of two copies of one reading the one in
the item of the higher version kept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from keydesign import Reading, decode_block
from keydesign.blocks import BlockHeader, decode_group, keep_newest, newest_wins
from keydesign.layouts import LayoutKind, parse_keys
from keydesign.writetier import (
    CLUSTER_PK_PREFIX,
    COMPACTED_PK_SUFFIX,
    DENSE_MARK_PREFIX,
    GROUP_PK_PREFIX,
    MAX_COMPACTED_SPAN_MS,
)

Copies = dict[tuple[str, int, str], tuple[int, Reading]]


def newest_copies(items: Iterable[Mapping[str, Any]], layout: LayoutKind = "hybrid") -> Copies:
    """(entity, time, event id) -> (version, reading) of every reading in ``items`` (DynamoDB's
    low-level form, as a client returns them), the newest copy of each."""
    copies: Copies = {}
    for item in items:
        if item["sk"]["S"].startswith(DENSE_MARK_PREFIX):
            continue
        header, readings = decoded(item, layout)
        assert header.count == len(readings)
        keep_newest(copies, header.version, readings)
    return copies


def decoded(item: Mapping[str, Any], layout: LayoutKind = "hybrid") -> tuple[BlockHeader, list[Reading]]:
    """The header and readings of a stored block, group item, cluster block or compacted block."""
    pk, sk, payload = item["pk"]["S"], item["sk"]["S"], item["b"]["B"]
    if pk.startswith(GROUP_PK_PREFIX):
        return decode_group(payload)
    if pk.startswith(CLUSTER_PK_PREFIX):
        return decode_group(payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
    if pk.endswith(COMPACTED_PK_SUFFIX):
        entity = sk.split("#", 1)[0] if layout == "hybrid" else pk.removesuffix(COMPACTED_PK_SUFFIX)
        return decode_block(entity, payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)
    parts = parse_keys(pk, sk, layout)
    assert parts is not None, f"not a block's key: {pk} {sk}"
    return decode_block(parts.entity, payload)


def stored_readings(items: Iterable[Mapping[str, Any]], layout: LayoutKind = "hybrid") -> list[Reading]:
    """Every reading in ``items`` once, the newest copy, in (entity, time, event id) order."""
    return newest_wins(newest_copies(items, layout))


def by_event_id(items: Iterable[Mapping[str, Any]], layout: LayoutKind = "hybrid") -> dict[str, Reading]:
    """The stored readings by event id (for tests whose event ids are unique)."""
    readings = stored_readings(items, layout)
    out = {r.event_id: r for r in readings}
    assert len(out) == len(readings), "event ids repeat: use stored_readings"
    return out


def block_of(item: Mapping[str, Any], layout: LayoutKind = "hybrid") -> list[Reading]:
    """The readings of one stored block."""
    parts = parse_keys(item["pk"]["S"], item["sk"]["S"], layout)
    assert parts is not None
    return decode_block(parts.entity, item["b"]["B"])[1]
