"""GET /entities/{id}/readings on moto: every layout, shard-map history, paging; the tests read one set of
tables a layout, written once (tests/integration/query/test_entity_readings_own_tables.py: tests that write
their own)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from keydesign import Bucket, ShardMap, format_ts
from tests.integration.query.conftest import (
    HOUR,
    LAYOUT_KINDS,
    NOW,
    Store,
    api_for,
    pages,
    reading,
    shared_store,
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


@pytest.fixture(scope="module", params=LAYOUT_KINDS)
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """One per layout for the whole module: its tests only read it."""
    with shared_store(request.param, shard_map=history()) as made:
        populate(made)
        yield made


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
