"""GET /entities/{id}/readings on moto: every layout, shard-map history, table periods, paging."""

from __future__ import annotations

from typing import Any

import pytest

from keydesign import Bucket, ShardMap, format_ts, parse_timestamp
from tests.integration.query.conftest import (
    HOUR,
    LAYOUT_KINDS,
    NOW,
    Store,
    StoreFactory,
    api_for,
    pages,
    reading,
    summary,
    summary_of,
)
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

HOT = "sensor-hot"
START = NOW - 9 * HOUR
CHANGE_GLOBAL = NOW - 6 * HOUR  # global N 3 -> 5
CHANGE_HOT = NOW - 3 * HOUR  # the hot entity gets 3 partitions of its own
FROM, TO = START - HOUR // 2, NOW


def history() -> ShardMap:
    bucket = Bucket.parse("1h")
    return (
        ShardMap.initial(bucket, 3)
        .with_global(5, CHANGE_GLOBAL, now_ms=CHANGE_GLOBAL - 1)
        .with_entity(HOT, 3, CHANGE_HOT, now_ms=CHANGE_HOT - 1)
    )


def populate(store: Store) -> None:
    """Readings of the hot entity every 9 minutes across both changes, bursts in one
    millisecond (each burst one block, overlapping another), a neighbour whose id the hot
    one's is a prefix of, expired blocks, corrections sent in a later batch, and (random
    layout) redelivered copies."""
    for n in range(60):
        ts = START + n * 540_000
        expired = n % 11 == 5
        store.write(
            reading(HOT, ts, f"evt-{n:03d}", temp=20 + n / 4, rh=float(n)),
            ttl=(NOW // 1000 - 60) if expired else (NOW // 1000 + 86_400),
            copies=2 if store.layout.kind == "random" and n % 7 == 0 else 1,
        )
        store.write(reading(HOT + "-b", ts + 1, f"evt-{n:03d}", temp=-1.0))
    for b, burst in enumerate((CHANGE_GLOBAL - 1, CHANGE_GLOBAL, CHANGE_HOT + 12_345)):
        store.write_batch([reading(HOT, burst, f"burst-{b}-{k}", temp=float(k)) for k in range(0, 6, 2)])
        store.write_batch([reading(HOT, burst - 3_000 + 2_000 * k, f"burst-{b}-{k}", temp=float(k)) for k in (1, 3)])
        store.write(reading(HOT, burst, f"burst-{b}-5", temp=5.0))
    # A later batch corrects four readings: their newest version is the one read
    store.write_batch([reading(HOT, START + n * 540_000, f"evt-{n:03d}", temp=-99.0, rh=float(n)) for n in range(4)])
    store.write(reading(HOT, FROM - 1, "before-range"))
    store.write(reading(HOT, TO, "at-exclusive-end"))


@pytest.fixture(params=LAYOUT_KINDS)
def store(request: pytest.FixtureRequest, make_store: StoreFactory) -> Store:
    made = make_store(request.param, shard_map=history())
    populate(made)
    return made


def full(items: list[dict[str, Any]]) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [(i["entity_id"], i["timestamp"], i["event_id"], i["measures"]) for i in items]


def expected_full(store: Store, order: str = "asc") -> list[tuple[str, str, str, dict[str, Any]]]:
    rows = [
        (w.reading.entity_id, w.reading.ts, w.reading.event_id, dict(w.reading.measures))
        for w in store.expected(HOT, FROM, TO)
    ]
    return rows if order == "asc" else rows[::-1]


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("limit", [1, 2, 7, 1000])
def test_pages_concatenate_to_exactly_the_expected_readings(store: Store, limit: int, order: str) -> None:
    # Given readings across buckets, two shard-map changes and (random) duplicates
    api = api_for(store)

    # When every page is followed
    items, bodies = pages(
        api, entity_path(HOT, "readings"), from_=format_ts(FROM), to=format_ts(TO), limit=limit, order=order
    )

    # Then the pages together are exactly the live readings in range, once each, in order
    assert full(items) == expected_full(store, order)
    assert all(b["count"] == len(b["items"]) <= limit for b in bodies)
    assert all(b["next_cursor"] is not None for b in bodies[:-1])
    assert len(items) == 60 - 5 + 18  # five expired ones left out, the bursts in


def test_small_pages_end_inside_several_partitions_and_resume_exactly(make_store: StoreFactory) -> None:
    # Given a random layout with 6 suffixes and one reading per suffix per millisecond
    store = make_store("random", shards=6)
    for n in range(40):
        store.write(reading("sensor-r", NOW - HOUR + (n // 5), f"e{n:02d}"))
    api = api_for(store)

    items, bodies = pages(
        api, entity_path("sensor-r", "readings"), from_=format_ts(NOW - HOUR), to=format_ts(NOW), limit=3
    )

    assert summary(items) == summary_of(store.expected("sensor-r", NOW - HOUR, NOW))
    assert len(bodies) == 14
    assert max(b["cost"]["partitions_queried"] for b in bodies) == 6


def test_a_projection_returns_only_the_named_measures(store: Store) -> None:
    api = api_for(store)

    reply = api.get(entity_path(HOT, "readings"), from_=format_ts(FROM), to=format_ts(TO), measures="rh,nope", limit=5)

    assert reply.status == 200
    assert [set(i["measures"]) for i in reply.body["items"]] == [{"rh"}] * 5


def test_consistent_reads_return_the_same_readings(store: Store) -> None:
    api = api_for(store)
    path = entity_path(HOT, "readings")

    eventual = api.get(path, from_=format_ts(FROM), to=format_ts(TO), limit=1000)
    strong = api.get(path, from_=format_ts(FROM), to=format_ts(TO), limit=1000, consistent=True)

    assert strong.status == 200
    assert strong.body["items"] == eventual.body["items"]


def test_a_prefix_sharing_entity_is_not_mixed_in(store: Store) -> None:
    api = api_for(store)

    reply = api.get(entity_path(HOT + "-b", "readings"), from_=format_ts(FROM), to=format_ts(TO), limit=1000)

    assert {i["entity_id"] for i in reply.body["items"]} == {HOT + "-b"}
    assert reply.body["count"] == 60


def test_epoch_milliseconds_and_offsets_mean_the_same_range(store: Store) -> None:
    api = api_for(store)
    path = entity_path(HOT, "readings")
    as_offset = format_ts(FROM + HOUR)[:-1] + "+01:00"  # the same instant, written at UTC+1

    by_text = api.get(path, from_=format_ts(FROM), to=format_ts(TO), limit=1000)
    by_epoch = api.get(path, from_=str(FROM), to=str(TO), limit=1000)
    by_offset = api.get(path, from_=as_offset, to=format_ts(TO), limit=1000)

    assert by_epoch.status == 200
    assert by_epoch.body["items"] == by_text.body["items"] == by_offset.body["items"]


@pytest.mark.parametrize("kind", LAYOUT_KINDS)
@pytest.mark.parametrize("order", ["asc", "desc"])
def test_table_periods_are_read_across_the_boundary(make_store: StoreFactory, kind: str, order: str) -> None:
    # Given one table per day and readings on both sides of midnight
    midnight = parse_timestamp("2026-11-22T00:00:00Z")
    store = make_store(kind, table_period="day", tables_from=midnight - 86_400_000, tables_to=midnight + 86_400_000)
    assert len(store.tables) == 2
    for n in range(30):
        store.write(reading("sensor-p", midnight - 3 * HOUR + n * 720_000, f"e{n:02d}"))
    api = api_for(store)

    items, _ = pages(
        api,
        entity_path("sensor-p", "readings"),
        from_=format_ts(midnight - 4 * HOUR),
        to=format_ts(midnight + 4 * HOUR),
        limit=4,
        order=order,
    )

    expected = summary_of(store.expected("sensor-p", midnight - 4 * HOUR, midnight + 4 * HOUR))
    assert summary(items) == (expected if order == "asc" else expected[::-1])
    assert {i["timestamp"][:10] for i in items} == {"2026-11-21", "2026-11-22"}


def test_a_dropped_period_table_reads_as_empty(make_store: StoreFactory) -> None:
    # Given readings in today's table, and yesterday's table already dropped by retention
    midnight = parse_timestamp("2026-11-22T00:00:00Z")
    store = make_store("hybrid", table_period="day", tables_from=midnight, tables_to=midnight + HOUR)
    for n in range(5):
        store.write(reading("sensor-p", midnight + n * 60_000, f"e{n}"))
    api = api_for(store)

    reply = api.get(
        entity_path("sensor-p", "readings"), from_=format_ts(midnight - 2 * HOUR), to=format_ts(midnight + HOUR)
    )

    assert reply.status == 200
    assert [i["event_id"] for i in reply.body["items"]] == [f"e{n}" for n in range(5)]
