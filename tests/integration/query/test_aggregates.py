"""GET /entities/{id}/aggregates on moto, checked against a brute-force computation."""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from keydesign import Bucket, ShardMap, format_ts
from query.settings import QueryLimits
from tests.integration.query.conftest import HOUR, LAYOUT_KINDS, NOW, Store, api_for, reading, shared_store
from tests.unit.query.apigw import entity_path

pytestmark = pytest.mark.integration

FROM, TO = NOW - 8 * HOUR, NOW
PATH = entity_path("sensor-1", "aggregates")


def populate(store: Store) -> None:
    rng = random.Random(11)
    for n in range(150):
        ts = FROM - HOUR + rng.randrange(0, 10 * HOUR)
        measures = {name: round(rng.uniform(-20, 40), 3) for name in ("temp", "rh") if rng.random() < 0.85}
        store.write(
            reading("sensor-1", ts, f"e{n:03d}", **(measures or {"temp": 1.0})),
            ttl=NOW // 1000 - 1 if n % 13 == 0 else None,
            copies=2 if store.layout.kind == "random" and n % 5 == 0 else 1,
        )
        store.write(reading("sensor-2", ts, f"e{n:03d}", temp=999.0))


@pytest.fixture(scope="module")
def store(request: pytest.FixtureRequest) -> Iterator[Store]:
    """:func:`populate`d once for the whole module, its tests only reading it: of the layout kind a test is
    parametrized with (indirect), its shard map going from 3 to 6 partitions a bucket; unparametrized, the
    hybrid layout's initial map of 4."""
    kind = getattr(request, "param", None)
    if kind is None:
        settings: dict[str, Any] = {}
    else:
        settings = {
            "shard_map": ShardMap.initial(Bucket.parse("1h"), 3).with_global(6, NOW - 4 * HOUR, now_ms=NOW - 5 * HOUR)
        }
    with shared_store(kind or "hybrid", **settings) as made:
        populate(made)
        yield made


def brute_force(store: Store, interval: int, names: tuple[str, ...] | None = None) -> dict[str, Any]:
    groups: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    counts: dict[int, int] = defaultdict(int)
    for w in store.expected("sensor-1", FROM, TO):
        start = w.reading.ts_ms - w.reading.ts_ms % interval
        counts[start] += 1
        for name, value in w.reading.measures.items():
            if names is None or name in names:
                groups[start][name].append(value)
    return {
        format_ts(start): (
            counts[start],
            {
                name: {"count": len(v), "min": min(v), "max": max(v), "avg": sum(v) / len(v), "sum": sum(v)}
                for name, v in groups[start].items()
            },
        )
        for start in sorted(counts)
    }


@pytest.mark.parametrize("store", LAYOUT_KINDS, indirect=True)
@pytest.mark.parametrize("interval", ["15m", "1h", "3h"])
def test_aggregates_equal_a_brute_force_computation(store: Store, interval: str) -> None:
    # Given readings over shard-map changes, some expired and (random) some stored twice
    width = {"15m": 900_000, "1h": HOUR, "3h": 3 * HOUR}[interval]

    reply = api_for(store).get(PATH, from_=format_ts(FROM), to=format_ts(TO), interval=interval)

    assert reply.status == 200, reply.body
    expected = brute_force(store, width)
    got = {i["start"]: (i["readings"], i["measures"]) for i in reply.body["intervals"]}
    assert list(got) == list(expected)
    for start, (readings, by_name) in expected.items():
        assert got[start][0] == readings
        assert set(got[start][1]) == set(by_name)
        for name, figures in by_name.items():
            assert got[start][1][name] == pytest.approx(figures)
    assert reply.body["readings"] == len(store.expected("sensor-1", FROM, TO))


def test_stats_and_measures_narrow_the_answer(store: Store) -> None:

    reply = api_for(store).get(
        PATH, from_=format_ts(FROM), to=format_ts(TO), interval="2h", stats="max,count", measures="rh"
    )

    assert reply.body["stats"] == ["count", "max"]
    expected = brute_force(store, 2 * HOUR, ("rh",))
    for entry in reply.body["intervals"]:
        figures = expected[entry["start"]][1]
        assert entry["measures"] == {
            name: {"count": f["count"], "max": pytest.approx(f["max"])} for name, f in figures.items()
        }


def test_a_range_holding_more_than_the_scan_limit_is_refused_with_413(store: Store) -> None:
    api = api_for(store, limits=QueryLimits(max_scan_items=40))

    too_wide = api.get(PATH, from_=format_ts(FROM), to=format_ts(TO), interval="1h")
    narrower = api.get(PATH, from_=format_ts(NOW - HOUR), to=format_ts(TO), interval="1h")

    assert too_wide.status == 413
    assert too_wide.body["parameter"] == "to"
    assert "decoded the 40 readings one request may read after reading [" in too_wide.body["error"]
    assert narrower.status == 200
