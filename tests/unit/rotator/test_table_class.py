"""The Standard-IA rule (storage against requests, at Standard prices) and the CloudWatch reads behind it."""

from __future__ import annotations

from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from hypothesis import given, settings
from hypothesis import strategies as st

from rotator.cloudwatch import QUERIES_PER_CALL, CloudWatch
from rotator.table_class import (
    GIB,
    Usage,
    monthly_requests_usd,
    monthly_storage_usd,
    storage_dominates,
)

DAY = 86_400_000


def test_a_day_of_use_stands_for_a_month_at_list_prices() -> None:
    # 10 GiB at $0.25; 1 million reads ($0.125) and 1 million writes ($0.625) a day, 30 days
    assert monthly_storage_usd(10 * GIB) == pytest.approx(2.50)
    assert monthly_requests_usd(Usage(1e6, 1e6, DAY)) == pytest.approx(30 * 0.75)
    assert monthly_requests_usd(Usage(1e6, 0, 2 * DAY)) == pytest.approx(15 * 0.125)


def test_a_table_nobody_uses_always_moves() -> None:
    assert storage_dominates(0, Usage(0, 0, DAY), 50)
    assert storage_dominates(1, Usage(0, 0, DAY), 100_000)


@pytest.mark.parametrize(("reads_per_day", "moves"), [(1_333_333, True), (1_333_334, False)])
def test_at_fifty_percent_storage_must_cost_half_of_the_requests(reads_per_day: int, moves: bool) -> None:
    # 10 GiB is $2.50 a month: it dominates up to $5.00 of requests, 40 million reads
    assert storage_dominates(10 * GIB, Usage(reads_per_day, 0, DAY), 50) is moves


@settings(max_examples=300, deadline=None)
@given(
    gib=st.integers(1, 1_000),
    storage_to_requests=st.floats(0.2, 0.8),
    write_share=st.floats(0, 1),
)
def test_around_the_break_even_the_rule_picks_the_cheaper_class(
    gib: int, storage_to_requests: float, write_share: float
) -> None:
    # Given a table whose requests (reads and writes, at Standard prices) cost storage / ratio a month
    storage = monthly_storage_usd(gib * GIB)
    requests_usd = storage / storage_to_requests
    writes = requests_usd * write_share / 0.625 * 1e6 / 30
    reads = requests_usd * (1 - write_share) / 0.125 * 1e6 / 30
    usage = Usage(reads, writes, DAY)
    # What it costs a month in each class, from the class differences alone
    standard = storage + requests_usd
    infrequent = storage * (1 - 0.60) + requests_usd * (1 + 0.25)
    # Then just above the break-even (42%) a table moves only if Standard-IA is cheaper,
    # and just below it (41%) a table stays only if Standard is cheaper
    if storage_dominates(gib * GIB, usage, 42):
        assert infrequent <= standard * (1 + 1e-9)
    if not storage_dominates(gib * GIB, usage, 41):
        assert standard <= infrequent * (1 + 1e-9)


class FakeCloudWatch:
    """A CloudWatch client whose GetMetricData answers ``value`` per query, in pages of ``page`` results,
    before anything is sent (botocore's own paginator runs over it)."""

    def __init__(self, value: float, page: int = 1_000) -> None:
        self.calls: list[dict[str, Any]] = []
        self.value = value
        self.page = page
        self.client = boto3.client("cloudwatch", region_name="eu-west-1")
        events = self.client.meta.events
        events.register("provide-client-params.cloudwatch.GetMetricData", self._record)
        events.register("before-call.cloudwatch.GetMetricData", self._answer)

    def _record(self, params: dict[str, Any], **_: Any) -> None:
        self.calls.append(dict(params))

    def _answer(self, **_: Any) -> tuple[AWSResponse, dict[str, Any]]:
        kwargs = self.calls[-1]
        queries = kwargs["MetricDataQueries"]
        start = int(kwargs.get("NextToken", 0))
        results = [{"Id": q["Id"], "Values": [self.value, self.value]} for q in queries[start : start + self.page]]
        answer: dict[str, Any] = {"MetricDataResults": results}
        if start + self.page < len(queries):
            answer["NextToken"] = str(start + self.page)
        return AWSResponse("https://monitoring.local/", 200, {}, None), answer


def test_the_usage_of_many_tables_takes_one_call_per_500_queries() -> None:
    cloudwatch = FakeCloudWatch(2.0)
    tables = [f"readings-{i}" for i in range(300)]
    usage = CloudWatch(cloudwatch.client).consumed(tables, 0, DAY)
    assert [len(c["MetricDataQueries"]) for c in cloudwatch.calls] == [QUERIES_PER_CALL, 100]
    assert usage["readings-0"] == usage["readings-299"] == Usage(4.0, 4.0, DAY)
    query = cloudwatch.calls[0]["MetricDataQueries"][0]["MetricStat"]
    assert (query["Period"], query["Stat"], query["Metric"]["Namespace"]) == (86_400, "Sum", "AWS/DynamoDB")
    assert {q["MetricStat"]["Metric"]["MetricName"] for q in cloudwatch.calls[1]["MetricDataQueries"]} == {
        "ConsumedReadCapacityUnits",
        "ConsumedWriteCapacityUnits",
    }


def test_paged_results_are_all_counted() -> None:
    cloudwatch = FakeCloudWatch(1.0, page=3)
    usage = CloudWatch(cloudwatch.client).consumed(["a", "b"], 0, DAY)
    assert len(cloudwatch.calls) == 2 and cloudwatch.calls[1]["NextToken"] == "3"
    assert usage == {"a": Usage(2.0, 2.0, DAY), "b": Usage(2.0, 2.0, DAY)}
