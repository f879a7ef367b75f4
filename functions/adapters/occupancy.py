"""Occupancy records in the control table: ingest writes them, the query function reads them.

The item shapes and keys come from :mod:`keydesign.occupancy`; this module
only moves them. Writers (:class:`OccupancyRecorder`) remember, per container,
which partitions they have recorded (a bounded LRU), so a partition costs one
write per container, not one per reading. Readers (:class:`OccupancyReader`)
load a day with one Query (more pages only past 1 MB) and keep it for
``CACHE_TTL_S``, except the current and the previous UTC day, which take
nearly every new partition (a new bucket, a split's new shard, readings a few
hours late) and are read afresh by every request; a consistent read bypasses
the cache and reads consistently, so it sees every partition whose readings it
can see.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.batch_writer import PendingWrite, serialize_item
from adapters.clients import CONDITION_FAILED, error_code
from adapters.observability import logger
from adapters.recent import Recent
from adapters.snapstart import forget_on_restore
from keydesign.occupancy import SINCE_PK, DayOccupancy, OccupancyRecord, day_of, day_pk, recording_since
from keydesign.periods import DAY_MS

#: How long a reader trusts a loaded day older than yesterday (UTC). A partition of
#: such a day first written after the load (a reading more than a day late) is seen
#: at most this late by eventually consistent reads (DynamoDB's own replicas lag
#: too); today and yesterday are never cached, ``consistent=true`` reads never use the cache.
CACHE_TTL_S = 10.0
#: Days (or day prefixes) a reader keeps. A full day on 100 shards of 1-hour
#: buckets is 2,400 short strings (~200 KB); 256 of them bound the cache's memory.
CACHE_ENTRIES = 256
#: Partitions a writer remembers as recorded. 65,536 covers 100 shards x 24
#: buckets x 27 days of late readings per container; an evicted one is written
#: again (idempotent), which costs one write unit, never correctness.
RECORDED_ENTRIES = 65_536


class OccupancyApi(Protocol):
    """The DynamoDB client methods used here (the real client, a fake or a fault injector)."""

    def query(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class DayRead:
    """One day loaded, and what loading it cost."""

    day: DayOccupancy
    queries: int
    read_units: float


class OccupancyStore:
    """The occupancy items of one table prefix in the control table. Holds no state."""

    def __init__(self, dynamodb: OccupancyApi, control_table: str, table_prefix: str) -> None:
        self._db = dynamodb
        self.control_table = control_table
        self.table_prefix = table_prefix

    def pending_write(self, record: OccupancyRecord, retention_ms: int) -> PendingWrite:
        """The record as an item for :class:`adapters.batch_writer.BatchWriter` (a plain put)."""
        item = record.item(retention_ms)
        return PendingWrite(self.control_table, str(item["pk"]), str(item["sk"]), serialize_item(item))

    def mark_since(self, since_ms: int) -> bool:
        """Store the ``since`` marker unless one exists; True when this call stored it."""
        try:
            self._db.put_item(
                TableName=self.control_table,
                Item={"pk": {"S": SINCE_PK}, "sk": {"S": self.table_prefix}, "since": {"N": str(since_ms)}},
                ConditionExpression="attribute_not_exists(pk)",
            )
        except ClientError as exc:
            if error_code(exc) == CONDITION_FAILED:
                return False
            raise
        return True

    def read_since(self, *, consistent: bool = False) -> int | None:
        response = self._db.get_item(
            TableName=self.control_table,
            Key={"pk": {"S": SINCE_PK}, "sk": {"S": self.table_prefix}},
            ConsistentRead=consistent,
        )
        item = response.get("Item")
        if item is None:
            return None
        return int(item["since"]["N"])

    def read_day(self, day_ms: int, prefix: str, *, consistent: bool = False) -> DayRead:
        """Every occupied partition of ``day_ms`` whose sort key starts with ``prefix``."""
        key = "pk = :pk"
        values: dict[str, Any] = {":pk": {"S": day_pk(self.table_prefix, day_ms)}}
        if prefix:
            key += " AND begins_with(sk, :prefix)"
            values[":prefix"] = {"S": prefix}
        kwargs: dict[str, Any] = {
            "TableName": self.control_table,
            "KeyConditionExpression": key,
            "ExpressionAttributeValues": values,
            "ExpressionAttributeNames": {"#b": "bucket"},
            "ProjectionExpression": "sk, #b",
            "ConsistentRead": consistent,
            "ReturnConsumedCapacity": "TOTAL",
        }
        partitions: set[str] = set()
        buckets: set[int] = set()
        queries, units = 0, 0.0
        while True:
            response = self._db.query(**kwargs)
            queries += 1
            units += float((response.get("ConsumedCapacity") or {}).get("CapacityUnits", 0.0))
            for raw in response.get("Items", ()):
                partitions.add(raw["sk"]["S"])
                if "bucket" in raw:
                    buckets.add(int(raw["bucket"]["N"]))
            last = response.get("LastEvaluatedKey")
            if not last:
                break
            kwargs["ExclusiveStartKey"] = last
        return DayRead(DayOccupancy(prefix, frozenset(partitions), frozenset(buckets)), queries, units)


class _TtlCache:
    """A small thread-safe LRU whose entries expire ``ttl_s`` after they were loaded."""

    def __init__(self, ttl_s: float, entries: int, clock: Callable[[], float]) -> None:
        self._ttl_s = ttl_s
        self._entries = entries
        self._clock = clock
        self._lock = threading.Lock()
        self._data: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    def get(self, key: Hashable) -> tuple[bool, Any]:
        with self._lock:
            found = self._data.get(key)
            if found is None or self._clock() - found[0] >= self._ttl_s:
                return False, None
            self._data.move_to_end(key)
            return True, found[1]

    def put(self, key: Hashable, value: Any, loaded_at: float) -> None:
        with self._lock:
            self._data[key] = (loaded_at, value)
            self._data.move_to_end(key)
            while len(self._data) > self._entries:
                self._data.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._data.clear()

    def load(self, key: Hashable, cacheable: bool, load: Callable[[], Any]) -> tuple[Any, bool]:
        """``load()``, or when ``cacheable`` what it gave within the TTL; True when it came from the cache."""
        if cacheable:
            hit, value = self.get(key)
            if hit:
                return value, True
        loaded_at = self._clock()
        value = load()
        if cacheable:
            self.put(key, value, loaded_at)
        return value, False


class OccupancyReader:
    """The query function's view of occupancy, through a short cache. Thread-safe. A copy
    restored from a SnapStart snapshot starts with an empty cache."""

    def __init__(
        self,
        store: OccupancyStore,
        *,
        ttl_s: float = CACHE_TTL_S,
        clock: Callable[[], float] = time.monotonic,
        wall_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        self._store = store
        self._clock = clock
        self._wall_ms = wall_ms
        self._cache = _TtlCache(ttl_s, CACHE_ENTRIES, clock)
        forget_on_restore(self)

    def forget(self) -> None:
        """Drop every day read. A ``since`` marker read is kept: it is written once (a conditional put)
        and never changes; only its absence can, and an absence is dropped too."""
        hit, since = self._cache.get("since")
        self._cache.clear()
        if hit and since is not None:
            self._cache.put("since", since, self._clock())

    def since(self, *, consistent: bool = False) -> tuple[int | None, int]:
        """The marker, and the calls made to read it (0 when cached)."""
        since, cached = self._cache.load("since", not consistent, lambda: self._store.read_since(consistent=consistent))
        return since, 0 if cached else 1

    def day(self, day_ms: int, prefix: str, *, consistent: bool = False) -> DayRead:
        """One day under ``prefix``; a cached answer costs no call. Today and yesterday (UTC) are
        read every time: they are where new partitions appear."""
        cacheable = not consistent and day_ms < day_of(self._wall_ms()) - DAY_MS
        read, cached = self._cache.load(
            ("day", day_ms, prefix), cacheable, lambda: self._store.read_day(day_ms, prefix, consistent=consistent)
        )
        return DayRead(read.day, 0, 0.0) if cached else read


class OccupancyRecorder:
    """Ingest's side: which records still need writing, and the ``since`` marker."""

    def __init__(self, store: OccupancyStore, *, max_future_ms: int) -> None:
        self.store = store
        self._max_future_ms = max_future_ms
        self._recorded: Recent[OccupancyRecord] = Recent(RECORDED_ENTRIES)
        self._lock = threading.Lock()
        self._marked = False

    def unrecorded(self, records: Iterable[OccupancyRecord]) -> list[OccupancyRecord]:
        """The records this container has not written yet (or has forgotten)."""
        with self._lock:
            return [r for r in records if r not in self._recorded]

    def remember(self, records: Sequence[OccupancyRecord]) -> None:
        with self._lock:
            for record in records:
                self._recorded.add(record)

    def ensure_marked(self, now_ms: int) -> None:
        """Store the ``since`` marker once per container. A failure is logged and tried
        again with the next batch: without a marker readers prune nothing, which is safe,
        and a later marker only prunes less."""
        if self._marked:
            return
        try:
            self.store.mark_since(recording_since(now_ms, self._max_future_ms))
        except Exception:
            logger.warning("occupancy marker not stored; will try again", exc_info=True)
            return
        self._marked = True
