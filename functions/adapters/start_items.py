"""Start items: where a scheduled pass's first run may start, written by ingest.

A pass that follows what ingest writes (the rollup function its marks, compaction the write tier's
group items) needs, on its first run (no state yet), the earliest time anything it must read can
carry. Rather than go back as far as such items may exist (days of empty minutes or hours), it
reads the *start items*: each ingest container writes one, stamped with the unit (minute, hour) of
its batch's start, before or with its first such writes, and none of those counts as written until
the start item is. The first run then starts at the earliest start item (``rollup.logic``,
``compaction.logic`` argue where it starts when there is none).

A container writes its first start item with its first writes, and, with ``every_ms``, another once
its batches start ``every_ms`` or more past the unit of its last one: a start item expires (it is
only ever read by a first run), and a container may live longer than that.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from adapters.batch_writer import PendingWrite, serialize_item
from keydesign import format_ts, parse_timestamp
from keydesign.writetier import SLICE_MS, tier_start_pk, tier_start_ttl


@dataclass(frozen=True, slots=True)
class StartItems:
    """One partition of start items in the control table (``pk``), sort key the start of a unit of
    ``unit_ms`` (``format_ts``: they sort by time); ``expires_at`` gives the TTL (epoch s) of the one
    of a unit starting at its argument."""

    table: str
    pk: str
    unit_ms: int
    expires_at: Callable[[int], int]

    def write(self, stamp_ms: int) -> PendingWrite:
        """The start item of the unit of ``stamp_ms`` (the same item for every container starting in it)."""
        unit = stamp_ms - stamp_ms % self.unit_ms
        sk = format_ts(unit)
        item = {"pk": self.pk, "sk": sk, "expires_at": self.expires_at(unit)}
        return PendingWrite(self.table, self.pk, sk, serialize_item(item))

    def first(self, dynamodb: Any, on_response: Callable[[dict[str, Any], int], None] | None = None) -> int | None:
        """The start of the earliest unit a start item names, if one is stored (one consistent Query);
        ``on_response`` is given the response and its item count (to count what it cost)."""
        response = dynamodb.query(
            TableName=self.table,
            KeyConditionExpression="pk = :pk",
            ExpressionAttributeValues={":pk": {"S": self.pk}},
            ConsistentRead=True,
            Limit=1,
            ReturnConsumedCapacity="TOTAL",
        )
        items = response.get("Items", [])
        if on_response is not None:
            on_response(response, len(items))
        return parse_timestamp(items[0]["sk"]["S"], "sk") if items else None


class StartRecorder:
    """A container's side: which start item, if any, its next writes stamped ``stamp_ms`` must go with.
    Thread-safe; one per container."""

    def __init__(self, items: StartItems, every_ms: int | None = None) -> None:
        self.items = items
        self._every_ms = every_ms
        self._last: int | None = None
        self._lock = threading.Lock()

    def due(self, stamp_ms: int) -> PendingWrite | None:
        """The start item to write with (or before) writes stamped ``stamp_ms``: the container's first,
        or, with ``every_ms``, a new one once ``stamp_ms`` is that far past its last one; else None."""
        with self._lock:
            last = self._last
        if last is not None and (self._every_ms is None or stamp_ms - last < self._every_ms):
            return None
        return self.items.write(stamp_ms)

    def written(self, stamp_ms: int) -> None:
        """The start item :meth:`due` gave for ``stamp_ms`` is stored."""
        unit = stamp_ms - stamp_ms % self.items.unit_ms
        with self._lock:
            self._last = unit if self._last is None else max(self._last, unit)


def write_tier_starts(control_table: str, table_prefix: str) -> StartItems:
    """The write tier's start items (``keydesign.writetier.tier_start_pk``): an hour each, written by ingest
    with a container's first group items, read by compaction's first run."""
    return StartItems(control_table, tier_start_pk(table_prefix), SLICE_MS, tier_start_ttl)
