"""A deployment's failure paths end to end on the local stack, in the default hourly shape: readings
days late, a table built on ingest's request, and a failed batch put through again by ``tsctl replay``.

One system serves the module (hourly tables, the rotator, the query API; no hot keys or rollups):
starting one costs seconds. The rotator's first run builds this hour's table, the two ahead and those
still in grace; every older period's table is built only when a reading asks for it, through the
local Lambda API, as ingest asks the rotator in AWS. Ingest's writes go through a fault injector
whose plan a test switches on for the batch that must fail. Each test uses its own entities.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import pytest

from client import QueryClient
from keydesign import format_ts
from local_runtime import LocalFaults, LocalSystem
from local_runtime.faults import FaultPlan
from tests.integration.local_runtime.conftest import (
    WAIT_S,
    ingest_only,
    local_config,
    publish_readings,
    queue_messages,
    stored,
)
from tsctl.cli import main

pytestmark = pytest.mark.integration

HOUR = 3_600_000
DAY = 24 * HOUR
T = TypeVar("T")


@pytest.fixture(scope="module")
def system(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalSystem]:
    # The functions' logs go to a file, as to CloudWatch Logs, not into the commands' captured output.
    log = tmp_path_factory.mktemp("late") / "functions.log"
    faults = LocalFaults(writes=FaultPlan())  # a plan that fails nothing until a test changes it
    options = ingest_only(query_api=True, rotator=True, faults=faults, function_log=log)
    with LocalSystem(local_config(table_period="hour"), options) as running:
        yield running


def reading(entity: str, ts_ms: int, event_id: str, temp: float = 21.5) -> dict[str, Any]:
    return {"entity_id": entity, "timestamp": ts_ms, "event_id": event_id, "measures": {"temp": temp}}


def eventually(probe: Callable[[], T], *, timeout_s: float = WAIT_S) -> T:
    """``probe()``'s first truthy answer, polled until ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while True:
        answer = probe()
        if answer or time.monotonic() > deadline:
            return answer
        time.sleep(0.2)


def api_readings(system: LocalSystem, entity: str, start: int, end: int) -> list[str]:
    return [r.event_id for r in QueryClient(str(system.endpoints.api_url)).readings(entity, start, end, limit=100)]


def tsctl_replay(system: LocalSystem, capsys: pytest.CaptureFixture[str], action: str, *extra: str) -> Any:
    endpoints = system.endpoints
    argv = ["replay", action, "--endpoint-url", endpoints.endpoint_url, "--region", endpoints.region]
    argv += ["--ingest-queue-url", endpoints.ingest_failures_queue_url, "--queue", "ingest", "--json", *extra]
    if action == "run":
        argv += ["--lambda-endpoint-url", str(endpoints.lambda_endpoint_url)]
    code = main(argv)
    # The functions it invoked printed their EMF metrics to stdout too (one line each, as in
    # CloudWatch Logs); the command's own JSON is the indented document at the end.
    out = capsys.readouterr().out
    return code, json.loads(out[out.rindex("\n{\n") + 1 :] if not out.startswith("{\n") else out)


# -- late data ------------------------------------------------------------------------------------


def test_readings_days_late_are_stored_in_their_hours_table_built_on_request(system: LocalSystem) -> None:
    # Given a device back from two days offline, whose hour's table the rotator never built (its
    # first run builds only the open ones), and a reading older than MAX_AGE (3 days)
    now = int(time.time() * 1000)
    hour = now - 2 * DAY - (now % HOUR)
    table = system.config.layout().table_for(hour)
    assert table not in system.readings_tables()
    late = [reading("late-1", hour + 60_000 * n, f"late-{n}") for n in range(3)]
    too_old = reading("late-1", now - 3 * DAY - HOUR, "too-old")
    # When they are published
    publish_readings(system, [*late, too_old], validate=False)
    # Then ingest asks the rotator for the table (through the local Lambda API), the mapping's
    # redelivery stores the late readings in it, and the API reads them back from it
    assert eventually(lambda: table in system.readings_tables())
    assert eventually(lambda: len(api_readings(system, "late-1", hour, hour + HOUR)) == 3)
    assert api_readings(system, "late-1", hour, hour + HOUR) == ["late-0", "late-1", "late-2"]
    # And the built table is a closed one: on-demand, TTL on, no stream mapping to wait for
    described = system.client("dynamodb").describe_table(TableName=table)["Table"]
    assert described["BillingModeSummary"]["BillingMode"] == "PAY_PER_REQUEST"
    # And the reading older than MAX_AGE is on the rejects queue with its reason, stored nowhere (its
    # record was redelivered for the others, so the reject may come twice: at least once, one reject_id)
    found = eventually(lambda: queue_messages(system, system.endpoints.rejects_queue_url))
    rejects = list({r["reject_id"]: r for r in found}.values())
    assert [(r["field"], json.loads(r["payload"])["event_id"]) for r in rejects] == [("timestamp", "too-old")]
    assert "is older than the accepted age" in rejects[0]["reason"]
    assert "too-old" not in {r.event_id for r in stored(system)}

    # When a correction for that hour arrives a day later (the table exists now, closed)
    publish_readings(system, [reading("late-1", hour + 60_000, "late-1", temp=30.0)])
    # Then it is written there at once and read back in place of the first copy
    api = QueryClient(str(system.endpoints.api_url))
    assert eventually(
        lambda: [r.measures["temp"] for r in api.readings("late-1", hour, hour + HOUR)] == [21.5, 30.0, 21.5]
    )


# -- a failed batch, replayed -----------------------------------------------------------------------


def test_a_failed_ingest_batch_is_replayed_once_and_an_aged_out_range_is_named(
    system: LocalSystem, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given ingest's writes refused for a while (a role that lost its DynamoDB permission), so the
    # mapping's retries run out on a batch and Lambda records it on the ingest failure queue
    (injector,) = system.functions.write_faults
    injector.plan = FaultPlan(throttle_rate=1.0, throttle_code="AccessDeniedException")
    now = int(time.time() * 1000)
    batch = [reading("replayed-1", now - 1_000 + n, f"rp-{n}") for n in range(5)]
    skipped = system.stats()["event_source_mappings"]["ingest"]["records_skipped"]
    publish_readings(system, batch)
    assert eventually(lambda: system.stats()["event_source_mappings"]["ingest"]["records_skipped"] > skipped)
    code, listed = tsctl_replay(system, capsys, "list")
    assert code == 0 and len(listed["ingest"]) == 1
    failed = listed["ingest"][0]
    # (one record: the producer packs the five readings into it)
    assert failed["condition"] == "RetryAttemptsExhausted" and failed["batch_size"] == 1
    assert failed["aged_out"] is False and failed["function_arn"].endswith(":function:TimeSeriesIngest-ingest")
    assert api_readings(system, "replayed-1", now - 2_000, now + 1_000) == []

    # When the permission is back and `tsctl replay run` puts the batch through ingest (its Lambda API)
    injector.plan = FaultPlan()
    code, ran = tsctl_replay(system, capsys, "run")
    # Then every record is stored, with its original sequence number as the version, and the message deleted
    assert code == 0
    ((outcome,),) = ran.values()
    assert (outcome["records_read"], outcome["records_failed"], outcome["deleted"]) == (1, 0, True)
    assert api_readings(system, "replayed-1", now - 2_000, now + 1_000) == [f"rp-{n}" for n in range(5)]
    copies = [i for i in stored(system) if i.entity_id == "replayed-1"]
    # And a second replay finds nothing to do: nothing is stored twice
    assert tsctl_replay(system, capsys, "run") == (0, {"ingest": []})
    assert [i for i in stored(system) if i.entity_id == "replayed-1"] == copies

    # Given a failure recorded days ago, whose range the stream no longer holds (it keeps 96 hours)
    stream, shard = (
        system.endpoints.stream_arn,
        system.client("kinesis").list_shards(StreamName=system.endpoints.stream_name)["Shards"][0]["ShardId"],
    )
    long_ago = format_ts(now - 5 * DAY)
    body = {
        "requestContext": {"functionArn": failed["function_arn"], "condition": "RetryAttemptsExhausted"},
        "timestamp": long_ago,
        "KinesisBatchInfo": {
            "shardId": shard,
            "startSequenceNumber": "0",
            "endSequenceNumber": "0",
            "approximateArrivalOfFirstRecord": long_ago,
            "approximateArrivalOfLastRecord": long_ago,
            "batchSize": 1,
            "streamArn": stream,
        },
    }
    queue = system.endpoints.ingest_failures_queue_url
    system.client("sqs").send_message(QueueUrl=queue, MessageBody=json.dumps(body))
    aged_out_at = format_ts(now - 5 * DAY + 96 * HOUR)
    # When it is listed and replayed: named as aged out, with when, and the message kept (exit 1)
    (_, listed) = tsctl_replay(system, capsys, "list")
    assert [(m["aged_out"], m["stream_keeps_it_until"]) for m in listed["ingest"]] == [(True, aged_out_at)]
    code, ran = tsctl_replay(system, capsys, "run")
    (kept,) = ran["ingest"]
    assert code == 1 and not kept["deleted"] and kept["records_read"] == 0
    assert kept["lost"].startswith("records from 0 to the range's end (exclusive) aged out of the stream at ")
    assert aged_out_at in kept["lost"] and "--drop-lost" in kept["kept_because"]
    # And once the operator has read it, --drop-lost deletes it
    code, ran = tsctl_replay(system, capsys, "run", "--drop-lost")
    assert code == 0 and [o["deleted"] for o in ran["ingest"]] == [True]
