"""Packing an ingest batch into the write tier, re-packing a slice of it, and compacting an hour of it.

The rules and the items are :mod:`keydesign.writetier`'s (its docstring is the contract); this module
holds the steps that need a :class:`keydesign.Layout` (blocks, their keys): :func:`pack_batch`
(ingest), :func:`repack_slice` and :func:`compact_hour` (compaction). Kept apart so that ``layouts``
(which builds the write tier's partition plans) and ``writetier`` do not import each other.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, replace

from .blocks import (
    MAX_BLOCK_ITEM_BYTES,
    ItemKey,
    block_item,
    body_estimate,
    cut_runs,
    encode_cluster,
    encode_group,
    keyed_item,
    last_copies,
)
from .layouts import Block, Layout
from .model import Reading
from .shardmap import ShardMap
from .timefmt import format_ts
from .writetier import (
    DENSE_READINGS,
    MAX_COMPACTED_SPAN_MS,
    REPACK_MS,
    ROLLUP_OWNED,
    SLICE_MS,
    DenseMark,
    GroupItem,
    SubItem,
    WriteTier,
    cluster_of,
    cluster_sk_stem,
    dense_mark_sk,
    group_sk_stem,
    hour_open,
    in_write_tier,
    repack_start,
    slice_start,
    sub_group_of,
    sub_sk_stem,
    tier_ttl,
)


@dataclass(frozen=True, slots=True)
class BatchPacking:
    """What one ingest batch writes: its blocks (:meth:`keydesign.Layout.pack`; ``origins`` index what
    :func:`pack_batch` was given), its group items, and the dense marks the blocks need, each with the
    indexes of the blocks that must not be written before it is stored."""

    blocks: list[Block]
    group_items: list[GroupItem]
    dense_marks: dict[DenseMark, list[int]]


def pack_batch(
    entries: Sequence[tuple[Reading, int]],
    tier: WriteTier,
    layout: Layout,
    shard_map: ShardMap,
    *,
    batch_start_ms: int,
    retention_ms: int | None = None,
    rng: random.Random | None = None,
) -> BatchPacking:
    """Split a batch's entries (reading, version; in arrival order, the last copy of a reading
    winning) between blocks and group items, and pack both.

    Blocks (``layout.pack``): the readings of *dense* entities (:data:`DENSE_READINGS` readings or
    more in the batch, counted once each) and late readings (``not in_write_tier(ts, batch_start_ms)``).
    Group items: the rest, per (group, re-pack slice) sorted by (time, entity, event id), cut as blocks are
    (:func:`keydesign.blocks.cut_runs`, halved while an item is over MAX_BLOCK_ITEM_BYTES), version
    the largest of their entries'. Dense marks: one per (entity, hour) of a block's readings whose hour
    was still in the write tier when the batch started (:func:`keydesign.writetier.hour_open`: a dense entity's, or
    a reading late past its slice but not its hour). Deterministic (but for ``rng`` in the random
    layout): a redelivered batch makes the same items.
    """
    winners, replaced = last_copies(entries)
    counts = Counter(entity for entity, _, _ in winners)
    dense = {entity for entity, count in counts.items() if count >= DENSE_READINGS}
    to_blocks: list[int] = []
    slices: dict[tuple[int, int], list[tuple[int, tuple[str, str], int]]] = {}
    for (entity, ts, event_id), index in winners.items():
        if entity in dense or not in_write_tier(ts, batch_start_ms):
            to_blocks += [index, *replaced.get(index, ())]
        else:
            slices.setdefault((tier.group_of(entity), repack_start(ts)), []).append((ts, (entity, event_id), index))
    to_blocks.sort()
    packed = layout.pack([entries[i] for i in to_blocks], shard_map, retention_ms=retention_ms, rng=rng)
    blocks = [replace(b, origins=tuple(to_blocks[i] for i in b.origins)) for b in packed]

    def cut(group: int, hour: int, run: list[int]) -> list[GroupItem]:
        """``run`` (entry indexes, in order) as one item, or halves of it while one is too large."""
        readings = tuple(entries[i][0] for i in run)
        encoded = encode_group(readings, max(entries[i][1] for i in run))
        ttl = tier_ttl(hour, encoded.last_ms, retention_ms)
        item, size, units = keyed_item(tier.group_pk(group, hour), group_sk_stem(encoded), encoded.payload, ttl)
        if size > MAX_BLOCK_ITEM_BYTES and len(run) > 1:
            half = len(run) // 2
            return cut(group, hour, run[:half]) + cut(group, hour, run[half:])
        origins = tuple(sorted(j for i in run for j in (i, *replaced.get(i, ()))))
        key = ItemKey(layout.table_for(hour), str(item["pk"]), str(item["sk"]))
        return [GroupItem(key, readings, origins, encoded, size, units, ttl, group=group)]

    items: list[GroupItem] = []
    # cut by re-pack slice too: an item lies in one slice, which the re-pack reads by its sort keys
    for (group, start), members in sorted(slices.items()):
        members.sort()
        for run in cut_runs(members, [body_estimate(entries[index][0]) for _, _, index in members]):
            items.extend(cut(group, slice_start(start), run))

    marks: dict[DenseMark, list[int]] = {}
    for position, block in enumerate(blocks):
        for hour in sorted({slice_start(r.ts_ms) for r in block.readings if hour_open(r.ts_ms, batch_start_ms)}):
            mark = DenseMark(
                layout.table_for(hour),
                tier.group_pk(tier.group_of(block.entity_id), hour),
                dense_mark_sk(block.entity_id),
                tier_ttl(hour, hour + SLICE_MS - 1, retention_ms),
            )
            marks.setdefault(mark, []).append(position)
    return BatchPacking(blocks, items, marks)


# -- re-packing a slice -----------------------------------------------------------------------


def repack_slice(
    tier: WriteTier,
    group: int,
    start: int,
    items: Copies,
    blocks: Copies = (),
    *,
    table: str,
    retention_ms: int | None = None,
) -> list[SubItem]:
    """The sub-items of group partition ``group`` (of ``tier``, the hour's largest G) for the re-pack
    slice starting at ``start``.

    ``items`` holds the decoded group items of the slice (their readings all lie in it: the slice
    rule cuts a batch's items by slice), ``blocks`` the decoded blocks of the dense-marked entities
    (their readings outside the slice are left out). Each reading is kept once, its copy of the
    highest version winning, a block's of one version; the readings whose winning copy is in a group
    item are put, per sub-group (:func:`keydesign.writetier.sub_group_of`), sorted by (time, entity,
    event id), cut as group items are but spanning up to the slice, each given the largest version of
    its readings' winning copies (:mod:`keydesign.writetier`, "Sub-item versions"), keyed
    ``s#<group>#<hour>`` / ``<sub>#<first ts>#<item id>#<units>`` in ``table`` (the hour's), expiring as
    the group items. The result depends only on the copies given: a redo puts the same items."""
    if start % REPACK_MS:
        raise ValueError(f"{start} is not the start of a re-pack slice")
    hour, end = slice_start(start), start + REPACK_MS
    winners, _ = _winning_copies(start, end, items, blocks, f"the slice at {format_ts(start)}")
    subs: dict[int, list[tuple[int, tuple[str, str], int, Reading]]] = {}
    for (entity, ts, event_id), (version, in_tier, reading) in winners.items():
        if in_tier:
            subs.setdefault(sub_group_of(entity), []).append((ts, (entity, event_id), version, reading))
    pk = tier.sub_pk(group, start)

    def cut(sub: int, run: list[tuple[int, tuple[str, str], int, Reading]]) -> list[SubItem]:
        readings = tuple(reading for _, _, _, reading in run)
        encoded = encode_group(readings, max(version for _, _, version, _ in run), span_limit_ms=REPACK_MS)
        ttl = tier_ttl(hour, encoded.last_ms, retention_ms)
        item, size, units = keyed_item(pk, sub_sk_stem(sub, encoded), encoded.payload, ttl)
        if size > MAX_BLOCK_ITEM_BYTES and len(run) > 1:
            return cut(sub, run[: len(run) // 2]) + cut(sub, run[len(run) // 2 :])
        return [SubItem(ItemKey(table, pk, str(item["sk"])), readings, (), encoded, size, units, ttl, group, sub)]

    out: list[SubItem] = []
    for sub, members in sorted(subs.items()):
        members.sort(key=lambda member: member[:2])
        estimates = [body_estimate(reading) for _, _, _, reading in members]
        keys = [(ts, tie, i) for i, (ts, tie, _, _) in enumerate(members)]
        for run in cut_runs(keys, estimates, span_limit_ms=REPACK_MS):
            out += cut(sub, [members[i] for i in run])
    return out


# -- compacting -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactedBlock:
    """One cluster block, ready to put: its key, its readings (of a cluster of a group's entities, in one
    hour, in (time, entity, event id) order), the version it was given and its payload (block format 5,
    spanning up to an hour)."""

    table: str
    pk: str
    sk: str
    readings: tuple[Reading, ...]
    version: int
    payload: bytes
    size: int
    write_units: int
    ttl: int | None
    #: The entities of the block whose hour is the rollup function's (they wrote blocks in it: a dense
    #: mark; or a change of G split their hour): stored as the string set ``r``, and their readings are
    #: left out of the group's partial and of the aggregates compacted blocks answer (their rollups hold them).
    rollups: frozenset[str] = frozenset()

    @property
    def entities(self) -> frozenset[str]:
        return frozenset(r.entity_id for r in self.readings)

    def owned_readings(self) -> list[Reading]:
        """The readings whose entity's hour is compaction's: not in :attr:`rollups`."""
        return [r for r in self.readings if r.entity_id not in self.rollups]

    def item(self) -> dict[str, object]:
        """The item in plain Python values (the payload as bytes)."""
        item = block_item(self.pk, self.sk, self.payload, self.ttl)
        if self.rollups:
            item[ROLLUP_OWNED] = set(self.rollups)
        return item


#: Decoded copies of readings: per item or block read, its version and its readings.
Copies = Iterable[tuple[int, Sequence[Reading]]]


def compact_hour(
    hour_start: int,
    tier_copies: Copies,
    blocks: Copies = (),
    *,
    table: str,
    pk: str,
    retention_ms: int | None = None,
    dense: Collection[str] = (),
) -> list[CompactedBlock]:
    """The cluster blocks of a group partition's hour starting at ``hour_start``, to put in ``table`` (the
    hour's) and partition ``pk`` (:meth:`keydesign.writetier.WriteTier.cluster_pk` of the group partition's
    number, in the hour's span: :meth:`keydesign.Layout.cluster_span`).

    ``tier_copies`` holds the decoded group items of the hour (their readings all lie in it), ``blocks``
    the decoded blocks of the hour of the entities with a dense mark (their readings outside the hour
    are left out). Each reading (entity, time, event id) is kept once, its copy of the highest version
    winning; of a block copy and a write-tier copy of one version, the block's (it is already stored
    where readers look). The readings whose winning copy is in the write tier are compacted, per cluster
    (:func:`keydesign.writetier.cluster_of`) sorted by (time, entity, event id), cut by the block limits
    (:func:`keydesign.blocks.cut_runs`, spanning up to :data:`MAX_COMPACTED_SPAN_MS`; halved while an
    item is over MAX_BLOCK_ITEM_BYTES), each given the largest version of every copy read of its
    entities' readings (the module's "Compacted versions"), keyed ``pk`` /
    ``<cluster>#<first ts>#<item id>#<units>``, ``ttl`` its newest reading's
    expiry by ``retention_ms``. The entities in ``dense`` (with a dense mark: their hour is the rollup
    function's) are named in :attr:`CompactedBlock.rollups` of the blocks holding them. The result
    depends only on the copies given: compacting an hour again puts the same items.
    """
    if hour_start % SLICE_MS:
        raise ValueError(f"{hour_start} is not the start of an hour")
    winners, versions = _winning_copies(hour_start, hour_start + SLICE_MS, tier_copies, blocks, format_ts(hour_start))
    clusters: dict[int, list[tuple[int, tuple[str, str], Reading]]] = {}
    for (entity, ts, event_id), (_, in_tier, reading) in winners.items():
        if in_tier:
            clusters.setdefault(cluster_of(entity), []).append((ts, (entity, event_id), reading))
    owned = frozenset(dense)

    def cut(cluster: int, readings: Sequence[Reading]) -> list[CompactedBlock]:
        entities = {r.entity_id for r in readings}
        version = max(versions[e] for e in entities)
        encoded = encode_cluster(readings, version, span_limit_ms=MAX_COMPACTED_SPAN_MS)
        ttl = (encoded.last_ms + retention_ms) // 1000 if retention_ms is not None else None
        item, size, units = keyed_item(pk, cluster_sk_stem(cluster, encoded), encoded.payload, ttl)
        if size > MAX_BLOCK_ITEM_BYTES and len(readings) > 1:
            half = len(readings) // 2
            return cut(cluster, readings[:half]) + cut(cluster, readings[half:])
        flagged = frozenset(entities & owned)
        return [
            CompactedBlock(
                table, pk, str(item["sk"]), tuple(readings), version, encoded.payload, size, units, ttl, flagged
            )
        ]

    out: list[CompactedBlock] = []
    for cluster, members in sorted(clusters.items()):
        members.sort(key=lambda member: member[:2])
        keys = [(ts, tie, i) for i, (ts, tie, _) in enumerate(members)]
        estimates = [body_estimate(reading) for _, _, reading in members]
        for run in cut_runs(keys, estimates, span_limit_ms=MAX_COMPACTED_SPAN_MS):
            out += cut(cluster, [members[i][2] for i in run])
    return out


def _winning_copies(
    start: int, end: int, tier: Copies, blocks: Copies, what: str
) -> tuple[dict[tuple[str, int, str], tuple[int, bool, Reading]], dict[str, int]]:
    """Each reading (entity, time, event id) of ``[start, end)`` once: (version, in the write tier,
    reading) of its copy of the highest version, a block's (``blocks``) where a block copy and a write-tier
    copy (``tier``) have one version; and per entity the largest version of its write-tier copies in the range.
    A write-tier copy outside the range is an error (``what`` names the range); a block's is left out."""
    winners: dict[tuple[str, int, str], tuple[int, bool, Reading]] = {}
    versions: dict[str, int] = {}
    for in_tier, copies in ((False, blocks), (True, tier)):
        for version, readings in copies:
            for reading in readings:
                if not start <= reading.ts_ms < end:
                    if in_tier:
                        raise ValueError(f"a group item of {what} holds a reading at {format_ts(reading.ts_ms)}")
                    continue
                key = (reading.entity_id, reading.ts_ms, reading.event_id)
                held = winners.get(key)
                if held is None or version > held[0]:
                    winners[key] = (version, in_tier, reading)
                if in_tier:  # (a block's copy is read by both passes of an hour written under two G's)
                    versions[reading.entity_id] = max(version, versions.get(reading.entity_id, version))
    return winners, versions
