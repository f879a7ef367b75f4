"""The functions wired on start: each with the stack's environment, each through its trigger."""

from __future__ import annotations

import json
import time
from functools import partial
from typing import Any

import pytest

from client import ApiError, QueryClient
from demo.query_checks import compare_readings, expected_readings
from infra.config import LambdaFunction
from keydesign.writetier import GROUP_PK_PREFIX
from local_runtime import system as system_module
from local_runtime.scheduler import SimulatedClock
from rotator.stream_mappings import LambdaMappings, table_of_stream
from tests.integration.local_runtime.conftest import (
    WAIT_S,
    ingest_only,
    local_config,
    publish_readings,
    readings,
    stored_items,
)
from tsctl.commands.serve import curl_examples

pytestmark = pytest.mark.integration

DAY_MS = 86_400_000


def test_every_function_gets_the_environment_the_stack_builds(running: Any) -> None:
    # Given every function on (with per-period tables, so the rotator runs too; rollups, not run in the test)
    config = local_config(table_period="day", bucket="15m")
    options = ingest_only(
        query_api=True,
        hot_keys=True,
        rotator=True,
        rollups=True,
        rollup_every_s=3600.0,
        compaction=True,
        compaction_every_s=3600.0,
    )
    system = running(config, options)
    # Then each function's environment is Context.function_environment with the local wiring, nothing else
    # but the settle times, which follow the ingest timeout (+ 5 s: ingest runs in this process)
    settle = f"{config.ingest_timeout_s + 5}s"
    local = {
        LambdaFunction.ROLLUP: {"ROLLUP_SETTLE": settle},
        LambdaFunction.COMPACTION: {"COMPACTION_SETTLE": settle},
    }
    for function in LambdaFunction:
        spec = system.functions.loaded[system.functions.name(function)].spec
        expected = {**config.function_environment(function, system.functions.wiring), **local.get(function, {})}
        assert dict(spec.environment) == expected, function
    # And the wiring holds local values: moto's queue and topic, a secret in moto's Secrets Manager
    wiring = system.functions.wiring
    assert wiring.rejects_queue_url == system.endpoints.rejects_queue_url
    assert wiring.alert_topic_arn == system.endpoints.alarm_topic_arn
    assert wiring.hotkeys_function_arn == system.functions.arn("hotkeys")
    assert wiring.hotkeys_on_failure_arn.endswith(":TimeSeriesIngest-hotkeys-failures")
    secret = system.client("secretsmanager").get_secret_value(SecretId=wiring.cursor_secret_arn)
    assert len(secret["SecretString"]) >= 32
    assert system.endpoints.api_url is not None


def test_the_query_api_answers_through_http_with_cursor_pages(running: Any) -> None:
    # Given the query API served, and readings of 5 entities ingested
    system = running(options=ingest_only(query_api=True))
    published = readings(600, entities=5, prefix="q")
    publish_readings(system, published)
    assert system.wait_until_idle(WAIT_S)
    # When one entity's range is read 50 readings a page, following the cursor
    client = QueryClient(str(system.endpoints.api_url), max_attempts=1)
    low = min(r["timestamp"] for r in published)
    high = max(r["timestamp"] for r in published) + 1
    pages = list(client.readings_pages("sensor-0003", low, high, limit=50))
    got = [r.as_dict() for page in pages for r in page.items]
    # Then the pages hold exactly the entity's readings, in order, once each (signed cursors from the secret)
    assert compare_readings(got, expected_readings(published, "sensor-0003", low, high)) is None
    assert len(got) == 120 and len(pages) == 3
    # And a tampered cursor is refused, as in AWS
    with pytest.raises(ApiError) as refused:
        list(client.readings_pages("sensor-0003", low, high, limit=50, cursor="AAAA"))
    assert refused.value.status == 400 and refused.value.parameter == "cursor"


def test_the_curl_examples_tsctl_serve_prints_all_answer(running: Any) -> None:
    # (rollups on, as serve has them, for GET /aggregates; their schedule need not run for it to answer)
    system = running(options=ingest_only(query_api=True, rollups=True, rollup_every_s=3600.0))
    publish_readings(system, [{**r, "entity_id": "sensor-alpha-001"} for r in readings(20, prefix="c")])
    assert system.wait_until_idle(WAIT_S)
    api_url = str(system.endpoints.api_url)
    client = QueryClient(api_url, max_attempts=1)
    commands = curl_examples(api_url, int(time.time() * 1000))
    assert commands[0] == f"API={api_url}"
    for command in commands[1:]:
        url = command.removeprefix('curl "').removesuffix('"').replace("$API", "")
        path, _, query = url.partition("?")
        params = dict(part.split("=", 1) for part in query.split("&")) if query else {}
        client.get(path, params)  # ApiError unless a 2xx
    latest = client.latest("sensor-alpha-001").reading
    assert latest is not None and latest.event_id == "c-19"


def test_the_hot_key_detector_counts_every_write_into_the_control_table(running: Any) -> None:
    # Given the detector on the readings table's stream
    system = running(options=ingest_only(hot_keys=True))
    table = system.readings_tables()[0]
    # When readings are ingested and both streams have drained
    publish_readings(system, readings(500, prefix="h"))
    assert system.wait_until_idle(WAIT_S)
    # Then the real handler saw every write (a block each, and the write tier's items, which it counts
    # apart: dense marks here, the entities sending 10 readings a batch) and failed none
    mapping = system.stats()["event_source_mappings"][f"{system.functions.name('hotkeys')}:{table}"]
    items = stored_items(system)
    blocks = [i for i in items if not i["pk"]["S"].startswith(GROUP_PK_PREFIX)]
    assert len(items) > len(blocks)  # the dense marks, seen and not counted as an entity's writes
    assert mapping["records_received"] == mapping["records_succeeded"] >= len(items)
    assert mapping["records_skipped"] == 0 and mapping["function_errors"] == 0
    # And its runs in the control table hold every block's write and write units (read from its sort key),
    # once each: stream delivery is at least once, but a redelivered run is stored once
    control = system.client("dynamodb").scan(TableName=system.endpoints.control_table)["Items"]
    loads = [json.loads(i["load"]["S"])["k"] for i in control if i["pk"]["S"].startswith("load#")]
    assert sum(v[1] for load in loads for v in load.values()) == len(blocks)
    units = sum(int(i["sk"]["S"].rsplit("#", 1)[1]) for i in blocks)
    assert sum(v[0] for load in loads for v in load.values()) == units


class HeldTime:
    """``time.monotonic`` that stands still from its creation until :meth:`release`, then runs on from there."""

    def __init__(self) -> None:
        self._at = time.monotonic()
        self._behind: float | None = None

    def __call__(self) -> float:
        return self._at if self._behind is None else time.monotonic() - self._behind

    def release(self) -> None:
        self._behind = time.monotonic() - self._at


def test_the_rotator_runs_on_a_speed_up_clock_and_maps_each_tables_stream(
    running: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given daily tables, the detector, and the rotator on a clock where an hour passes in a second (at
    # 4 s a day, today's table could close before the readings below reached the detector). Its clock
    # starts at the start of today: today's table then stays open for 26 h 15 min of it (26 s) whatever
    # the hour; started at the wall clock, it closed 2.3 s after a start at 23:59 UTC.
    # The clock stands still until the readings below have reached the detector, so however slow the
    # machine, today's table is open while they do; then it runs at its speed.
    config = local_config(table_period="day", bucket="15m")
    started_ms = int(time.time() * 1000)
    held = HeldTime()
    monkeypatch.setattr(
        system_module,
        "SimulatedClock",
        partial(SimulatedClock, start_ms=started_ms // DAY_MS * DAY_MS, monotonic=held),
    )
    system = running(config, ingest_only(hot_keys=True, rotator=True, rotator_clock_speed=3_600))
    hotkeys_arn = system.functions.arn("hotkeys")
    assert system.lambda_api is not None
    rotators_view = LambdaMappings(system.lambda_api)
    layout = config.layout()
    period = layout.table_period
    assert period is not None
    # Then its first run, before start returned, mapped today's table's stream and the next two days'
    # (PREBUILD_PERIODS) to the detector; later runs, on the fast clock, may already have done more
    today = layout.table_for(started_ms)
    first = {today, layout.table_for(period.next_start(started_ms))}
    first.add(layout.table_for(period.next_start(period.next_start(started_ms))))

    def mapped() -> set[str | None]:
        return {table_of_stream(m.source_arn) for m in rotators_view.list(hotkeys_arn)}

    assert first <= mapped()
    # And readings written to today's table reach the detector through that mapping
    publish_readings(system, readings(100, start_ms=started_ms, prefix="r"))  # in today's table
    assert system.wait_until_idle(WAIT_S), system.stats()
    name = f"{system.functions.name('hotkeys')}:{today}"
    assert system.stats()["event_source_mappings"][name]["records_received"] == len(stored_items(system))
    # And as simulated days pass, it builds the days after and maps their streams too, and removes the
    # mapping of a day once it is closed
    held.release()
    # (the rest of today and its grace, at most 24 h + 2 h 15 min, take 27 s at this speed)
    deadline = time.monotonic() + WAIT_S
    later: set[str] = set()
    while time.monotonic() < deadline and not (later & mapped() and today not in mapped()):
        time.sleep(0.5)
        later = set(system.readings_tables()) - first
    assert later & mapped(), "no table built ahead was mapped as simulated days passed"
    assert today not in mapped(), "the first day's mapping outlived its day"
    (schedule,) = system.schedules
    assert schedule.runs >= 2 and schedule.failures == 0
    assert not system.rotations[-1]["summary"]["errors"]
