"""The write tier's items as ingest and compaction write them, built from ``keydesign`` alone.

A model of docs/writetier.md's rules for the readers' tests and the read-cost benchmark (the real
packer and compaction are ``ingest`` and ``compaction``'s): per ingest batch (after its last
copy of each reading wins), an entity with ``DENSE_READINGS`` or more readings writes its own
blocks (``Layout.pack``) and a dense mark in its group's partition of each hour still in the write
tier (``hour_open``); the other readings of a re-pack slice still open (``in_write_tier``) become
group items (``encode_group``, per group and slice, sorted by time, entity and event id, cut like
blocks); late readings become blocks, with a dense mark while their hour is open. Compaction of an
hour reads every group item of it and the blocks of its dense-marked entities, keeps the newest copy
of each reading, and writes the readings whose newest copy is a group item's as cluster blocks
(:func:`keydesign.tiering.compact_hour`, per group partition, its dense-marked entities flagged). The
re-pack of a slice (``keydesign.tiering.repack_slice``) reads each group partition's items of the slice
and its dense-marked entities' blocks, and writes sub-items. Items are plain values
(``keydesign.blocks.block_item``), per table.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field

from keydesign import Layout, Reading, ShardMap
from keydesign.blocks import (
    MAX_BLOCK_READINGS,
    MAX_BLOCK_SPAN_MS,
    encode_group,
    keyed_item,
)
from keydesign.tiering import compact_hour, repack_slice
from keydesign.writetier import (
    DENSE_READINGS,
    KEEP_MS,
    REPACK_MS,
    SLICE_MS,
    Clustered,
    CompactionState,
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
        """The cluster blocks of ``hour``: per group partition written in it (whatever G wrote its items), those
        :func:`keydesign.tiering.compact_hour` makes of its items and its dense-marked entities' blocks."""
        dense = self.dense.get(hour, set())
        partitions: dict[int, list[tuple[int, list[Reading]]]] = {}
        widest = self.tier
        for start in range(hour, hour + SLICE_MS, REPACK_MS):
            for group, (tier, copies) in self.slices.get(start, {}).items():
                partitions.setdefault(group, []).extend(copies)
                widest = max(widest, tier, key=lambda t: t.groups)
        table = self.layout.table_for(hour)
        items: list[Item] = []
        for group, tier_copies in sorted(partitions.items()):
            present = {reading.entity_id for _, readings in tier_copies for reading in readings}
            blocks = [
                (version, [reading])
                for entity in sorted(dense & present)
                for version, reading, in_group in self.copies.get(hour, {}).get(entity, [])
                if not in_group
            ]
            pk = widest.cluster_pk(group, self.layout.cluster_span(hour))
            made = compact_hour(
                hour, tier_copies, blocks, table=table, pk=pk, retention_ms=self.retention_ms, dense=dense
            )
            items += [(table, block.item()) for block in made]
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


class FixedWatermark:
    """Compaction's state, fixed: every hour before ``through`` compacted into cluster blocks under ``groups``
    groups, the re-pack slices of ``repacked`` (from, through) re-packed."""

    def __init__(self, through: int, groups: int, repacked: tuple[int, int] = (0, 0)) -> None:
        self.through = through
        self.groups = groups
        self.repacked = repacked

    def state(self) -> CompactionState:
        clustered = (Clustered((self.groups,), 0),)
        return CompactionState(
            self.through, repack_from=self.repacked[0], repacked=self.repacked[1], clustered=clustered
        )

    def consistent(self) -> CompactionState:
        return self.state()
