"""Hypothesis strategies and helpers shared by the key-design property tests.

A *scenario* is a layout, a shard map built the way production builds one
(``with_global`` / ``with_entity`` with a ``now`` before every change, at
boundaries from ``earliest_change_boundary``), some readings and, for each
reading, a query range that covers its timestamp.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from keydesign import Layout, Reading, ShardMap, earliest_change_boundary
from keydesign.timefmt import from_datetime

#: One profile for every property test of the package: no deadline (the first
#: examples pay for imports), a budget that keeps the whole suite well under a
#: minute on two cores.
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])

MINUTE = 60_000
HOUR = 60 * MINUTE
DAY = 24 * HOUR

BUCKETS = ("1m", "5m", "15m", "1h", "6h", "1d")
PERIODS = (None, "hour", "day", "week", "month")
#: Buckets that nest inside an hourly table period.
HOUR_NESTING = ("1m", "5m", "15m", "1h")

#: Readings fall in [anchor - 1 day, anchor + 3 days): windows that cross a
#: month end, an ISO week (Monday) start, a year end with ISO week 53, and a leap day.
ANCHORS = tuple(from_datetime(datetime(*ymd, tzinfo=UTC)) for ymd in ((2026, 11, 29), (2026, 12, 31), (2028, 2, 28)))

#: Entities that get their own counts in generated shard maps, and one that never does.
MAPPED_ENTITIES = ("sensor-a", "hot-1", "m/x:y@z.1")
ENTITIES = (*MAPPED_ENTITIES, "plain-9")

MAX_GLOBAL = 12
MAX_ENTITY = 8

#: Lowest and highest sorting event ids (allowed characters run from '+' to 'z').
LOWEST_EVENT_ID = "+"
HIGHEST_EVENT_ID = "z" * 128

#: Fixed event ids: a block of one of them, at one of four versions, gets 256 different block
#: ids, whose hashes hit every residue mod k up to MAX_GLOBAL (checked by
#: test_probe_blocks_reach_every_partition), so packing them reaches every partition.
PROBE_EVENT_IDS = tuple(f"probe-{i}" for i in range(64))

ID_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789._:@+=/-"
event_ids = st.text(alphabet=ID_ALPHABET, min_size=1, max_size=24)


class FixedRandom(random.Random):
    """An rng whose ``randrange(n)`` returns a chosen suffix, and records ``n``."""

    def __init__(self, suffix: int) -> None:
        super().__init__(0)
        self.suffix = suffix
        self.seen: list[int] = []

    def randrange(self, start: int, stop: int | None = None, step: int = 1) -> int:
        assert stop is None, "pack draws a suffix with randrange(count)"
        self.seen.append(start)
        assert 0 <= self.suffix < start, f"suffix {self.suffix} is not a valid draw from range({start})"
        return self.suffix


@st.composite
def layouts(draw: st.DrawFn, kinds: Iterable[str] = ("random", "calculated", "hybrid")) -> Layout:
    kind = draw(st.sampled_from(tuple(kinds)))
    period = draw(st.sampled_from(PERIODS))
    bucket = draw(st.sampled_from(HOUR_NESTING if period == "hour" else BUCKETS))
    return Layout.from_settings(kind=kind, bucket=bucket, table_prefix="readings", table_period=period)


@dataclass(frozen=True)
class Step:
    """One change applied to a shard map, with the map before and after it."""

    before: ShardMap
    after: ShardMap
    now_ms: int
    effective_from_ms: int
    target: str  # "global" or an entity id
    shards: int


@st.composite
def shard_map_histories(draw: st.DrawFn, layout: Layout, anchor: int) -> tuple[ShardMap, list[Step]]:
    """A map grown by several changes, each scheduled from a later ``now``."""
    shard_map = ShardMap.initial(layout.bucket, draw(st.integers(1, MAX_GLOBAL)))
    now = anchor - DAY - draw(st.integers(0, DAY))
    steps: list[Step] = []
    changes = draw(
        st.lists(
            st.tuples(
                st.sampled_from(("global", *MAPPED_ENTITIES)),
                st.integers(1, MAX_ENTITY),
                st.integers(0, 18 * HOUR),  # how far the clock moves before the change
                st.integers(0, 2 * DAY),  # cache TTL (+ margin): how far ahead it lands
            ),
            max_size=7,
        )
    )
    for target, shards, advance, ttl in changes:
        now += advance
        effective = earliest_change_boundary(layout.bucket, now, ttl)
        history = shard_map.global_history if target == "global" else shard_map.entity_history.get(target, ())
        if history and history[-1].effective_from_ms > effective:
            # A change may not precede one already scheduled; re-scheduling
            # that (still future) change is allowed.
            effective = history[-1].effective_from_ms
        before = shard_map
        if target == "global":
            shard_map = shard_map.with_global(shards, effective, now_ms=now)
        else:
            shard_map = shard_map.with_entity(target, shards, effective, now_ms=now)
        steps.append(Step(before, shard_map, now, effective, target, shards))
    return shard_map, steps


def offsets_near(width: int, limit: int) -> st.SearchStrategy[int]:
    """Non-negative offsets: zero, around bucket multiples, or anything up to ``limit``."""
    return st.one_of(
        st.just(0),
        st.integers(0, limit),
        st.builds(lambda k, d: max(0, min(limit, k * width + d)), st.integers(0, 4), st.sampled_from((-1, 0, 1))),
    )


def reading(entity_id: str, ts_ms: int, event_id: str | None = None) -> Reading:
    raw: dict[str, object] = {"entity_id": entity_id, "timestamp": ts_ms, "measures": {"v": 1}}
    if event_id is not None:
        raw["event_id"] = event_id
    return Reading.parse(raw)


@dataclass(frozen=True)
class Query:
    reading: Reading
    from_ms: int
    to_ms: int


@dataclass(frozen=True)
class Scenario:
    layout: Layout
    shard_map: ShardMap
    steps: list[Step]
    anchor: int
    queries: list[Query]


@st.composite
def scenarios(draw: st.DrawFn, kinds: Iterable[str] = ("random", "calculated", "hybrid")) -> Scenario:
    layout = draw(layouts(kinds))
    anchor = draw(st.sampled_from(ANCHORS))
    shard_map, steps = draw(shard_map_histories(layout, anchor))
    width = layout.bucket.width_ms
    # Wide enough to cross buckets, changes and tables; narrow enough that a
    # 1-minute bucket grid stays a few hundred segments.
    span = min(2 * DAY, 150 * width)
    window_start = anchor - DAY
    queries: list[Query] = []
    for _ in range(draw(st.integers(1, 4))):
        entity = draw(st.sampled_from(ENTITIES))
        # Timestamps anywhere, or on (and either side of) a bucket or change boundary.
        boundaries = sorted({s.effective_from_ms for s in steps} | {layout.bucket.start(anchor)})
        ts = draw(
            st.one_of(
                st.integers(window_start, anchor + 3 * DAY - 1),
                st.builds(lambda b, d: b + d, st.sampled_from(boundaries), st.sampled_from((-1, 0, 1))),
            )
        )
        event_id = draw(st.one_of(st.none(), event_ids))
        before = draw(offsets_near(width, span))
        after = draw(offsets_near(width, span))
        queries.append(Query(reading(entity, ts, event_id), ts - before, ts + 1 + after))
    return Scenario(layout, shard_map, steps, anchor, queries)


def probe_blocks(layout: Layout, shard_map: ShardMap, entity_id: str, ts_ms: int) -> Iterator[tuple[str, str]]:
    """The (table, pk) of probe blocks of ``entity_id`` holding ``ts_ms``, as :meth:`Layout.pack`
    writes them: one per probe event id and version (the block id, hence calculated suffixes and
    sub-shards, changes with both), and every suffix the random layout can draw."""
    if layout.kind == "random":
        item = Reading(entity_id, PROBE_EVENT_IDS[0], ts_ms, {"v": 1})
        probe = FixedRandom(0)
        layout.pack([(item, 0)], shard_map, rng=probe)
        for suffix in range(probe.seen[0]):
            (block,) = layout.pack([(item, 0)], shard_map, rng=FixedRandom(suffix))
            yield block.key.table, block.key.pk
        return
    for version, event_id in enumerate(PROBE_EVENT_IDS * 4):
        (block,) = layout.pack([(Reading(entity_id, event_id, ts_ms, {"v": 1}), version)], shard_map)
        yield block.key.table, block.key.pk


def probe_partitions(layout: Layout, shard_map: ShardMap, entity_id: str, ts_ms: int) -> set[tuple[str, str]]:
    """Every (table, pk) the probe blocks of ``entity_id`` at ``ts_ms`` reach."""
    return set(probe_blocks(layout, shard_map, entity_id, ts_ms))


def probe_reaches(layout: Layout, shard_map: ShardMap, entity_id: str, ts_ms: int, target: tuple[str, str]) -> bool:
    """Whether some probe block of ``entity_id`` at ``ts_ms`` lands in ``target`` (stops at the first)."""
    return any(found == target for found in probe_blocks(layout, shard_map, entity_id, ts_ms))
