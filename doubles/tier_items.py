"""The write tier's items as ingest and compaction write them, built from ``keydesign`` alone.

A model of docs/writetier.md's rules for the readers' tests and the read-cost benchmark (the real
packer and compaction are ``ingest`` and ``compaction``'s): per ingest batch (after its last
copy of each reading wins), an entity with ``DENSE_READINGS`` or more readings writes its own
blocks (``Layout.pack``) and a dense mark in its group's partition of each hour still in the write
tier (``hour_open``); the other readings of a re-pack slice still open (``in_write_tier``) become
group items (``encode_group``, per group and slice, sorted by time, entity and event id, cut like
blocks); late readings become blocks, with a dense mark while their hour is open. Compaction of an
hour reads every group item of it and the blocks of its dense-marked entities, keeps the newest copy
of each reading, and writes the readings whose newest copy is a group item's as compacted blocks
(``encode_block`` with an hour's span, cut at buckets and the block limits), each of the largest
version of every copy read for its entity. The re-pack of a slice (``keydesign.tiering.repack_slice``)
reads each group partition's items of the slice and its dense-marked entities' blocks, and writes
sub-items. Items are plain values (``keydesign.blocks.block_item``), per table.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from keydesign import Layout, Reading, ShardMap, format_ts
from keydesign.blocks import (
    MAX_BLOCK_READINGS,
    MAX_BLOCK_SPAN_MS,
    encode_block,
    encode_group,
    keyed_item,
)
from keydesign.tiering import repack_slice
from keydesign.writetier import (
    DENSE_READINGS,
    KEEP_MS,
    MAX_COMPACTED_SPAN_MS,
    SLICE_MS,
    WriteTier,
    dense_mark_sk,
    group_sk_stem,
    hour_open,
    in_write_tier,
    repack_start,
    slice_start,
)

Item = tuple[str, dict[str, object]]  # (table, item)


@dataclass
class TierWriter:
    """Writes batches as ingest does with the write tier on, and compacts hours as compaction does."""

    layout: Layout
    tier: WriteTier
    shard_map: ShardMap
    retention_ms: int
    #: What compaction reads of an hour: per entity, every copy (version, reading, in a group item).
    copies: dict[int, dict[str, list[tuple[int, Reading, bool]]]] = field(default_factory=dict)
    #: The entities with a dense mark, per hour.
    dense: dict[int, set[str]] = field(default_factory=dict)
    #: What the re-pack reads of a slice: per group partition number, its items (version, readings), and
    #: the largest G that wrote the partition.
    slices: dict[int, dict[int, tuple[WriteTier, list[tuple[int, list[Reading]]]]]] = field(default_factory=dict)

    def ingest(
        self, entries: list[tuple[Reading, int]], batch_start_ms: int, rng: random.Random | None = None
    ) -> list[Item]:
        winners: dict[tuple[str, int, str], tuple[Reading, int]] = {}
        for reading, version in entries:
            winners[reading.entity_id, reading.ts_ms, reading.event_id] = (reading, version)
        counts = Counter(entity for entity, _, _ in winners)
        own: list[tuple[Reading, int]] = []
        grouped: dict[tuple[int, int], list[tuple[Reading, int]]] = {}
        items: list[Item] = []
        for reading, version in winners.values():
            hour = slice_start(reading.ts_ms)
            if counts[reading.entity_id] >= DENSE_READINGS or not in_write_tier(reading.ts_ms, batch_start_ms):
                own.append((reading, version))
                self.copies.setdefault(hour, {}).setdefault(reading.entity_id, []).append((version, reading, False))
                marked = self.dense.setdefault(hour, set())
                if hour_open(reading.ts_ms, batch_start_ms) and reading.entity_id not in marked:
                    marked.add(reading.entity_id)
                    items.append(self._dense_mark(reading))
            else:
                grouped.setdefault((self.tier.group_of(reading.entity_id), repack_start(reading.ts_ms)), []).append(
                    (reading, version)
                )
        for block in self.layout.pack(own, self.shard_map, retention_ms=self.retention_ms, rng=rng):
            items.append((block.key.table, block.item()))
        for (group, start), members in grouped.items():
            hour = slice_start(start)
            members.sort(key=lambda entry: (entry[0].ts_ms, entry[0].entity_id, entry[0].event_id))
            for run in _runs(members, MAX_BLOCK_SPAN_MS):
                readings = [reading for reading, _ in run]
                version = max(version for _, version in run)
                encoded = encode_group(readings, version)
                ttl = min(hour + SLICE_MS + KEEP_MS, readings[-1].ts_ms + self.retention_ms) // 1000
                item, _, _ = keyed_item(self.tier.group_pk(group, hour), group_sk_stem(encoded), encoded.payload, ttl)
                items.append((self.layout.table_for(hour), item))
                for reading in readings:
                    self.copies.setdefault(hour, {}).setdefault(reading.entity_id, []).append((version, reading, True))
                held = self.slices.setdefault(start, {}).get(group)
                tier = self.tier if held is None else max(held[0], self.tier, key=lambda t: t.groups)
                self.slices[start][group] = (tier, [*(held[1] if held else []), (version, readings)])
        return items

    def repack(self, start: int) -> list[Item]:
        """The sub-items of the re-pack slice at ``start``."""
        hour, items = slice_start(start), []
        dense = self.dense.get(hour, set())
        blocks = [
            (version, [reading])
            for entity in sorted(dense)
            for version, reading, in_group in self.copies.get(hour, {}).get(entity, [])
            if not in_group
        ]
        table = self.layout.table_for(hour)
        for group, (tier, copies) in sorted(self.slices.get(start, {}).items()):
            for sub in repack_slice(tier, group, start, copies, blocks, table=table, retention_ms=self.retention_ms):
                items.append((table, sub.item()))
        return items

    def _dense_mark(self, reading: Reading) -> Item:
        hour = slice_start(reading.ts_ms)
        item = {
            "pk": self.tier.group_pk(self.tier.group_of(reading.entity_id), hour),
            "sk": dense_mark_sk(reading.entity_id),
            "ttl": (hour + SLICE_MS + KEEP_MS) // 1000,
        }
        return self.layout.table_for(hour), item

    def compact(self, hour: int) -> list[Item]:
        """The compacted blocks of ``hour``."""
        items: list[Item] = []
        dense = self.dense.get(hour, set())
        for entity, copies in sorted(self.copies.get(hour, {}).items()):
            read = [copy for copy in copies if copy[2] or entity in dense]  # blocks: only a dense-marked entity's
            if not any(in_group for _, _, in_group in read):
                continue
            newest: dict[tuple[int, str], tuple[int, Reading, bool]] = {}
            for version, reading, in_group in read:
                key = (reading.ts_ms, reading.event_id)
                held = newest.get(key)
                if held is None or version > held[0]:
                    newest[key] = (version, reading, in_group)
            version = max(v for v, _, _ in read)
            tiered = sorted((r for _, r, in_group in newest.values() if in_group), key=lambda r: (r.ts_ms, r.event_id))
            by_bucket: dict[int, list[tuple[Reading, int]]] = {}
            for reading in tiered:
                by_bucket.setdefault(self.layout.bucket.start(reading.ts_ms), []).append((reading, version))
            for members in by_bucket.values():
                for run in _runs(members, MAX_COMPACTED_SPAN_MS):
                    readings = [reading for reading, _ in run]
                    encoded = encode_block(readings, version, span_limit_ms=MAX_COMPACTED_SPAN_MS)
                    prefix = f"{entity}#" if self.layout.can.shared_partitions else ""
                    pk = self.layout.compacted_partition(entity, encoded.first_ms, self.shard_map)
                    stem = f"{prefix}{format_ts(encoded.first_ms)}#{encoded.block_id}"
                    ttl = (encoded.last_ms + self.retention_ms) // 1000
                    item, _, _ = keyed_item(pk, stem, encoded.payload, ttl)
                    items.append((self.layout.table_for(encoded.first_ms), item))
        return items


def _runs(members: list[tuple[Reading, int]], span_ms: int) -> list[list[tuple[Reading, int]]]:
    """Sorted entries cut into runs of at most ``span_ms`` of time and MAX_BLOCK_READINGS readings."""
    runs: list[list[tuple[Reading, int]]] = []
    for entry in members:
        if runs and entry[0].ts_ms - runs[-1][0][0].ts_ms < span_ms and len(runs[-1]) < MAX_BLOCK_READINGS:
            runs[-1].append(entry)
        else:
            runs.append([entry])
    return runs
