"""The ingest handler on moto, fed what Telegraf and the OpenTelemetry Collector write (by their own libraries),
in one batch with ingest's own JSON: each agent's readings read back through the query plans as the agent sent
them, each bad part on the rejects queue with its reason."""

from __future__ import annotations

from types import ModuleType

import pytest

from tests.integration.ingest.conftest import Aws, now_ms
from tests.integration.ingest.helpers import invoke
from tests.integration.mocked_aws import fresh_handler
from tests.unit.ingest.agents import (
    Point,
    WritePrecision,
    as_json,
    compress,
    line_protocol,
    otlp_json,
    otlp_request,
    telegraf_json,
)
from tests.unit.ingest.kinesis_events import kinesis_event, reading

pytestmark = pytest.mark.integration

NS = 1_000_000


def test_every_agents_format_in_one_batch_reads_back_as_sent(
    aws: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given one batch holding ingest's JSON, Telegraf's line protocol and JSON, and the Collector's OTLP
    # (protobuf gzip-flushed, and JSON), each record with a bad part beside its good ones
    request = otlp_request(
        lambda meter: meter.create_gauge("room.temperature").set(21.5, {"room": "lab"}),
        {"service.instance.id": "pod-7"},
    )
    point = request.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0]
    t_ms = point.time_unix_nano // NS
    request.resource_metrics[0].scope_metrics[0].metrics.add(name="empty")  # a metric with no data: a reject
    lines = line_protocol(
        Point("cpu").tag("host", "web-01").field("usage", 12.5).time((t_ms - 5) * NS + 7, WritePrecision.NS),
        Point("cpu").tag("rack", "r1").field("usage", 1.0).time(t_ms * NS, WritePrecision.NS),  # no host
    )
    metric = telegraf_json("mem", {"free": 7, "ok": True}, {"host": "web-02"}, (t_ms - 2_000) // 1000)
    payloads = [
        as_json(reading("sensor-1", t_ms - 1, "e1", temp=1.0)),
        lines,
        as_json({"metrics": [metric, {"name": "mem"}]}),
        compress(request.SerializeToString(), "gzip"),
        otlp_json(request),
    ]

    # When Lambda delivers it
    result = invoke(handler_module, kinesis_event(payloads), capsys)

    # Then every good part is stored once and reads back through the query plans as sent
    assert result.failed == []
    span = (t_ms - 60_000, t_ms + 1)
    assert [(r.ts_ms, dict(r.measures)) for r in aws.query_entity("web-01", *span)] == [(t_ms - 5, {"cpu_usage": 12.5})]
    assert [(r.ts_ms, dict(r.measures)) for r in aws.query_entity("web-02", *span)] == [
        ((t_ms - 2_000) // 1000 * 1000, {"mem_free": 7, "mem_ok": 1})
    ]
    # the same data point, in two encodings: one reading
    otel = aws.query_entity("pod-7", *span)
    assert [(r.ts_ms, dict(r.measures), dict(r.dimensions)) for r in otel] == [
        (t_ms, {"room_temperature": 21.5}, {"room": "lab"})
    ]
    assert [r.event_id for r in aws.query_entity("sensor-1", *span)] == ["e1"]
    # and each bad part is on the rejects queue, named
    reasons = sorted((r["field"], r["reason"].split(":")[0]) for r in aws.rejects())
    assert reasons == [
        ("data", "resourceMetrics[0].scopeMetrics[0].metrics[1]"),
        ("data", "resourceMetrics[0].scopeMetrics[0].metrics[1]"),
        ("entity_id", "line 2"),
        ("fields", "metrics[1]"),
    ]
    outcome = result.outcome
    assert outcome.readings == outcome.written + outcome.rejected == 9


def test_a_deployment_reads_only_the_formats_it_enables(
    aws: Aws, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("INGEST_FORMATS", "otlp_proto")
    with fresh_handler("ingest.handler", "INGESTOR") as module:
        t_ns = (now_ms() - 1_000) * NS
        line = line_protocol(Point("cpu").tag("host", "h").field("v", 1.0).time(t_ns, WritePrecision.NS))
        result = invoke(module, kinesis_event([line]), capsys)
    assert result.failed == [] and aws.readings() == []
    (reject,) = aws.rejects()
    assert reject["field"] == "data" and reject["reason"].startswith("is not JSON (")
    assert reject["reason"].endswith(
        "and line protocol is a format this deployment does not read (ingest_formats: otlp_proto)"
    )
