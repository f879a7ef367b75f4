"""Failures mid-run, tables still CREATING, two runs at once, a run out of time: each run
finishes what it can, records the rest, and the next run completes it. Faults are
injected on the rotator's own clients (see conftest)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import pytest
from botocore.exceptions import ClientError

from doubles.clocks import ManualClock
from rotator.logic import Rotator
from rotator.settings import DEADLINE_MARGIN_MS
from rotator.summary import RunSummary
from tests.integration.rotator.conftest import MINUTE, Clients, World, at, lambda_conflict_rule

pytestmark = pytest.mark.integration

KINDS = ("write-throttles", "read-throttles", "system-errors")
#: At this instant, after a first run on 2026-11-22 at noon, a run must create three
#: tables (30th, 1st, 2nd) and set them up, close two (23rd, 24th: on-demand, no Contributor
#: Insights, mapping or alarms) and drop one (22nd).
BUSY = "2026-11-30T03:00:00Z"
SETTLED = [
    "readings-2026-11-23",
    "readings-2026-11-24",
    "readings-2026-11-30",
    "readings-2026-12-01",
    "readings-2026-12-02",
]
COLD = ["readings-2026-11-23", "readings-2026-11-24"]


def prepared(world: World, **overrides: str) -> tuple[Rotator, Clients, ManualClock[int]]:
    """The busy run's world. Table classes are left out (a closed table moves to Standard-IA on
    the run after its switch to on-demand): test_table_class covers them."""
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock, **{"INFREQUENT_ACCESS_STORAGE_PERCENT": "", **overrides})
    assert rotator.run().errors == []
    clock.now = at(BUSY)
    clients.log.clear()
    return rotator, clients, clock


def assert_settled(world: World, expected: list[str] = SETTLED, cold: list[str] = COLD) -> None:
    """Exactly the tables, capacities, setup, mappings and alarms a clean run leaves."""
    assert world.ours() == expected
    open_ = [name for name in expected if name not in cold]
    for name in expected:
        closed = name in cold
        assert world.billing(name) == ("PAY_PER_REQUEST" if closed else "PROVISIONED"), name
        assert closed or world.capacity(name) == (2000, 100), name
        assert world.insights(name) == (None if closed else "THROTTLED_KEYS"), name
        assert world.ttl(name)["TimeToLiveStatus"] == "ENABLED", name
        assert world.pitr(name) == "ENABLED", name
    assert world.mapped_tables() == open_
    assert world.alarm_names() == sorted(f"{name}-{kind}" for name in open_ for kind in KINDS)


def assert_quiet(rotator: Rotator, clients: Clients) -> None:
    clients.log.clear()
    summary = rotator.run()
    assert clients.log.changes == [] and summary.changes == 0 and summary.errors == [] and summary.skipped == []


def reported(summary: RunSummary) -> str:
    return " ".join([*(f"{e.step} {e.code}" for e in summary.errors), *(s.reason for s in summary.skipped)])


def on_table(name: str) -> Callable[[dict[str, Any]], bool]:
    return lambda params: params.get("TableName") == name


@dataclass(frozen=True)
class Fault:
    """One call that fails, what the report must say, and what the run must still get done."""

    operation: str
    code: str
    when: Callable[[dict[str, Any]], bool]
    report: str
    still_done: Callable[[RunSummary], bool]


FAULTS = [
    Fault(
        "CreateTable",
        "LimitExceededException",
        on_table("readings-2026-11-30"),
        "limit on concurrent table operations",
        # every later table operation waits: nothing created, switched or dropped this run
        lambda s: s.created == [] and s.dialled_down == [] and s.deleted == [],
    ),
    Fault(
        "CreateTable",
        "InternalServerError",
        on_table("readings-2026-12-01"),
        "create_table InternalServerError",
        lambda s: s.created == ["readings-2026-11-30", "readings-2026-12-02"] and len(s.dialled_down) == 2,
    ),
    Fault(
        "UpdateTimeToLive",
        "InternalServerError",
        on_table("readings-2026-12-01"),
        "update_time_to_live InternalServerError",
        lambda s: "ttl" in s.configured["readings-2026-12-02"] and "ttl" not in s.configured["readings-2026-12-01"],
    ),
    Fault(
        "UpdateContinuousBackups",
        "InternalServerError",
        on_table("readings-2026-11-30"),
        "update_continuous_backups InternalServerError",
        lambda s: "point_in_time_recovery" in s.configured["readings-2026-12-01"],
    ),
    Fault(
        "CreateEventSourceMapping",
        "ServiceException",
        lambda params: "readings-2026-12-02" in params["EventSourceArn"],
        "create_event_source_mapping ServiceException",
        lambda s: "stream_mapping" in s.configured["readings-2026-12-01"],
    ),
    Fault(
        "PutMetricAlarm",
        "InternalServiceError",
        lambda params: params["AlarmName"].startswith("readings-2026-11-30"),
        "put_metric_alarm InternalServiceError",
        lambda s: "alarms" in s.configured["readings-2026-12-02"],
    ),
    Fault(
        "UpdateContributorInsights",
        "InternalServerError",
        on_table("readings-2026-12-01"),
        "update_contributor_insights InternalServerError",
        lambda s: "contributor_insights" in s.configured["readings-2026-12-02"] and len(s.dialled_down) == 2,
    ),
    Fault(
        "UpdateContributorInsights",
        "InternalServerError",
        lambda params: params["ContributorInsightsAction"] == "DISABLE",
        "update_contributor_insights InternalServerError",
        lambda s: len(s.dialled_down) == 2 and s.deleted == ["readings-2026-11-22"],
    ),
    Fault(
        "DescribeContributorInsights",
        "InternalServerError",
        on_table("readings-2026-11-30"),
        "describe_contributor_insights InternalServerError",
        lambda s: "contributor_insights" in s.configured["readings-2026-12-01"],
    ),
    Fault(
        "UpdateTable",
        "LimitExceededException",
        lambda params: "BillingMode" in params,
        "limit on concurrent table operations",
        lambda s: len(s.created) == 3 and s.dialled_down == [] and s.deleted == [],
    ),
    Fault(
        "UpdateTable",
        "InternalServerError",
        lambda params: params["TableName"] == "readings-2026-11-24",
        "update_table (on-demand) InternalServerError",
        lambda s: [d.table for d in s.dialled_down] == ["readings-2026-11-23"] and s.deleted == ["readings-2026-11-22"],
    ),
    Fault(
        "DeleteEventSourceMapping",
        "ServiceException",
        lambda params: True,
        "delete_event_source_mapping ServiceException",
        lambda s: s.deleted == [] and len(s.dialled_down) == 2,
    ),
    Fault(
        "DeleteAlarms",
        "InternalServiceError",
        lambda params: True,
        "delete_alarms InternalServiceError",
        lambda s: s.deleted == [] and len(s.created) == 3,
    ),
    Fault(
        "DeleteTable",
        "ResourceInUseException",
        lambda params: True,
        "busy with another operation",
        lambda s: s.deleted == [] and len(s.created) == 3,
    ),
    Fault(
        "DescribeTable",
        "InternalServerError",
        on_table("readings-2026-11-23"),
        "describe_table InternalServerError",
        lambda s: [d.table for d in s.dialled_down] == ["readings-2026-11-24"],
    ),
    Fault(
        "ListTagsOfResource",
        "InternalServerError",
        lambda params: True,
        "list_tags_of_resource InternalServerError",
        lambda s: len(s.created) == 3 and len(s.dialled_down) + len(s.deleted) == 2,
    ),
    Fault(
        "DescribeTimeToLive",
        "InternalServerError",
        lambda params: True,
        "describe_time_to_live InternalServerError",
        lambda s: len(s.created) == 3 and len(s.dialled_down) == 2 and s.deleted == ["readings-2026-11-22"],
    ),
]


@pytest.mark.parametrize("fault", FAULTS, ids=[f"{f.operation}-{f.code}" for f in FAULTS])
def test_a_failed_call_mid_run_is_completed_by_the_next_run(world: World, fault: Fault) -> None:
    # Given a run with plenty to do, When one call fails
    rotator, clients, _ = prepared(world)
    failed = clients.fail(fault.operation, fault.code, when=fault.when)
    first = rotator.run()

    # Then the failure is reported, the rest of the run's work is done
    assert failed, f"the fault on {fault.operation} never fired"
    assert fault.report in reported(first)
    assert fault.still_done(first), first.to_dict()
    with pytest.raises(AssertionError):
        assert_settled(world)

    # And the next run completes it, and the one after has nothing left to do
    second = rotator.run()
    assert second.errors == [], second.errors
    assert_settled(world)
    assert_quiet(rotator, clients)


def test_a_table_still_creating_is_set_up_by_the_first_run_that_finds_it_active(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    rotator, clients = world.rotator(clock)

    def creating(parsed: dict[str, Any], key: str) -> None:
        parsed[key]["TableStatus"] = "CREATING"

    # Given DynamoDB reports the new tables CREATING (moto makes them ACTIVE at once)
    clients.edit("CreateTable", partial(creating, key="TableDescription"))
    clients.edit("DescribeTable", partial(creating, key="Table"))
    first = rotator.run()
    # Then the run creates them and does not wait: no TTL, mapping or alarms yet
    assert first.created == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert first.configured == {} and first.errors == []
    assert {s.table for s in first.skipped if "CREATING" in s.reason} == set(first.created)
    assert first.periods_ready == 0
    assert world.mapped_tables() == [] and world.alarm_names() == []
    assert world.ttl("readings-2026-11-22")["TimeToLiveStatus"] == "DISABLED"

    # When the next run finds them ACTIVE, it finishes their setup
    clock.advance(60 * MINUTE)
    second, _ = world.rotator(clock)
    summary = second.run()
    assert summary.created == [] and sorted(summary.configured) == sorted(first.created)
    assert summary.periods_ready == 3
    assert world.mapped_tables() == sorted(first.created)
    assert world.ttl("readings-2026-11-22")["TimeToLiveStatus"] == "ENABLED"


def test_two_runs_at_once_make_one_set_of_resources_and_no_errors(world: World) -> None:
    clock = ManualClock(at("2026-11-22T12:00:00Z"))
    first, first_clients = world.rotator(clock)
    second, second_clients = world.rotator(clock)
    for clients in (first_clients, second_clients):
        lambda_conflict_rule(clients, world.lambda_)
    interleaved: list[RunSummary] = []

    def run_the_other(**_: Any) -> None:
        if not interleaved:  # once: the second run goes start to finish inside the first one
            interleaved.append(second.run())

    # Given the second run does all its work right after the first one listed the tables
    first_clients.dynamodb.meta.events.register("after-call.dynamodb.ListTables", run_the_other)
    summary = first.run()

    # Then the first run found every table, mapping and alarm made under it: all "already done"
    assert interleaved[0].created == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert summary.errors == [] and interleaved[0].errors == []
    assert summary.created == []  # CreateTable answered ResourceInUseException: done by the other run
    # CreateEventSourceMapping answered ResourceConflictException: not claimed as this run's change
    assert not [t for t, steps in summary.configured.items() if "stream_mapping" in steps]
    assert world.mapped_tables() == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert len(world.alarm_names()) == 9
    assert_quiet(first, first_clients)


def test_a_table_dropped_by_a_concurrent_run_is_not_an_error(world: World) -> None:
    rotator, clients, _ = prepared(world)
    other, _ = world.rotator(ManualClock(at(BUSY)))
    done: list[RunSummary] = []

    def drop_it_under_us(parsed: dict[str, Any], **_: Any) -> None:
        if parsed["Table"]["TableName"] == "readings-2026-11-22" and not done:
            done.append(other.run())

    # Given the other run drops the 22nd right after this one described it
    clients.dynamodb.meta.events.register("after-call.dynamodb.DescribeTable", drop_it_under_us)
    summary = rotator.run()
    assert done[0].deleted == ["readings-2026-11-22"]
    # Then this run reports it gone, not failed
    assert summary.errors == []
    assert any("gone" in s.reason for s in summary.skipped if s.table == "readings-2026-11-22")
    assert_settled(world)


def test_a_run_that_runs_out_of_time_leaves_the_rest_to_the_next(world: World) -> None:
    _, clients, clock = prepared(world)
    # A monotonic clock that advances a second per AWS call, and a run budget of 25 seconds
    ticks = [0.0]

    def tick(**_: Any) -> None:
        ticks[0] += 1.0

    for api in clients.all():
        api.meta.events.register("before-call.*.*", tick)
    slow = Rotator(
        world.settings(),
        dynamodb=clients.dynamodb,
        lambda_client=clients.lambda_,
        cloudwatch=clients.cloudwatch,
        clock_ms=clock,
        monotonic=lambda: ticks[0],
    )
    budget_ms = 25_000 + DEADLINE_MARGIN_MS  # 25 calls before the run stops starting work
    summary = slow.run(budget_ms=budget_ms)
    assert summary.errors == []
    assert any("ran out" in s.reason for s in summary.skipped)
    with pytest.raises(AssertionError):
        assert_settled(world)

    while any("ran out" in s.reason for s in slow.run(budget_ms=budget_ms).skipped):
        pass
    assert_settled(world)


def test_an_unexpected_response_on_one_table_does_not_stop_the_others(world: World) -> None:
    rotator, clients, _ = prepared(world)

    def broken(parsed: dict[str, Any]) -> None:
        if parsed["Table"]["TableName"] == "readings-2026-11-24":
            del parsed["Table"]["TableArn"]

    clients.edit("DescribeTable", broken)
    summary = rotator.run()
    assert [(e.table, e.step, e.code) for e in summary.errors] == [("readings-2026-11-24", "tend", "KeyError")]
    assert [d.table for d in summary.dialled_down] == ["readings-2026-11-23"]
    assert summary.deleted == ["readings-2026-11-22"] and len(summary.created) == 3


def test_a_run_that_cannot_list_the_tables_fails_visibly(world: World) -> None:
    rotator, clients, _ = prepared(world)
    clients.fail("ListTables", "AccessDeniedException")
    with pytest.raises(ClientError, match="AccessDeniedException"):
        rotator.run()


@pytest.mark.parametrize(
    ("operation", "code", "message"),
    [
        ("UpdateTimeToLive", "ValidationException", "TimeToLive is already enabled"),
        ("UpdateTable", "ValidationException", "The provisioned throughput for the table will not change."),
        ("DeleteTable", "ResourceNotFoundException", "Requested resource not found"),
        ("DeleteEventSourceMapping", "ResourceNotFoundException", "The resource you requested does not exist."),
    ],
)
def test_what_a_concurrent_run_already_did_is_not_an_error(
    world: World, operation: str, code: str, message: str
) -> None:
    # Given the service answers as it does when another run made the change a moment ago
    rotator, clients, _ = prepared(world)
    failed = clients.fail(operation, code, message=message)
    summary = rotator.run()
    # Then the run takes it as done: no error, nothing skipped for it
    assert failed and summary.errors == [] and summary.skipped == []
