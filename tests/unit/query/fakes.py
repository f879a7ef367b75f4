"""An in-memory :class:`PartitionReader` with DynamoDB's Query semantics.

Items are grouped by (table, pk) and kept sorted by sort key. A page evaluates
at most ``Limit`` items (or ``page_items``, standing in for the 1 MB cap),
applies the filters after counting them, and returns a ``next_key`` whenever
it stopped early, as DynamoDB does (including when the stop happened to be at
the very end, so callers must cope with a last, empty page).
"""

from __future__ import annotations

import bisect
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from adapters.partition_reader import Page, PageRequest, StoredReading, effective_bounds
from keydesign import Layout, Reading, ShardMap, format_ts


@dataclass
class FakeItem:
    sk: str
    entity_id: str
    ts: str
    event_id: str
    measures: dict[str, int | float]
    dimensions: dict[str, str] = field(default_factory=dict)
    ttl: int | None = None


class InMemoryReader:
    def __init__(self, page_items: int = 1000) -> None:
        self.page_items = page_items
        self.partitions: dict[tuple[str, str], list[FakeItem]] = {}
        self.tables: set[str] = set()
        self.requests: list[PageRequest] = []
        self._lock = threading.Lock()

    def add(self, table: str, pk: str, items: Iterable[FakeItem]) -> None:
        self.tables.add(table)
        rows = self.partitions.setdefault((table, pk), [])
        rows.extend(items)
        rows.sort(key=lambda item: item.sk)

    def put(self, layout: Layout, shard_map: ShardMap, reading: Reading, ttl: int | None = None) -> None:
        """Store ``reading`` where the key-design layer puts it."""
        key = layout.key_for(reading, shard_map)
        item = FakeItem(
            sk=key.sk,
            entity_id=reading.entity_id,
            ts=reading.ts,
            event_id=reading.event_id,
            measures=dict(reading.measures),
            dimensions=dict(reading.dimensions),
            ttl=ttl,
        )
        self.add(key.table, key.pk, [item])

    def read_page(self, request: PageRequest) -> Page:
        with self._lock:
            self.requests.append(request)
        part = request.partition
        if part.table not in self.tables:
            return Page((), None, 0, 0.0, table_missing=True)
        rows = self.partitions.get((part.table, part.pk), [])
        keys = [row.sk for row in rows]
        low, high = effective_bounds(request)
        if low is not None and high is not None and low > high:
            return Page((), None, 0, 0.0)
        lo = 0 if low is None else bisect.bisect_left(keys, low)
        hi = len(rows) if high is None else bisect.bisect_right(keys, high)
        selected = rows[lo:hi]
        if request.descending:
            selected = selected[::-1]
        start: Mapping[str, Any] | None = request.start_key
        if start is not None:
            after = start["sk"]["S"]
            selected = [r for r in selected if (r.sk < after if request.descending else r.sk > after)]
        cap = self.page_items if request.limit is None else min(request.limit, self.page_items)
        evaluated = selected[:cap]
        stopped_early = len(evaluated) == cap
        out: list[StoredReading] = []
        for row in evaluated:
            if part.time_filter and not format_ts(part.from_ms) <= row.ts <= format_ts(part.to_ms - 1):
                continue
            if request.now_epoch_s is not None and row.ttl is not None and row.ttl < request.now_epoch_s:
                continue
            measures = row.measures
            if request.measures is not None:
                measures = {k: v for k, v in measures.items() if k in request.measures}
            out.append(
                StoredReading(
                    sk=row.sk,
                    entity_id=row.entity_id,
                    ts=row.ts,
                    event_id=row.event_id,
                    measures=measures,
                    dimensions=row.dimensions if request.with_dimensions else {},
                )
            )
        next_key = {"pk": {"S": part.pk}, "sk": {"S": evaluated[-1].sk}} if stopped_early and evaluated else None
        return Page(tuple(out), next_key, len(evaluated), max(0.5, len(evaluated) * 0.5 / 16))
