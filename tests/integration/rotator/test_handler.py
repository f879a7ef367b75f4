"""The Lambda entry point: settings at import, the event, the summary it returns,
and the metrics Powertools writes (EMF on stdout)."""

from __future__ import annotations

import importlib
import sys
import time
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest

from adapters.clients import client
from adapters.settings import SettingsError
from doubles.lambda_context import FakeLambdaContext
from keydesign import Layout
from rotator.request import InvalidRequest
from tests.integration.mocked_aws import emitted_metrics
from tests.integration.rotator.conftest import PREFIX, World

pytestmark = pytest.mark.integration


def context(remaining_ms: int = 300_000) -> FakeLambdaContext:
    return FakeLambdaContext(remaining_ms, function_name="rotator", memory_limit_in_mb=256)


def load(world: World, monkeypatch: pytest.MonkeyPatch, **overrides: str) -> ModuleType:
    for name, value in {**world.env, **overrides}.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("rotator.handler", None)
    module = importlib.import_module("rotator.handler")
    # What moto does not implement, on the process-wide client the handler was built with (reset with the mock)
    world.extras.install(client("dynamodb"))
    return module


@pytest.fixture
def fresh_import() -> Iterator[None]:
    yield
    sys.modules.pop("rotator.handler", None)


@pytest.mark.usefixtures("fresh_import")
def test_an_operator_dry_run_at_another_time(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(world, monkeypatch)
    result = module.handler(
        {"dry_run": True, "now": "2026-11-22T23:59:59Z"},
        context(),
    )
    assert result["dry_run"] is True
    assert result["now"] == "2026-11-22T23:59:59.000Z"
    assert result["created"] == ["readings-2026-11-22", "readings-2026-11-23", "readings-2026-11-24"]
    assert world.table_names() == []
    values = emitted_metrics(capsys.readouterr().out)
    assert values["RotationDryRuns"] == 1.0
    assert "TablesCreated" not in values


@pytest.mark.usefixtures("fresh_import")
def test_the_scheduled_payload_runs_live_on_the_real_clock(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(world, monkeypatch)
    now_ms = int(time.time() * 1000)
    result = module.handler({}, context())
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=PREFIX, table_period="day")
    assert result["current_table"] == layout.table_for(now_ms)
    assert result["dry_run"] is False and result["errors"] == []
    # Today's table and the next two; in the first GRACE (2 h) of a UTC day, yesterday's too (it
    # still takes late readings)
    yesterday = now_ms % 86_400_000 < 2 * 3_600_000
    made = 4 if yesterday else 3
    assert len(result["created"]) == made and sorted(world.ours()) == sorted(result["created"])
    assert (layout.table_for(now_ms - 86_400_000) in result["created"]) is yesterday
    values = emitted_metrics(capsys.readouterr().out)
    assert (values["TablesCreated"], values["PeriodsReady"], values["RotationErrors"]) == (made, 3.0, 0.0)
    assert values["TablesConfigured"] == made and values["ManagedTables"] == made


@pytest.mark.usefixtures("fresh_import")
def test_a_build_run_publishes_only_what_it_measured(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a healthy deployment: its scheduled run finds three periods ready
    module = load(world, monkeypatch, ALLOW_NOW_OVERRIDE="true")
    module.handler({"now": "2026-11-22T12:00:00Z"}, context())
    assert emitted_metrics(capsys.readouterr().out)["PeriodsReady"] == 3.0
    # When ingest asks for a past period's table
    result = module.handler(
        {"now": "2026-11-22T12:01:00Z", "build": ["readings-2026-11-20"]},
        context(),
    )
    assert result["created"] == ["readings-2026-11-20"] and result["periods_ready"] is None
    # Then the build run counts what it did, and publishes no PeriodsReady (it looked at no current or next
    # table: a 0 would raise "the next period's table is not ready") and no ManagedTables (it listed none)
    values = emitted_metrics(capsys.readouterr().out)
    assert values["TablesCreated"] == 1.0
    assert "PeriodsReady" not in values and "ManagedTables" not in values


@pytest.mark.usefixtures("fresh_import")
def test_a_build_run_fails_while_its_table_is_still_creating_so_that_lambda_retries_it(
    world: World, monkeypatch: pytest.MonkeyPatch
) -> None:
    module = load(world, monkeypatch, ALLOW_NOW_OVERRIDE="true")

    def creating(parsed: dict[str, Any], **_: Any) -> None:
        parsed["Table"]["TableStatus"] = "CREATING"

    client("dynamodb").meta.events.register("after-call.dynamodb.DescribeTable", creating)
    # 14.9 s left, 10 s kept back: time to create the table, none to wait 5 s for it
    with pytest.raises(module.TablesStillCreating, match="readings-2026-11-20"):
        module.handler({"now": "2026-11-22T12:00:00Z", "build": ["readings-2026-11-20"]}, context(14_900))
    assert world.ours() == ["readings-2026-11-20"]


@pytest.mark.usefixtures("fresh_import")
def test_a_live_event_cannot_move_the_clock(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(world, monkeypatch)
    with pytest.raises(InvalidRequest, match="real clock"):
        module.handler({"now": "2030-01-01T00:00:00Z"}, context())
    assert world.table_names() == []
    assert emitted_metrics(capsys.readouterr().out)["RotationRequestsRefused"] == 1.0


@pytest.mark.usefixtures("fresh_import")
def test_tests_and_the_local_runtime_may_move_the_clock(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    module = load(world, monkeypatch, ALLOW_NOW_OVERRIDE="true")
    result = module.handler({"now": "2030-01-01T12:00:00Z"}, context())
    assert result["created"] == ["readings-2030-01-01", "readings-2030-01-02", "readings-2030-01-03"]


@pytest.mark.usefixtures("fresh_import")
def test_the_run_keeps_inside_the_invocation_time(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    # 5 s left and a 10 s margin: nothing may start; everything is left to the next run
    module = load(world, monkeypatch, ALLOW_NOW_OVERRIDE="true")
    result = module.handler({"now": "2026-11-22T12:00:00Z"}, context(5_000))
    assert result["created"] == [] and world.table_names() == []
    assert {s["table"] for s in result["skipped"] if "ran out" in s["reason"]} == {
        "readings-2026-11-22",
        "readings-2026-11-23",
        "readings-2026-11-24",
    }


@pytest.mark.usefixtures("fresh_import")
def test_a_bad_setting_fails_the_cold_start_naming_the_variable(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TABLE_PERIOD", raising=False)
    env = {k: v for k, v in world.env.items() if k != "TABLE_PERIOD"}
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    sys.modules.pop("rotator.handler", None)
    with pytest.raises(SettingsError) as caught:
        importlib.import_module("rotator.handler")
    assert caught.value.variable == "TABLE_PERIOD"


@pytest.mark.usefixtures("fresh_import")
def test_ingests_build_request_builds_the_table_a_late_reading_needs(
    world: World, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    module = load(world, monkeypatch)
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=PREFIX, table_period="day")
    two_days_ago = layout.table_for(int(time.time() * 1000) - 2 * 86_400_000)
    result = module.handler({"build": [two_days_ago]}, context())
    # Only that table is made (no current one: a build run is not a scheduled run), closed and on-demand
    assert result["created"] == [two_days_ago] and world.ours() == [two_days_ago] and result["errors"] == []
    assert world.billing(two_days_ago) == "PAY_PER_REQUEST"
    assert emitted_metrics(capsys.readouterr().out)["TablesCreated"] == 1.0
