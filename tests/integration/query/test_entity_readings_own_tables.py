"""GET /entities/{id}/readings on moto, each test on tables of its own: a random layout's small pages,
table periods (tests/integration/query/test_entity_readings.py reads one shared set of tables)."""

from __future__ import annotations

import pytest

from keydesign import format_ts, parse_timestamp
from tests.integration.query.conftest import (
    HOUR,
    LAYOUT_KINDS,
    NOW,
    StoreFactory,
    api_for,
    pages,
    reading,
    summary,
    summary_of,
)
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration


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
