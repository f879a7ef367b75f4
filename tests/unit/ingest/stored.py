"""What a readings table holds, read back as readers read it: every block decoded, and of
two copies of one reading the one in the block of the higher version kept."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from keydesign import Reading, decode_block
from keydesign.blocks import keep_newest, newest_wins
from keydesign.layouts import LayoutKind, parse_keys

Copies = dict[tuple[str, int, str], tuple[int, Reading]]


def newest_copies(items: Iterable[Mapping[str, Any]], layout: LayoutKind = "hybrid") -> Copies:
    """(entity, time, event id) -> (version, reading) of every reading in ``items`` (DynamoDB's
    low-level form, as a client returns them), the newest copy of each."""
    copies: Copies = {}
    for item in items:
        parts = parse_keys(item["pk"]["S"], item["sk"]["S"], layout)
        assert parts is not None, f"not a block's key: {item['pk']} {item['sk']}"
        header, readings = decode_block(parts.entity, item["b"]["B"])
        assert header.count == len(readings)
        keep_newest(copies, header.version, readings)
    return copies


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
