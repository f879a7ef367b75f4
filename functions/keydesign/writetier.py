"""The write tier: sparse entities' readings packed across entities, compacted into blocks each hour.

A block pays off by the readings one entity sends per ingest batch. Most fleets send few (one
reading per device every few minutes), so their blocks hold one reading each and cost a write
unit apiece. The write tier packs across entities instead (docs/decisions.md, "The write tier"):

* **Groups.** Every entity belongs to one of G groups, ``stable_hash(entity) mod G``
  (:meth:`WriteTier.group_of`). The producer publishes with the group as the Kinesis partition
  key, so an ingest batch holds the readings of a few groups, not of every group.
* **Group items.** What one ingest batch holds of a group in an hour, from its entities that send
  fewer than :data:`DENSE_READINGS` readings in the batch (a denser entity writes its own blocks,
  as before), is written as *group items* (block format 4, :func:`keydesign.blocks.encode_group`):
  the readings of many entities, each item within the block limits (10 s of span, 1,000 readings,
  64 KB), in the partition ``w#<group>#<hour>`` of the hour's table, sort key
  ``<first ts>#<item id>#<write units>``, expiring :data:`KEEP_MS` after the hour ends.
* **Only the current hour.** A reading goes to the write tier only if its hour had not ended when
  the batch started (:func:`in_write_tier`). A late reading (its hour ended before its batch
  started) is written as a block of its own entity, as before: so once an hour has ended and its
  last batch has settled, its group items never change, and compaction reads each of them once.
* **Dense marks.** An entity that writes its own blocks in an hour that is still in the write
  tier leaves a *dense mark* in its group's partition (sort key ``!dense#<entity>``, below every
  item). Compaction then reads that entity's blocks of the hour too, so the compacted copy of a
  reading never wins over a newer copy of it in a block (:class:`CompactedVersion` below).
* **Compaction.** Once an hour has ended and settled (ingest's timeout and a minute), a scheduled
  pass reads each group's partition of it once and writes *compacted blocks*: one entity's
  readings of the hour (and of its bucket) in block format 3, spanning up to
  :data:`MAX_COMPACTED_SPAN_MS`, in the partition ``<shard>#<bucket>#c`` (hybrid) or
  ``<entity>#c`` (:func:`compacted_pk`), sort key as a block's.
  Its state (:class:`CompactionState`) holds the watermark ``through``, the end of the last hour
  done, the G it runs with and the earlier G's whose group items uncompacted hours may hold: a
  change of G keeps every reading where compaction and readers look (docs/writetier.md).
* **Reads** of an hour before the watermark read the compacted blocks and the blocks; of a later
  hour, the group items and the blocks. Each reading comes once, its newest copy winning.

Compacted versions. A block carries one version, the largest Kinesis sequence number of the
records its readings came from, and of two copies of a reading the higher version wins. A
compacted block is given the largest version of every copy compaction read for its entity (the
group items that hold the entity's readings, and its dense-marked blocks), and holds only the
readings whose winning copy is in the write tier: a copy of one of them in a block is older, and
a copy written after compaction comes from a later batch of the entity's Kinesis shard, so it is
newer. The write tier relies on an entity's readings arriving on one Kinesis shard, in order.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from .blocks import (
    MAX_BLOCK_ITEM_BYTES,
    Encoded,
    ItemKey,
    block_item,
    body_estimate,
    cut_runs,
    encode_block,
    encode_group,
    keyed_item,
    last_copies,
)
from .errors import ConfigError
from .hashing import shard_of
from .model import Reading
from .periods import DAY_MS, HOUR_MS
from .shardmap import ShardMap
from .timefmt import format_ts

if TYPE_CHECKING:  # layouts imports this module
    from .layouts import Block, Layout

#: The write tier's slice: a group item holds readings of one hour, compaction works an hour at a time.
SLICE_MS = HOUR_MS
#: An entity with at least this many readings in one ingest batch writes its own blocks.
DENSE_READINGS = 8
#: A group item expires this long after its hour ends: compaction has that long to read it.
KEEP_MS = 4 * DAY_MS
#: A compacted block's readings lie within this of its first one (an hour; one bucket at most).
MAX_COMPACTED_SPAN_MS = HOUR_MS
#: The most groups a deployment may have (a group number is written in 4 digits).
MAX_GROUPS = 9_999
#: The sort key of a dense mark is this and then the entity: it sorts below every group item.
DENSE_MARK_PREFIX = "!dense#"
GROUP_PK_PREFIX = "w#"
COMPACTED_PK_SUFFIX = "#c"


def slice_start(ts_ms: int) -> int:
    """The start of the write tier's slice (hour) holding ``ts_ms``."""
    return ts_ms - ts_ms % SLICE_MS


def in_write_tier(ts_ms: int, batch_start_ms: int) -> bool:
    """Whether a reading at ``ts_ms`` of a batch that started at ``batch_start_ms`` may go to the
    write tier: its hour had not ended when the batch started."""
    return slice_start(ts_ms) + SLICE_MS > batch_start_ms


@dataclass(frozen=True, slots=True)
class WriteTier:
    """The write tier of a deployment: its group count."""

    groups: int

    def __post_init__(self) -> None:
        if not 1 <= self.groups <= MAX_GROUPS:
            raise ConfigError("write_tier_groups", f"must be 1 to {MAX_GROUPS}, not {self.groups}")

    def group_of(self, entity_id: str) -> int:
        """The group of ``entity_id``; the producer's partition key is :meth:`partition_key` of it."""
        return shard_of(entity_id, self.groups)

    def partition_key(self, entity_id: str) -> str:
        """The Kinesis partition key a producer gives ``entity_id``'s readings: its group's, so a
        batch holds a few groups' readings and an entity's readings stay on one shard, in order."""
        return f"g{self.group_of(entity_id):04d}"

    def group_pk(self, group: int, ts_ms: int) -> str:
        """The partition of ``group``'s items of the hour holding ``ts_ms``."""
        if not 0 <= group < self.groups:
            raise ValueError(f"group {group} is not one of the {self.groups} groups")
        return f"{GROUP_PK_PREFIX}{group:04d}#{format_ts(slice_start(ts_ms))[:16]}"


def group_sk_stem(encoded: Encoded) -> str:
    """A group item's sort key before ``#<write units>``: ``<first ts>#<item id>``."""
    return f"{format_ts(encoded.first_ms)}#{encoded.block_id}"


def dense_mark_sk(entity_id: str) -> str:
    """The sort key of ``entity_id``'s dense mark in its group's partition of an hour."""
    return f"{DENSE_MARK_PREFIX}{entity_id}"


def compacted_pk(entity_id: str, hybrid_base: str | None) -> str:
    """The partition of ``entity_id``'s compacted blocks: beside a hybrid base partition
    ``<shard>#<bucket>`` (``<shard>#<bucket>#c``, shared by its entities), or ``<entity>#c``."""
    return f"{hybrid_base if hybrid_base is not None else entity_id}{COMPACTED_PK_SUFFIX}"


# -- the compaction watermark ---------------------------------------------------------------

#: The compaction state: control table, pk STATE_PK, sk the table prefix (as the rollups' state).
STATE_PK = "compactstate"


def state_key(table_prefix: str) -> dict[str, str]:
    """The control-table key of the compaction state of the deployment writing ``table_prefix``."""
    return {"pk": STATE_PK, "sk": table_prefix}


@dataclass(frozen=True, slots=True)
class EarlierGroups:
    """A group count the write tier had before the deployed one: its group items may be in the hours
    that start before ``until_ms`` (the end of the last hour its ingest may have written)."""

    groups: int
    until_ms: int

    def holds(self, hour_start: int) -> bool:
        return hour_start < self.until_ms


#: ``until_ms`` of the group count the state records when a reader runs with another: every hour.
FOREVER_MS = 2**62


@dataclass(frozen=True, slots=True)
class CompactionState:
    """The compaction state item (:func:`state_key`), parsed strictly (:meth:`from_item`).

    ``through``: every hour before it is compacted (0: none yet). ``groups``: the G compaction last
    ran with (None in an item written before it was recorded). ``previous``: the earlier group counts
    whose group items uncompacted hours may still hold (newest first; dropped once ``through`` passes
    their ``until_ms``). ``group``/``group_tier``: the cursor inside the hour at ``through``: the groups
    before ``group`` of the G ``group_tier`` are compacted (0: the deployed G)."""

    through: int = 0
    groups: int | None = None
    previous: tuple[EarlierGroups, ...] = ()
    group: int = 0
    group_tier: int = 0
    #: When compaction last moved ``through`` (its clock, epoch ms; 0: not recorded): every re-mark it
    #: put for the hours before ``through`` is stamped by then (``rollup.logic``'s ``totals_through``).
    advanced_at: int = 0

    @classmethod
    def from_item(cls, item: Mapping[str, object] | None) -> CompactionState:
        """The state of a stored item (plain values; numbers as ints or digit strings); the empty state
        for None. A malformed field is refused with a ValueError naming it."""
        if item is None:
            return cls()
        through = _whole(item, "through")
        if through is None:
            raise ValueError("the compaction state's 'through' is not epoch milliseconds: None")
        if through % SLICE_MS:
            raise ValueError(f"the compaction state's 'through' ({through}) is not the end of an hour")
        groups = _whole(item, "groups")
        if groups is not None and not 1 <= groups <= MAX_GROUPS:
            raise ValueError(f"the compaction state's 'groups' ({groups}) is not 1 to {MAX_GROUPS}")
        previous = item.get("previous") or ""
        if not isinstance(previous, str):
            raise ValueError(f"the compaction state's 'previous' is not '<groups>@<until ms>,...': {previous!r}")
        earlier: list[EarlierGroups] = []
        for entry in filter(None, previous.split(",")):
            count, _, until = entry.partition("@")
            if not (count.isdigit() and until.isdigit()) or not 1 <= int(count) <= MAX_GROUPS or int(until) % SLICE_MS:
                raise ValueError(f"the compaction state's 'previous' has a malformed entry {entry!r}")
            earlier.append(EarlierGroups(int(count), int(until)))
        return cls(
            through,
            groups,
            tuple(earlier),
            _whole(item, "group") or 0,
            _whole(item, "group_tier") or 0,
            _whole(item, "advanced_at") or 0,
        )

    def item(self) -> dict[str, object]:
        """The fields of the state item (plain values), beside :func:`state_key`."""
        fields: dict[str, object] = {"through": self.through, "group": self.group, "group_tier": self.group_tier}
        if self.advanced_at:
            fields["advanced_at"] = self.advanced_at
        if self.groups is not None:
            fields["groups"] = self.groups
        if self.previous:
            fields["previous"] = ",".join(f"{p.groups}@{p.until_ms}" for p in self.previous)
        return fields

    def changed_to(self, groups: int, now_ms: int, reach_ms: int) -> CompactionState:
        """The state once compaction runs with ``groups`` at ``now_ms``: if the recorded G differs, it
        becomes an earlier one, whose group items may lie in the hours up to the end of the one holding
        ``now_ms + reach_ms``, and the cursor restarts the hour at ``through``. ``reach_ms`` is the
        settle time (the old configuration's ingest finishes within its timeout, under it, of the
        deploy, which came before this run) plus how far ahead of its batch a reading may be
        (``max_future``: a batch writes the group items of the hours its readings lie in)."""
        if self.groups is None or self.groups == groups:
            return replace(self, groups=groups)
        earlier = (EarlierGroups(self.groups, slice_start(now_ms + reach_ms) + SLICE_MS), *self.previous)
        return replace(self, groups=groups, previous=earlier, group=0, group_tier=0)

    def advanced(self, now_ms: int) -> CompactionState:
        """The state once the hour at ``through`` is compacted, at ``now_ms``: the next hour, the earlier
        group counts that may still hold uncompacted hours."""
        through = self.through + SLICE_MS
        previous = tuple(p for p in self.previous if p.holds(through))
        return replace(self, through=through, previous=previous, group=0, group_tier=0, advanced_at=now_ms)

    def earlier_for(self, tier: WriteTier | None) -> tuple[EarlierGroups, ...]:
        """What a reader (or compaction) with ``tier`` reads of an uncompacted hour beside its own
        groups: every earlier G and, if the recorded G is another (compaction has not yet run with the
        reader's), that G for every hour; never the reader's own, each G once (its latest ``until_ms``).
        Nothing without a write tier."""
        if tier is None:
            return ()
        recorded = () if self.groups is None else (EarlierGroups(self.groups, FOREVER_MS),)
        until: dict[int, int] = {}
        for entry in (*recorded, *self.previous):
            if entry.groups != tier.groups:
                until[entry.groups] = max(until.get(entry.groups, 0), entry.until_ms)
        return tuple(EarlierGroups(count, end) for count, end in until.items())


def _whole(item: Mapping[str, object], name: str) -> int | None:
    """A whole number field of the state item (an int or its digits), None when absent."""
    value = item.get(name)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | str) or not str(value).isdigit():
        raise ValueError(f"the compaction state's {name!r} is not a whole number: {value!r}")
    return int(value)


def earlier_tiers(earlier: Sequence[EarlierGroups], hour_start: int) -> list[WriteTier]:
    """The write tiers of the earlier group counts whose items the hour starting at ``hour_start`` may hold."""
    return [WriteTier(e.groups) for e in earlier if e.holds(hour_start)]


def hour_tiers(deployed: WriteTier, state: CompactionState, hour_start: int, chosen: WriteTier) -> list[WriteTier]:
    """The write tiers besides ``chosen`` whose group items the hour starting at ``hour_start`` may hold
    (a change of G), each G once."""
    tiers = {t.groups: t for t in (deployed, *earlier_tiers(state.earlier_for(deployed), hour_start))}
    return [t for g, t in sorted(tiers.items()) if g != chosen.groups]


def tier_for_hour(deployed: WriteTier, state: CompactionState, hour_start: int) -> WriteTier:
    """The write tier compaction works ``hour_start`` with (its partials' groups, a redo's group):
    the largest G whose ingest may have written the hour, the deployed one or an earlier one."""
    tiers = [deployed, *earlier_tiers(state.earlier_for(deployed), hour_start)]
    return max(tiers, key=lambda tier: tier.groups)


# -- packing group items (ingest) -----------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GroupItem:
    """One group item, ready to write: a :class:`keydesign.Block`'s sibling holding the readings of
    many entities (of one group and hour). ``origins`` are the indexes (in what :func:`pack_batch`
    was given) of every entry it stands for: its readings and the earlier copies they replaced."""

    key: ItemKey
    group: int
    readings: tuple[Reading, ...]
    origins: tuple[int, ...]
    encoded: Encoded
    size: int
    write_units: int
    ttl: int

    @property
    def first_ms(self) -> int:
        return self.encoded.first_ms

    @property
    def last_ms(self) -> int:
        return self.encoded.last_ms

    def item(self) -> dict[str, object]:
        """The item in plain Python values (the payload as bytes)."""
        return block_item(self.key.pk, self.key.sk, self.encoded.payload, self.ttl)


@dataclass(frozen=True, slots=True)
class DenseMark:
    """A dense entity's mark in its group's partition of an hour (:func:`dense_mark_sk`)."""

    table: str
    pk: str
    sk: str
    ttl: int

    def item(self) -> dict[str, object]:
        return {"pk": self.pk, "sk": self.sk, "ttl": self.ttl}


@dataclass(frozen=True, slots=True)
class BatchPacking:
    """What one ingest batch writes: its blocks (:meth:`keydesign.Layout.pack`; ``origins`` index what
    :func:`pack_batch` was given), its group items, and the dense marks the blocks need, each with the
    indexes of the blocks that must not be written before it is stored."""

    blocks: list[Block]
    group_items: list[GroupItem]
    dense_marks: dict[DenseMark, list[int]]


def tier_ttl(hour_start_ms: int, newest_ms: int, retention_ms: int | None) -> int:
    """A write-tier item's expiry (epoch seconds): :data:`KEEP_MS` after its hour ends, or its newest
    reading's retention expiry if that comes first."""
    expiry = hour_start_ms + SLICE_MS + KEEP_MS
    if retention_ms is not None:
        expiry = min(expiry, newest_ms + retention_ms)
    return expiry // 1000


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
    Group items: the rest, per (group, hour) sorted by (time, entity, event id), cut as blocks are
    (:func:`keydesign.blocks.cut_runs`, halved while an item is over MAX_BLOCK_ITEM_BYTES), version
    the largest of their entries'. Dense marks: one per (entity, hour) of a block's readings still in
    the write tier. Deterministic (but for ``rng`` in the random layout): a redelivered batch makes
    the same items.
    """
    winners, replaced = last_copies(entries)
    counts = Counter(entity for entity, _, _ in winners)
    dense = {entity for entity, count in counts.items() if count >= DENSE_READINGS}
    to_blocks: list[int] = []
    hours: dict[tuple[int, int], list[tuple[int, tuple[str, str], int]]] = {}
    for (entity, ts, event_id), index in winners.items():
        if entity in dense or not in_write_tier(ts, batch_start_ms):
            to_blocks += [index, *replaced.get(index, ())]
        else:
            hours.setdefault((tier.group_of(entity), slice_start(ts)), []).append((ts, (entity, event_id), index))
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
        return [GroupItem(key, group, readings, origins, encoded, size, units, ttl)]

    items: list[GroupItem] = []
    for (group, hour), members in sorted(hours.items()):
        members.sort()
        for run in cut_runs(members, [body_estimate(entries[index][0]) for _, _, index in members]):
            items.extend(cut(group, hour, run))

    marks: dict[DenseMark, list[int]] = {}
    for position, block in enumerate(blocks):
        for hour in sorted({slice_start(r.ts_ms) for r in block.readings if in_write_tier(r.ts_ms, batch_start_ms)}):
            mark = DenseMark(
                layout.table_for(hour),
                tier.group_pk(tier.group_of(block.entity_id), hour),
                dense_mark_sk(block.entity_id),
                tier_ttl(hour, hour + SLICE_MS - 1, retention_ms),
            )
            marks.setdefault(mark, []).append(position)
    return BatchPacking(blocks, items, marks)


# -- compacting -----------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class CompactedBlock:
    """One compacted block, ready to put: its key, its readings (one entity's, in one bucket of one
    hour), the version it was given and its payload (block format 3, spanning up to an hour)."""

    table: str
    pk: str
    sk: str
    entity_id: str
    readings: tuple[Reading, ...]
    version: int
    payload: bytes
    size: int
    write_units: int
    ttl: int | None
    #: The entity's hour is the rollup function's (it wrote blocks in it: a dense mark): the block is
    #: stored with ``r`` = 1, and its readings are left out of the group's partial and of the
    #: aggregates compacted blocks answer (its rollups hold them).
    rollups: bool = False

    def item(self) -> dict[str, object]:
        """The item in plain Python values (the payload as bytes)."""
        item = block_item(self.pk, self.sk, self.payload, self.ttl)
        if self.rollups:
            item[ROLLUP_OWNED] = 1
        return item


#: The attribute of a compacted block whose entity's hour is the rollup function's.
ROLLUP_OWNED = "r"

#: Decoded copies of readings: per item or block read, its version and its readings.
Copies = Iterable[tuple[int, Sequence[Reading]]]


def compact_hour(
    layout: Layout,
    shard_map: ShardMap,
    hour_start: int,
    tier: Copies,
    blocks: Copies = (),
    *,
    retention_ms: int | None = None,
    dense: Collection[str] = (),
) -> list[CompactedBlock]:
    """The compacted blocks of one group's hour starting at ``hour_start``.

    ``tier`` holds the decoded group items of the hour (their readings all lie in it), ``blocks``
    the decoded blocks of the hour of the entities with a dense mark (their readings outside the
    hour are left out). Each reading (entity, time, event id) is kept once, its copy of the highest
    version winning; of a block copy and a write-tier copy of one version, the block's (it is already
    stored where readers look). Per entity, the readings whose winning copy is in the write tier
    are compacted: cut at the layout's bucket boundaries and by the block limits
    (:func:`keydesign.blocks.cut_runs`, spanning up to :data:`MAX_COMPACTED_SPAN_MS`), each block
    given the largest version of every copy read of the entity's readings (the module's
    "Compacted versions"), in :func:`compacted_pk` beside the entity's hybrid base partition, sort
    key as a block's, ``ttl`` its newest reading's expiry by ``retention_ms``. The blocks of the
    entities in ``dense`` (those with a dense mark: their hour is the rollup function's) are flagged
    :attr:`CompactedBlock.rollups`. The result depends only on the copies given (in the order
    stored): compacting an hour again puts the same items.
    """
    if hour_start % SLICE_MS:
        raise ValueError(f"{hour_start} is not the start of an hour")
    hour_end = hour_start + SLICE_MS
    winners: dict[tuple[str, int, str], tuple[int, bool, Reading]] = {}
    versions: dict[str, int] = {}

    def keep(version: int, readings: Sequence[Reading], in_tier: bool) -> None:
        for reading in readings:
            if not hour_start <= reading.ts_ms < hour_end:
                if in_tier:
                    raise ValueError(
                        f"a group item of {format_ts(hour_start)} holds a reading at {format_ts(reading.ts_ms)}"
                    )
                continue
            key = (reading.entity_id, reading.ts_ms, reading.event_id)
            held = winners.get(key)
            if held is None or version > held[0]:
                winners[key] = (version, in_tier, reading)
            versions[reading.entity_id] = max(version, versions.get(reading.entity_id, version))

    for version, readings in blocks:
        keep(version, readings, False)
    for version, readings in tier:
        keep(version, readings, True)
    runs: dict[tuple[str, int], list[Reading]] = {}
    for (entity, ts, _), (_, in_tier, reading) in sorted(winners.items()):
        if in_tier:
            runs.setdefault((entity, layout.bucket.start(ts)), []).append(reading)
    out: list[CompactedBlock] = []
    for (entity, bucket_start), readings in runs.items():
        pk = layout.compacted_partition(entity, bucket_start, shard_map)
        table = layout.table_for(bucket_start)
        members = [(r.ts_ms, r.event_id, i) for i, r in enumerate(readings)]
        for run in cut_runs(members, list(map(body_estimate, readings)), span_limit_ms=MAX_COMPACTED_SPAN_MS):
            out += _compacted(
                layout, table, pk, [readings[i] for i in run], versions[entity], retention_ms=retention_ms
            )
    owned = frozenset(dense)
    return [replace(block, rollups=True) if block.entity_id in owned else block for block in out]


def _compacted(
    layout: Layout, table: str, pk: str, readings: list[Reading], version: int, *, retention_ms: int | None
) -> list[CompactedBlock]:
    """``readings`` as one compacted block, or halves of them while one is over the item limit."""
    encoded = encode_block(readings, version, span_limit_ms=MAX_COMPACTED_SPAN_MS)
    entity = readings[0].entity_id
    ttl = (encoded.last_ms + retention_ms) // 1000 if retention_ms is not None else None
    item, size, units = keyed_item(pk, layout.block_sk_stem(entity, encoded), encoded.payload, ttl)
    if size > MAX_BLOCK_ITEM_BYTES and len(readings) > 1:
        half = len(readings) // 2
        return [
            *_compacted(layout, table, pk, readings[:half], version, retention_ms=retention_ms),
            *_compacted(layout, table, pk, readings[half:], version, retention_ms=retention_ms),
        ]
    sk = str(item["sk"])
    return [CompactedBlock(table, pk, sk, entity, tuple(readings), version, encoded.payload, size, units, ttl)]
