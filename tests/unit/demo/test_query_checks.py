"""The expected answers of the query checks, computed from what was published, and the comparisons."""

from __future__ import annotations

from typing import Any

import pytest

from client import ApiError
from demo.query_checks import (
    Check,
    api_reading,
    check_aggregates,
    check_each_entity,
    check_latest,
    compare_aggregates,
    compare_readings,
    expected_aggregates,
    expected_readings,
)
from keydesign import Bucket, parse_timestamp

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
    got = expected_readings(LEDGER, "a", T0, T0 + 60_000)
    assert [r["event_id"] for r in got] == ["e4", "e0", "e1"]
    assert got[0] == {
        "entity_id": "a",
        "event_id": "e4",
        "timestamp": "2026-11-22T07:00:00.005Z",
        "measures": {"temp": 10.0},
        "dimensions": {},
    }


@pytest.mark.parametrize(("answer", "equal"), [("e3", True), ("e1", False), (None, False)])
def test_latest_must_be_the_greatest_time_then_event_id(answer: str | None, equal: bool) -> None:
    # Given the API answering one of entity a's readings as its latest (or none)
    chosen = next((api_reading(r) for r in LEDGER if r["event_id"] == answer), None)
    check = check_latest(_Api({("/entities/a/latest", ""): {"reading": chosen}}), LEDGER, "a")  # type: ignore[arg-type]
    # Then only e3 (the newest, a minute after the others) is equal to what was published
    assert (check.difference is None) is equal and check.as_dict()["equal"] is equal


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
    """Answers each path and interval with a canned body; an int instead of a body is that HTTP error."""

    api_url = "http://127.0.0.1:1/v1"

    def __init__(self, bodies: dict[tuple[str, str], dict[str, Any] | int]) -> None:
        self.bodies = bodies

    def get(self, path: str, params: dict[str, str]) -> dict[str, Any]:
        body = self.bodies[path, params.get("interval", "")]
        if isinstance(body, int):
            raise ApiError(body, "Internal server error")
        return body


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
        rollups=True,
        raw_interval="30s",
    )
    # Then it names what differs, and otherwise both costs
    assert (check.difference is None) if verdict is None else (verdict in str(check.difference))
    if verdict is None:
        assert "rollups read 4 items in 2 Query call(s), 1.5 RCU; raw (per 30s) read 9 items" in check.summary


def test_a_cross_entity_page_goes_bucket_by_bucket_then_entity_time_event() -> None:
    got = expected_readings(LEDGER, None, T0, T0 + 120_000, Bucket.parse("1m"))[:5]
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
    body = check.get(_Api({("/x", ""): {"ok": 1} if status == 200 else status}), {})  # type: ignore[arg-type]
    assert (body is not None) is equal
    result = check.as_dict()
    assert result["equal"] is equal and result["requests"] == 1 and result["latency_ms"]["max"] >= 0
    assert (result["difference"] is None) if equal else "HTTP 502" in result["difference"]


@pytest.mark.parametrize(
    ("b_answers", "difference"),
    [(["e2", "e5"], None), (["e2"], "b: 1 readings instead of 2 (1 missing, 0 unexpected)")],
)
def test_each_entitys_range_is_one_check_that_names_the_first_entity_that_differs(
    b_answers: list[str], difference: str | None
) -> None:
    # Given the API answering entity a's range whole, and entity b's whole or without a reading
    def page(events: list[str]) -> dict[str, Any]:
        items = [r for r in expected_readings(LEDGER, None, T0, T0 + 120_000) if r["event_id"] in events]
        return {"items": sorted(items, key=lambda r: (r["timestamp"], r["event_id"])), "next_cursor": None}

    api = _Api(
        {("/entities/a/readings", ""): page(["e4", "e0", "e1", "e3"]), ("/entities/b/readings", ""): page(b_answers)}
    )
    check = check_each_entity(api, LEDGER, ["a", "b"], T0, T0 + 120_000, bucket=Bucket.parse("1h"), name="fleet")  # type: ignore[arg-type]
    # Then one check reads both, and says which entity differs
    assert check.difference == difference and check.name == "fleet: each entity's readings"
    assert check.summary == "6 readings of 2 entities in 2 request(s)" and len(check.latencies_ms) == 2
