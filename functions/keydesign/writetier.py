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
  64 KB) and one re-pack slice, in the partition ``w#<group>#<hour>`` of the hour's table, sort key
  ``<first ts>#<item id>#<write units>``, expiring :data:`KEEP_MS` after the hour ends.
* **Only the current slice.** A reading goes to the write tier only if its *re-pack slice*
  (:data:`REPACK_MS`, 5 minutes of its hour) had not ended :data:`GRACE_MS` (a minute) before the
  batch started (:func:`in_write_tier`). A late reading (its slice ended longer ago) is written as a
  block of its own entity, as before: so once a slice's grace has ended and its last batch has settled, its
  group items never change; the re-pack reads each of them once, and compaction, an hour later, too.
* **Dense marks.** An entity that writes its own blocks in an hour that is still in the write
  tier (:func:`hour_open`: a dense entity's, or a reading late past its slice but not its hour)
  leaves a *dense mark* in its group's partition (sort key ``!dense#<entity>``, below every
  item). Compaction (and the re-pack) then reads that entity's blocks of the hour too, so the
  compacted copy of a reading never wins over a newer copy of it in a block (the versions below).
* **Sub-items (the re-pack).** Every re-pack slice, once settled, the compaction function re-packs
  each group's items of it into *sub-items*: per *sub-group* (:func:`sub_group_of`, a second hash of
  the entity, mod :data:`SUBGROUPS`) the slice's readings whose newest copy is in the group items, in
  block format 4 spanning up to the slice, in the partition ``s#<group>#<hour>`` (the number of the
  group partition they were read from, :meth:`WriteTier.sub_pk`), sort key
  ``<sub>#<first ts>#<item id>#<write units>`` (:func:`sub_sk_stem`), expiring as the group items.
  A device's re-packed part of an uncompacted hour is so one Query of its sub-group's sort keys, not
  its group's whole items. The state's ``repack_from``/``repacked`` say which slices are re-packed.
* **Compaction.** Once an hour has ended and settled (the grace, ingest's timeout and a minute:
  :func:`tier_settle`), a scheduled pass reads each group's partition of it once and writes
  *cluster blocks*: per *cluster* of the group's entities (:func:`cluster_of`, a second hash of the
  entity, mod :data:`CLUSTERS`) its readings of the hour, in block format 5 (a section an entity:
  :func:`keydesign.blocks.encode_cluster`) spanning up to
  :data:`MAX_COMPACTED_SPAN_MS`, in the partition ``c#<group>#<span>`` (the number of the group
  partition they were read from, :meth:`WriteTier.cluster_pk`; the span is the hour's table's day, or
  its hybrid bucket of an hour or more: ``keydesign.Layout.cluster_span``), sort key
  ``<cluster>#<first ts>#<item id>#<write units>`` (:func:`cluster_sk_stem`). A device's compacted hours
  of a span are so one Query of its cluster's sort keys (a few entities' hours, under 4 KB at the G ``tsctl plan``
  gives), and a few hundred bytes of several entities share a write unit. The entities whose hour is the
  rollup function's are named in the block's :data:`ROLLUP_OWNED` string set. The state's ``clustered``
  (:class:`Clustered`) records the G's each compacted hour was compacted under, for readers. Hours
  compacted before cluster blocks (``clustered`` empty, or before its first entry) hold *compacted
  blocks*: one entity's readings of the hour (and of its bucket) in block format 3, in the partition
  ``<shard>#<bucket>#c`` (hybrid) or ``<entity>#c`` (:func:`compacted_pk`), sort key as a block's, the
  flag :data:`ROLLUP_OWNED` = 1 when its hour is the rollup function's; readers still read them.
  Its state (:class:`CompactionState`) holds the watermark ``through``, the end of the last hour
  done, the G it runs with and the earlier G's whose group items uncompacted hours may hold: a
  change of G keeps every reading where compaction and readers look (docs/writetier.md). Its first
  run starts at the earliest *start item* (:func:`tier_start_pk`), which each ingest container puts
  before its first group items, stamped with the hour of its batch's start less the grace
  (:func:`tier_stamp`: the earliest hour the batch may write group items of).
* **Reads** of an hour before the watermark read the cluster (or compacted) blocks and the blocks; of a later
  hour, the group items (or, for its re-packed slices, the entity's sub-items) and the blocks.
  Each reading comes once, its newest copy winning.

Compacted versions. A block carries one version, the largest Kinesis sequence number of the
records its readings came from, and of two copies of a reading the higher version wins. A
cluster block is given the largest version of its entities' copies in the group items compaction read
(the group partition's), and holds only the readings whose winning copy is in the write tier: a copy of
one of them in a block is older, and a copy written after compaction comes from a later batch of the
group's Kinesis shard (every item read from one group partition was published with its partition key,
:meth:`WriteTier.partition_key`), so it is newer. Not of their blocks' copies: an entity written under
two G's in one hour has its older copies in the earlier G's partition and its newer in the later's, and
its blocks of the hour are read by both passes; a block's version in the earlier pass's cluster block
would tie it with the later's, and an older copy could win (found by the rollups' exactness property
test). The write tier relies on an entity's readings arriving on one Kinesis shard, in order.

Sub-item versions. A sub-item holds only the readings whose winning copy is in the slice's group
items (a dense-marked entity's blocks read as compaction reads them), and is given the largest
version of its readings' winning copies: every other copy of them is older, and a copy written later
comes from a batch that started after the slice's grace ended (a block: the slice rule), so it is newer than
every group item of the slice (one group is one Kinesis shard).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

from .blocks import (
    Encoded,
    EncodedItem,
)
from .errors import ConfigError
from .hashing import shard_of, stable_hash
from .periods import DAY_MS, HOUR_MS, MINUTE_MS
from .timefmt import format_ts

#: The write tier's slice: a group item holds readings of one hour, compaction works an hour at a time.
SLICE_MS = HOUR_MS
#: The re-pack's slice: a reading goes to the write tier only while its slice is open, and each settled
#: slice of a group's items is re-packed into sub-items. Divides the hour.
REPACK_MS = 5 * MINUTE_MS
#: The slice rule's grace: a reading still goes to the write tier while its re-pack slice ended less than
#: this before its batch started (:func:`in_write_tier`), so a batch that starts just after a slice ends
#: (a reading sent at its end, a short queue) does not make its readings late; each slice (and hour) of the
#: write tier settles that much later for it (:func:`tier_settle`).
GRACE_MS = MINUTE_MS
#: The sub-groups a group's slice is re-packed into (:func:`sub_group_of`); 2 digits in a sort key.
SUBGROUPS = 16
#: The clusters a group's hour is compacted into (:func:`cluster_of`); 3 digits in a sort key. At the G
#: ``tsctl plan`` gives (a group's 10 minutes of items about 100 KB), a cluster's hour is a few hundred
#: bytes to 1 KB: one write unit for several entities' hours, and one 0.5-unit Query for a device's
#: (docs/decisions.md, "Compacted blocks of several entities").
CLUSTERS = 256
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
SUB_PK_PREFIX = "s#"
CLUSTER_PK_PREFIX = "c#"
COMPACTED_PK_SUFFIX = "#c"


def slice_start(ts_ms: int) -> int:
    """The start of the write tier's slice (hour) holding ``ts_ms``."""
    return ts_ms - ts_ms % SLICE_MS


def repack_start(ts_ms: int) -> int:
    """The start of the re-pack slice (:data:`REPACK_MS`) holding ``ts_ms``."""
    return ts_ms - ts_ms % REPACK_MS


def in_write_tier(ts_ms: int, batch_start_ms: int) -> bool:
    """Whether a reading at ``ts_ms`` of a batch that started at ``batch_start_ms`` may go to the
    write tier: its re-pack slice had not ended :data:`GRACE_MS` before the batch started."""
    return repack_start(ts_ms) + REPACK_MS + GRACE_MS > batch_start_ms


def hour_open(ts_ms: int, batch_start_ms: int) -> bool:
    """Whether the hour of a reading at ``ts_ms`` was still in the write tier when its batch started at
    ``batch_start_ms`` (its last slice was, :func:`in_write_tier`): a block holding it needs its
    entity's dense mark of the hour."""
    return in_write_tier(slice_start(ts_ms) + SLICE_MS - 1, batch_start_ms)


def tier_settle(settle_ms: int) -> int:
    """How long after its end a slice (or an hour) of the write tier has settled, for the ``settle_ms``
    of its batches (longer than ingest's timeout): its last batch starts within :data:`GRACE_MS` of
    its end."""
    return settle_ms + GRACE_MS


def tier_stamp(batch_start_ms: int) -> int:
    """The earliest time whose hour a batch that started at ``batch_start_ms`` may write group items
    of (the hour of its start items' stamp): its start less :data:`GRACE_MS`."""
    return batch_start_ms - GRACE_MS


def sub_group_of(entity_id: str) -> int:
    """The sub-group of ``entity_id`` (0 to :data:`SUBGROUPS` - 1): the high 32 bits of its stable hash,
    mod :data:`SUBGROUPS`, so it does not depend on the group (the low bits, mod G) nor on G."""
    return (stable_hash(entity_id) >> 32) % SUBGROUPS


def cluster_of(entity_id: str) -> int:
    """The cluster of ``entity_id`` within its group (0 to :data:`CLUSTERS` - 1): the high 32 bits of its
    stable hash, mod :data:`CLUSTERS` (its sub-group is this mod :data:`SUBGROUPS`)."""
    return (stable_hash(entity_id) >> 32) % CLUSTERS


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

    def sub_pk(self, group: int, ts_ms: int) -> str:
        """The partition of the sub-items re-packed from ``group``'s partition of the hour holding ``ts_ms``."""
        return SUB_PK_PREFIX + self.group_pk(group, ts_ms).removeprefix(GROUP_PK_PREFIX)

    def cluster_pk(self, group: int, span_start_ms: int) -> str:
        """The partition of the cluster blocks compacted from ``group``'s partitions of the hours in the span
        starting at ``span_start_ms`` (``keydesign.Layout.cluster_span``: an hour, or a day or a bucket)."""
        if not 0 <= group < self.groups:
            raise ValueError(f"group {group} is not one of the {self.groups} groups")
        return f"{CLUSTER_PK_PREFIX}{group:04d}#{format_ts(span_start_ms)[:16]}"


def group_sk_stem(encoded: Encoded) -> str:
    """A group item's sort key before ``#<write units>``: ``<first ts>#<item id>``."""
    return f"{format_ts(encoded.first_ms)}#{encoded.block_id}"


def sub_prefix(sub: int) -> str:
    """What every sort key of sub-group ``sub``'s sub-items starts with: ``<sub>#``, two digits."""
    return f"{sub:02d}#"


def sub_sk_stem(sub: int, encoded: Encoded) -> str:
    """A sub-item's sort key before ``#<write units>``: ``<sub>#<first ts>#<item id>``."""
    return f"{sub_prefix(sub)}{group_sk_stem(encoded)}"


def cluster_prefix(cluster: int) -> str:
    """What every sort key of cluster ``cluster``'s blocks starts with: ``<cluster>#``, three digits."""
    return f"{cluster:03d}#"


def cluster_sk_stem(cluster: int, encoded: Encoded) -> str:
    """A cluster block's sort key before ``#<write units>``: ``<cluster>#<first ts>#<item id>``."""
    return f"{cluster_prefix(cluster)}{group_sk_stem(encoded)}"


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


#: The write tier's *start items*: control table, pk ``compactstart#<prefix>``, sk the hour of an ingest
#: container's batch's start less the grace (:func:`tier_stamp`) when it wrote its first group items
#: (``adapters.start_items``). A first
#: compaction run starts at the earliest (``compaction.logic``), not ``KEEP_MS`` back.
START_PREFIX = "compactstart#"
#: The partition keys of the start items, as an IAM ``dynamodb:LeadingKeys`` pattern.
START_KEYS = (f"{START_PREFIX}*",)
#: A container writes another start item once its batches start this long after the hour of its last.
START_EVERY_MS = DAY_MS
#: A start item expires this long after its hour: after every group item it covers. Those lie in the hours
#: of batches that started before the container's next start item (``START_EVERY_MS`` past its stamp, and the
#: grace: a stamp is its batch's start less it), at most an hour and ``max_future`` (at most a day: the stack's
#: bound) past their batch's start, and expire ``KEEP_MS`` after their hour ends: 1 d + 1 min + 1 h + 1 d + 1 h
#: + 4 d = 6 d 2 h 1 min.
START_KEEP_MS = 2 * KEEP_MS


def tier_start_pk(table_prefix: str) -> str:
    """The control-table partition of the write tier's start items of the deployment writing ``table_prefix``."""
    return f"{START_PREFIX}{table_prefix}"


def tier_start_ttl(hour_start_ms: int) -> int:
    """The expiry (epoch s) of the start item of the hour starting at ``hour_start_ms``."""
    return (hour_start_ms + START_KEEP_MS) // 1000


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
class Clustered:
    """The hours from ``from_ms`` on (to the next entry's) were compacted into cluster blocks under the
    group counts ``groups`` (the hour's largest G, and any other G whose group items it held: an entity's
    cluster blocks are in the partition of its group under each)."""

    groups: tuple[int, ...]
    from_ms: int

    def text(self) -> str:
        return f"{'+'.join(map(str, self.groups))}@{self.from_ms}"


def clustered_tiers(clustered: Sequence[Clustered], hour_start: int) -> list[WriteTier] | None:
    """The write tiers the compacted hour starting at ``hour_start`` was compacted under (its entities' cluster
    blocks are in their groups' partitions under each), or None for an hour compacted before cluster blocks
    (per-entity compacted blocks: before the first entry of ``clustered``)."""
    chosen: Clustered | None = None
    for entry in clustered:
        if entry.from_ms <= hour_start and (chosen is None or entry.from_ms > chosen.from_ms):
            chosen = entry
    return None if chosen is None else [WriteTier(g) for g in chosen.groups]


@dataclass(frozen=True, slots=True)
class CompactionState:
    """The compaction state item (:func:`state_key`), parsed strictly (:meth:`from_item`).

    ``through``: every hour before it is compacted (0: none yet). ``groups``: the G compaction last
    ran with (None in an item written before it was recorded). ``previous``: the earlier group counts
    whose group items uncompacted hours may still hold (newest first; dropped once ``through`` passes
    their ``until_ms``). ``group``/``group_tier``: the cursor inside the hour at ``through``: the groups
    before ``group`` of the G ``group_tier`` are compacted (0: the deployed G). ``repack_from`` and
    ``repacked``: the re-pack slices from the one starting at ``repack_from`` to the one ending at
    ``repacked`` are re-packed into sub-items (none when equal), each under the groups of its hour's
    largest G (:func:`tier_for_hour`): a reader reads an uncompacted hour's slices in that range from
    its sub-group's items (:meth:`repacked_in`). ``repack_group``: the cursor inside the slice at
    ``repacked``: its group partitions before it are re-packed (a partition number: whatever G wrote
    the items it holds). ``clustered``: the G's of the hours compacted into cluster blocks, oldest first
    (:class:`Clustered`; an entry when they change, dropped once the next one is past retention).
    ``remarked_at``: the stamp of the newest re-mark put for an hour before ``through`` or at its cursor
    (0: none; None in an item written before it was recorded, whose re-marks are all stamped by
    ``advanced_at``): the rollup function's totals are whole to ``through`` once it has applied that slot.
    ``repacked_at``: when ``repacked`` last moved (0: not recorded): every block the re-pack read of a slice
    before it was written, and so marked, by then."""

    through: int = 0
    groups: int | None = None
    previous: tuple[EarlierGroups, ...] = ()
    group: int = 0
    group_tier: int = 0
    #: When compaction last moved ``through`` (its clock, epoch ms; 0: not recorded): every re-mark it
    #: put for the hours before ``through`` is stamped by then (``rollup.logic``'s ``totals_through``).
    advanced_at: int = 0
    repack_from: int = 0
    repacked: int = 0
    repack_group: int = 0
    clustered: tuple[Clustered, ...] = ()
    remarked_at: int | None = None
    repacked_at: int = 0

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
        repack_from, repacked = _whole(item, "repack_from") or 0, _whole(item, "repacked") or 0
        if repack_from % REPACK_MS or repacked % REPACK_MS or repack_from > repacked:
            raise ValueError(
                f"the compaction state's 'repack_from' and 'repacked' ({repack_from}, {repacked}) are not slice "
                "bounds in order"
            )
        if (_whole(item, "repack_group") or 0) > MAX_GROUPS:
            raise ValueError(f"the compaction state's 'repack_group' is over {MAX_GROUPS}")
        clustered = item.get("clustered") or ""
        if not isinstance(clustered, str):
            raise ValueError(
                f"the compaction state's 'clustered' is not '<groups>[+<groups>]@<from ms>,...': {clustered!r}"
            )
        entries: list[Clustered] = []
        for entry in filter(None, clustered.split(",")):
            counts, _, start = entry.partition("@")
            parts = counts.split("+")
            if (
                not all(p.isdigit() and 1 <= int(p) <= MAX_GROUPS for p in parts)
                or not start.isdigit()
                or int(start) % SLICE_MS
                or (entries and int(start) <= entries[-1].from_ms)
            ):
                raise ValueError(f"the compaction state's 'clustered' has a malformed entry {entry!r}")
            entries.append(Clustered(tuple(map(int, parts)), int(start)))
        return cls(
            through,
            groups,
            tuple(earlier),
            _whole(item, "group") or 0,
            _whole(item, "group_tier") or 0,
            _whole(item, "advanced_at") or 0,
            repack_from,
            repacked,
            _whole(item, "repack_group") or 0,
            tuple(entries),
            _whole(item, "remarked_at"),
            _whole(item, "repacked_at") or 0,
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
        if self.repacked:
            fields["repack_from"], fields["repacked"] = self.repack_from, self.repacked
        if self.repack_group:
            fields["repack_group"] = self.repack_group
        if self.clustered:
            fields["clustered"] = ",".join(entry.text() for entry in self.clustered)
        if self.remarked_at is not None:
            fields["remarked_at"] = self.remarked_at
        if self.repacked_at:
            fields["repacked_at"] = self.repacked_at
        return fields

    def remarked(self, stamp_ms: int) -> CompactionState:
        """The state with a re-mark stamped at ``stamp_ms`` recorded (an item written before ``remarked_at``
        was recorded starts from ``advanced_at``, by which its re-marks were all stamped)."""
        held = self.advanced_at if self.remarked_at is None else self.remarked_at
        return replace(self, remarked_at=max(held, stamp_ms))

    def repacked_in(self, hour_start: int) -> tuple[int, int] | None:
        """The re-packed part ``[from, to)`` of the hour starting at ``hour_start``, None if none."""
        low, high = max(hour_start, self.repack_from), min(hour_start + SLICE_MS, self.repacked)
        return (low, high) if low < high else None

    def repack_next(self, now_ms: int, settle_ms: int) -> int | None:
        """The start of the next slice to re-pack at ``now_ms``, None if none is due: the first after
        ``repacked`` and ``through`` that has settled (``settle_ms`` after its end), in the newest settled
        slice's hour. Once that hour has settled too (its last slice settles with it), it is compacted
        next, and only its last slice is still due, and only to extend the range (:meth:`repack_starting`)
        so readers read the hour from sub-items until it is compacted: a run each slice re-packs it. So
        after downtime the re-pack skips the hours compaction is due to do (compacting an hour costs what
        re-packing it would) and starts again at the newest."""
        newest = repack_start(now_ms - settle_ms) - REPACK_MS
        start = max(self.repacked, self.through, slice_start(newest))
        hour_end = slice_start(start) + SLICE_MS
        if start > newest or (
            hour_end + settle_ms <= now_ms and (start, start + REPACK_MS) != (self.repacked, hour_end)
        ):
            return None
        return start

    def repack_starting(self, start: int) -> CompactionState:
        """The state as the re-pack of the slice at ``start`` (:meth:`repack_next`) begins: unchanged when
        it goes on from ``repacked``; else (a skip) an empty range there, whose earlier slices readers read
        from the group items."""
        if start == self.repacked:
            return self
        return replace(self, repack_from=start, repacked=start, repack_group=0)

    def repack_advanced(self) -> CompactionState:
        """The state once every group of the slice at ``repacked`` is re-packed."""
        return replace(self, repacked=self.repacked + REPACK_MS, repack_group=0)

    def changed_to(self, groups: int, now_ms: int, reach_ms: int) -> CompactionState:
        """The state once compaction runs with ``groups`` at ``now_ms``: if the recorded G differs, it
        becomes an earlier one, whose group items may lie in the hours up to the end of the one holding
        ``now_ms + reach_ms``, and the cursor restarts the hour at ``through``. ``reach_ms`` is the
        settle time (the old configuration's ingest finishes within its timeout, under it, of the
        deploy, which came before this run) plus how far ahead of its batch a reading may be
        (``max_future``: a batch writes the group items of the hours its readings lie in). The re-packed
        range empties (readers read its slices from the group items): the version before may have
        re-packed a slice without the partitions the new G's ingest wrote."""
        if self.groups is None or self.groups == groups:
            return replace(self, groups=groups)
        earlier = (EarlierGroups(self.groups, slice_start(now_ms + reach_ms) + SLICE_MS), *self.previous)
        return replace(self, groups=groups, previous=earlier, group=0, group_tier=0, repack_from=self.repacked)

    def advanced(self, now_ms: int, groups: Sequence[int] = (), retention_ms: int | None = None) -> CompactionState:
        """The state once the hour at ``through`` is compacted into cluster blocks under ``groups`` (its largest
        G first, then the others its group items may be under), at ``now_ms``: the next hour, the earlier
        group counts that may still hold uncompacted hours, an entry of ``clustered`` if the hour's G's are
        not the last entry's, and without the entries that only cover hours older than ``retention_ms``."""
        hour, through = self.through, self.through + SLICE_MS
        previous = tuple(p for p in self.previous if p.holds(through))
        clustered = list(self.clustered)
        if groups and (not clustered or clustered[-1].groups != tuple(groups)):
            clustered.append(Clustered(tuple(groups), hour))
        if retention_ms is not None:
            while len(clustered) > 1 and clustered[1].from_ms + retention_ms <= now_ms:
                clustered.pop(0)
        return replace(
            self,
            through=through,
            previous=previous,
            group=0,
            group_tier=0,
            advanced_at=now_ms,
            clustered=tuple(clustered),
        )

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
class GroupItem(EncodedItem):
    """One group item, ready to write: a :class:`keydesign.Block`'s sibling holding the readings of
    many entities (of one group and hour). ``origins`` are the indexes (in what :func:`keydesign.tiering.pack_batch`
    was given) of every entry it stands for: its readings and the earlier copies they replaced."""

    group: int


@dataclass(frozen=True, slots=True)
class SubItem(EncodedItem):
    """One sub-item, ready to put: a sub-group's readings of a re-pack slice, from the group partition
    ``group`` (``origins`` empty: it comes from stored items, not a batch's entries)."""

    group: int
    sub: int


@dataclass(frozen=True, slots=True)
class DenseMark:
    """A dense entity's mark in its group's partition of an hour (:func:`dense_mark_sk`)."""

    table: str
    pk: str
    sk: str
    ttl: int

    def item(self) -> dict[str, object]:
        return {"pk": self.pk, "sk": self.sk, "ttl": self.ttl}


def tier_ttl(hour_start_ms: int, newest_ms: int, retention_ms: int | None) -> int:
    """A write-tier item's expiry (epoch seconds): :data:`KEEP_MS` after its hour ends, or its newest
    reading's retention expiry if that comes first."""
    expiry = hour_start_ms + SLICE_MS + KEEP_MS
    if retention_ms is not None:
        expiry = min(expiry, newest_ms + retention_ms)
    return expiry // 1000


#: The attribute naming whose hour is the rollup function's: a cluster block's string set of those entities;
#: a (per-entity) compacted block's 1 when its entity's is.
ROLLUP_OWNED = "r"
