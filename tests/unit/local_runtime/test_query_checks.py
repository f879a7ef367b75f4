"""The expected answers of the query checks, computed from what was published, and the comparisons."""

from __future__ import annotations

from typing import Any

import pytest

from keydesign import Bucket, parse_timestamp
from local_runtime.query_checks import (
    Check,
    Response,
    api_reading,
    check_aggregates,
    compare_aggregates,
    compare_readings,
    expected_aggregates,
    expected_entity_readings,
    expected_latest,
    expected_range_page,
)

T0 = parse_timestamp("2026-11-22T07:00:00Z", "t")


def reading(entity: str, event: str, offset_ms: int, temp: float = 20.0) -> dict[str, Any]:
    return {"entity_id": entity, "event_id": event, "timestamp": T0 + offset_ms, "measures": {"temp": temp}}


LEDGER = [
    reading("b", "e2", 10),
    reading("a", "e1", 10),
    reading("a", "e0", 10),  # same millisecond: the event id decides
    reading("a", "e3", 65_000, temp=30.0),
    reading("a", "e4", 5, temp=10.0),
    reading("b", "e5", 61_000),
]


def test_an_entitys_readings_are_in_time_then_event_id_order_within_the_range() -> None:
    got = expected_entity_readings(LEDGER, "a", T0, T0 + 60_000)
    assert [r["event_id"] for r in got] == ["e4", "e0", "e1"]
    assert got[0] == {
        "entity_id": "a",
        "event_id": "e4",
        "timestamp": "2026-11-22T07:00:00.005Z",
        "measures": {"temp": 10.0},
        "dimensions": {},
    }


def test_latest_is_the_greatest_time_then_event_id_at_or_before_now() -> None:
    assert expected_latest(LEDGER, "a", T0 + 70_000)["event_id"] == "e3"  # type: ignore[index]
    assert expected_latest(LEDGER, "a", T0 + 60_000)["event_id"] == "e1"  # type: ignore[index]
    assert expected_latest(LEDGER, "nobody", T0) is None


def test_aggregates_are_per_epoch_aligned_interval() -> None:
    got = expected_aggregates(LEDGER, "a", T0, T0 + 120_000, 60_000)
    assert [(i["start"], i["readings"]) for i in got] == [
        ("2026-11-22T07:00:00.000Z", 3),
        ("2026-11-22T07:01:00.000Z", 1),
    ]
    assert got[0]["measures"]["temp"] == {"count": 3, "min": 10.0, "max": 20.0, "avg": 50.0 / 3, "sum": 50.0}


def test_aggregates_of_no_entity_are_every_entitys() -> None:
    got = expected_aggregates(LEDGER, None, T0, T0 + 120_000, 60_000)
    assert [(i["start"], i["readings"]) for i in got] == [
        ("2026-11-22T07:00:00.000Z", 4),
        ("2026-11-22T07:01:00.000Z", 2),
    ]


class _Api:
    """Answers each path and interval with a canned body."""

    base_url = "http://127.0.0.1:1/v1"

    def __init__(self, bodies: dict[tuple[str, str], dict[str, Any]]) -> None:
        self.bodies = bodies

    def get(self, path: str, params: dict[str, Any]) -> Response:
        return Response(200, self.bodies[path, params["interval"]], 1.0)


COST = {"items_read": 4, "queries": 2, "read_units": 1.5}


@pytest.mark.parametrize(
    ("source", "sum_", "raw_readings", "verdict"),
    [
        ("rollups", 70.0, 4, None),
        ("rollups", 71.0, 4, "temp.sum"),
        ("raw", 70.0, 4, "not rollups"),
        ("rollups", 70.0, 3, "3 readings"),
    ],
)
def test_a_rollup_check_wants_rollups_the_published_figures_and_reads_raw_for_the_cost(
    source: str, sum_: float, raw_readings: int, verdict: str | None
) -> None:
    # Given every entity's first minute answered (from `source`) and the same range per 30 s, raw
    want = expected_aggregates(LEDGER, None, T0, T0 + 60_000, 60_000)
    got = [{**want[0], "measures": {"temp": {**want[0]["measures"]["temp"], "sum": sum_}}}]
    api = _Api(
        {
            ("/aggregates", "1m"): {"intervals": got, "readings": 4, "source": source, "cost": COST},
            ("/aggregates", "30s"): {"readings": raw_readings, "source": "raw", "cost": {**COST, "items_read": 9}},
        }
    )
    # When the check runs
    check = check_aggregates(
        api,  # type: ignore[arg-type]
        LEDGER,
        None,
        T0,
        T0 + 60_000,
        interval="1m",
        interval_ms=60_000,
        rollups=True,
        raw_interval="30s",
    )
    # Then it names what differs, and otherwise both costs
    assert (check.difference is None) if verdict is None else (verdict in str(check.difference))
    if verdict is None:
        assert "rollups read 4 items in 2 Query call(s), 1.5 RCU; raw (per 30s) read 9 items" in check.summary


def test_a_cross_entity_page_goes_bucket_by_bucket_then_entity_time_event() -> None:
    got = expected_range_page(LEDGER, T0, T0 + 120_000, Bucket.parse("1m"), limit=5)
    assert [r["event_id"] for r in got] == ["e4", "e0", "e1", "e2", "e3"]


def test_compare_readings_names_the_first_difference() -> None:
    want = [api_reading(r) for r in LEDGER[:2]]
    assert compare_readings(want, want) is None
    assert compare_readings([want[0], want[0]], want) == "1 reading(s) returned twice"
    assert "1 readings instead of 2" in str(compare_readings(want[:1], want))
    changed = [want[0], {**want[1], "measures": {"temp": 99}}]
    assert "reading 1 (e1) differs" in str(compare_readings(changed, want))
    # an int in JSON for a float that was published is the same number
    assert compare_readings([{**want[0], "measures": {"temp": 20}}], [want[0]]) is None


def test_compare_aggregates_tolerates_float_rounding_only() -> None:
    want = expected_aggregates(LEDGER, "a", T0, T0 + 120_000, 60_000)
    close = [{**want[0], "measures": {"temp": {**want[0]["measures"]["temp"], "avg": 50.0 / 3 + 1e-12}}}, want[1]]
    assert compare_aggregates(close, want) is None
    off = [{**want[0], "measures": {"temp": {**want[0]["measures"]["temp"], "sum": 50.5}}}, want[1]]
    assert "temp.sum" in str(compare_aggregates(off, want))
    assert compare_aggregates(want[:1], want) == "1 intervals instead of 2"


@pytest.mark.parametrize(("status", "equal"), [(200, True), (502, False)])
def test_a_check_that_got_an_http_error_is_not_equal(status: int, equal: bool) -> None:
    check = Check("x", "/x")
    body = check.observe(Response(status, {"message": "Internal server error"}, 12.5))
    assert (body is not None) is equal
    result = check.as_dict()
    assert result["equal"] is equal and result["requests"] == 1
    assert result["latency_ms"] == {"p50": 12.5, "max": 12.5, "total": 12.5}
