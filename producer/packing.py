"""Packing readings into Kinesis records, and records into PutRecords calls.

A record's data is a JSON array of readings (the ingest function also takes a
single object). Packing many readings into one record matters because a
Kinesis shard takes 1,000 records/s *and* 1 MB/s: at ~150 bytes a reading,
one reading per record caps a shard at 1,000 readings/s, while 64 KB records
reach the 1 MB/s limit at ~6,500 readings/s.

The partition key decides the shard, and with it ordering and heat:

``group`` (default)
    ``g<stable_hash(entity) mod groups>``. Every reading of an entity goes to
    one shard, so a correction of a reading (same event id) is applied after
    the original; many entities share a record, so records fill up even when
    each entity sends rarely. A hot entity heats one shard (with its group).
``entity``
    The entity id. Same ordering as ``group``, but slow entities pack poorly
    (a record per entity per flush), and a hot entity heats one shard alone.
``random``
    A random key per record: perfectly even shards, and the only choice when
    one entity alone exceeds a shard's 1 MB/s. No per-entity ordering: a
    correction may land before the reading it corrects (the ingest function
    keeps whichever it writes last).
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Protocol

from keydesign import stable_hash

#: Kinesis limits: one record (data + partition key) and one PutRecords call.
KINESIS_MAX_RECORD_BYTES = 1_048_576
MAX_BATCH_RECORDS = 500
MAX_BATCH_BYTES = 5 * 1_048_576
DEFAULT_RECORD_BYTES = 64 * 1024
PARTITION_STRATEGIES = ("group", "entity", "random")


class ReadingTooLarge(ValueError):  # noqa: N818 - reads as the condition
    """One reading that does not fit in a Kinesis record at all."""


@dataclass(frozen=True, slots=True)
class PackedRecord:
    """One Kinesis record: its partition key, its data, and how many readings it carries."""

    partition_key: str
    data: bytes
    readings: int

    @property
    def size(self) -> int:
        """Bytes Kinesis counts against its limits: data plus partition key."""
        return len(self.data) + len(self.partition_key.encode("utf-8"))


def partitioner(strategy: str, *, groups: int = 256, rng: random.Random | None = None) -> Callable[[str], str]:
    """The partition key of an entity's readings under ``strategy``."""
    if strategy == "group":
        if not 1 <= groups <= 1_000_000:
            raise ValueError("groups must lie in 1..1000000")
        return lambda entity: f"g{stable_hash(entity) % groups}"
    if strategy == "entity":
        return lambda entity: entity
    if strategy == "random":
        chooser = rng or random.Random()
        return lambda entity: f"r{chooser.getrandbits(64):016x}"
    raise ValueError(f"partition key strategy {strategy!r} is not one of {', '.join(PARTITION_STRATEGIES)}")


class RecordWriter(Protocol):
    """What turns readings into records: :class:`Packer` (our JSON, packed) or
    :class:`producer.formats.AgentPacker` (an agent's format, a reading a record)."""

    def add(self, reading: dict[str, Any]) -> list[PackedRecord]: ...

    def flush(self) -> list[PackedRecord]: ...


class Packer:
    """Packs readings into records of at most ``max_record_bytes``, one open record per key.

    Under the ``random`` strategy every reading would get its own key, so one
    open record is shared and gets a fresh random key when it closes.
    """

    def __init__(
        self,
        *,
        max_record_bytes: int = DEFAULT_RECORD_BYTES,
        strategy: str = "group",
        groups: int = 256,
        rng: random.Random | None = None,
    ) -> None:
        if not 256 <= max_record_bytes <= KINESIS_MAX_RECORD_BYTES:
            raise ValueError(f"max_record_bytes must lie in 256..{KINESIS_MAX_RECORD_BYTES}")
        self.max_record_bytes = max_record_bytes
        self._shared = strategy == "random"
        self._key = partitioner(strategy, groups=groups, rng=rng)
        self._open: dict[str, tuple[list[bytes], int]] = {}

    def add(self, reading: dict[str, Any]) -> list[PackedRecord]:
        """Add one reading; return the records this closed (full ones)."""
        encoded = json.dumps(reading, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
        entity = str(reading.get("entity_id", ""))
        slot = "*" if self._shared else self._key(entity)
        closed: list[PackedRecord] = []
        parts, size = self._open.get(slot, ([], 2))  # 2: the brackets
        key_bytes = 17 if self._shared else len(slot.encode("utf-8"))  # random keys: "r" + 16 hex digits
        alone = len(encoded) + 2 + key_bytes
        if alone > KINESIS_MAX_RECORD_BYTES:
            raise ReadingTooLarge(f"a reading of {len(encoded):,} bytes does not fit in a 1 MiB Kinesis record")
        if parts and size + len(encoded) + 1 + key_bytes > self.max_record_bytes:
            closed.append(self._close(slot, parts))
            parts, size = [], 2
        parts.append(encoded)
        size += len(encoded) + (1 if len(parts) > 1 else 0)
        self._open[slot] = (parts, size)
        if size + key_bytes >= self.max_record_bytes:  # an oversize reading travels alone
            closed.append(self._close(slot, parts))
            del self._open[slot]
        return closed

    def flush(self) -> list[PackedRecord]:
        """Close every open record."""
        closed = [self._close(slot, parts) for slot, (parts, _) in self._open.items()]
        self._open.clear()
        return closed

    def _close(self, slot: str, parts: list[bytes]) -> PackedRecord:
        key = self._key("") if self._shared else slot
        return PackedRecord(key, b"[" + b",".join(parts) + b"]", len(parts))


class BatchPlanner:
    """Collects records into PutRecords calls of at most 500 records and 5 MiB."""

    def __init__(self) -> None:
        self._records: list[PackedRecord] = []
        self._bytes = 0

    def add(self, records: list[PackedRecord]) -> Iterator[list[PackedRecord]]:
        """Add records; yield every batch that became full."""
        for record in records:
            if self._records and (
                len(self._records) == MAX_BATCH_RECORDS or self._bytes + record.size > MAX_BATCH_BYTES
            ):
                yield self._take()
            self._records.append(record)
            self._bytes += record.size
        if len(self._records) == MAX_BATCH_RECORDS:
            yield self._take()

    def drain(self) -> Iterator[list[PackedRecord]]:
        if self._records:
            yield self._take()

    def _take(self) -> list[PackedRecord]:
        out, self._records, self._bytes = self._records, [], 0
        return out
