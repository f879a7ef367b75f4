"""Closed tables move to Standard-IA when storage dominates what they cost.

A daily table closes at 02:15 the next day (switched to on-demand), and its class is
reviewed a day later: its size (TableSizeBytes) against the read and write units it
consumed that day (CloudWatch), scaled to a month, at INFREQUENT_ACCESS_STORAGE_PERCENT
(50 here). moto reports neither: each test edits DescribeTable's and GetMetricData's
answers, keyed by the table each query names.
"""

from __future__ import annotations

from typing import Any

import pytest

from doubles.clocks import ManualClock
from rotator.logic import Rotator
from tests.integration.rotator.conftest import HOUR, Clients, World, at

pytestmark = pytest.mark.integration

GIB = 1024**3
OLD = "readings-2026-11-22"
#: 10 GiB at $0.25 is $2.50 a month; at 50% it dominates requests up to $5.00 a month, which is
#: 40 million read units at $0.125 a million: 1,333,333 a day.
SIZE = 10 * GIB
LIGHT, HEAVY = 1_300_000.0, 1_400_000.0


def usage(clients: Clients, reads_per_day: dict[str, float], sizes: dict[str, int]) -> list[dict[str, Any]]:
    """Make DescribeTable report ``sizes`` and GetMetricData the reads of ``reads_per_day`` (mutable:
    the test may change them between runs). Returns the GetMetricData requests."""
    requests: list[dict[str, Any]] = []

    def record(params: dict[str, Any], **_: Any) -> None:
        requests.append(params)

    def reads(parsed: dict[str, Any]) -> None:
        names = {
            q["Id"]: (q["MetricStat"]["Metric"]["Dimensions"][0]["Value"], q["MetricStat"]["Metric"]["MetricName"])
            for q in requests[-1]["MetricDataQueries"]
        }
        for result in parsed["MetricDataResults"]:
            table, metric = names[result["Id"]]
            value = reads_per_day.get(table, 0.0) if metric == "ConsumedReadCapacityUnits" else 0.0
            result["Values"] = [value]

    def size(parsed: dict[str, Any]) -> None:
        parsed["Table"]["TableSizeBytes"] = sizes.get(parsed["Table"]["TableName"], 0)

    clients.cloudwatch.meta.events.register("provide-client-params.cloudwatch.GetMetricData", record)
    clients.edit("GetMetricData", reads)
    clients.edit("DescribeTable", size)
    return requests


def closed_yesterday(world: World, **overrides: str) -> tuple[Rotator, Clients, ManualClock[int]]:
    """The 22nd, closed at 2026-11-23T02:15, with its class review due at 2026-11-24T02:15."""
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock, **overrides)
    assert rotator.run().errors == []
    clock.now = at("2026-11-23T02:15:00Z")
    closing = rotator.run()
    assert [d.table for d in closing.dialled_down] == [OLD] and closing.errors == []
    clock.now = at("2026-11-24T02:14:59.999Z")
    assert OLD not in rotator.run().configured  # not yet: its day of closed traffic is not over
    # (at 02:15 the 23rd closes too: a daily table is reviewed as the next one closes)
    clock.now = at("2026-11-24T02:15:00Z")
    return rotator, clients, clock


@pytest.mark.parametrize(("reads", "moved"), [(0.0, True), (LIGHT, True), (HEAVY, False)])
def test_a_closed_table_moves_to_standard_ia_when_its_storage_dominates(
    world: World, reads: float, moved: bool
) -> None:
    rotator, clients, _ = closed_yesterday(world)
    requests = usage(clients, {OLD: reads}, {OLD: SIZE})

    summary = rotator.run()
    assert summary.errors == []
    assert ("infrequent_access" in summary.configured.get(OLD, [])) is moved
    assert world.table_class(OLD) == ("STANDARD_INFREQUENT_ACCESS" if moved else "STANDARD")
    # One CloudWatch call, for the day since the table closed
    (request,) = requests
    assert request["StartTime"].timestamp() * 1000 == at("2026-11-23T02:15:00Z")
    assert request["EndTime"].timestamp() * 1000 == at("2026-11-24T02:15:00Z")
    assert {q["MetricStat"]["Metric"]["Dimensions"][0]["Value"] for q in request["MetricDataQueries"]} == {OLD}
    assert {q["MetricStat"]["Period"] for q in request["MetricDataQueries"]} == {86_400}


def test_a_table_read_too_much_stays_standard_until_its_reads_fade(world: World) -> None:
    rotator, clients, clock = closed_yesterday(world)
    reads = {OLD: HEAVY}
    requests = usage(clients, reads, {OLD: SIZE})
    assert OLD not in rotator.run().configured
    assert world.table_class(OLD) == "STANDARD"

    # When its reads fade, a later run that looks at it again (each closed table comes round) moves it
    reads[OLD] = LIGHT
    clock.advance(HOUR)
    assert rotator.run().configured[OLD] == ["infrequent_access"]
    assert world.table_class(OLD) == "STANDARD_INFREQUENT_ACCESS"
    # And once moved it is never reviewed again (DynamoDB allows two class changes in 30 days; one is enough)
    calls = len(requests)
    clock.advance(HOUR)
    assert rotator.run().changes == 0 and len(requests) == calls


def test_a_failed_metrics_call_is_reported_and_the_next_run_decides(world: World) -> None:
    rotator, clients, _ = closed_yesterday(world)
    usage(clients, {}, {OLD: SIZE})
    clients.fail("GetMetricData", "InternalServiceError")
    failed = rotator.run()
    assert [(e.table, e.step, e.code) for e in failed.errors] == [("*", "get_metric_data", "InternalServiceError")]
    assert world.table_class(OLD) == "STANDARD"
    assert rotator.run().configured[OLD] == ["infrequent_access"]


def test_a_dry_run_reports_the_move_and_makes_none(world: World) -> None:
    rotator, clients, _ = closed_yesterday(world)
    usage(clients, {}, {OLD: SIZE})
    clients.log.clear()
    assert rotator.run(dry_run=True).configured[OLD] == ["infrequent_access"]
    assert clients.log.changes == [] and world.table_class(OLD) == "STANDARD"


def test_without_a_storage_percent_no_table_changes_class_and_no_metrics_are_read(world: World) -> None:
    rotator, clients, _ = closed_yesterday(world, INFREQUENT_ACCESS_STORAGE_PERCENT="")
    clients.log.clear()
    assert OLD not in rotator.run().configured
    assert "GetMetricData" not in clients.log.operations and world.table_class(OLD) == "STANDARD"
