"""Telegraf's and the OpenTelemetry Collector's records, written by the agents' own libraries, ingested:
what is stored for each, how each bad part is rejected naming it while its neighbours are stored, and
which bytes are which format."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest
from opentelemetry.metrics import CallbackOptions, Meter, Observation
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.metrics.v1 import metrics_pb2

from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS
from ingest.decoding import DEFAULT_FORMATS, decode_record
from ingest.formats import MAX_INFLATED, Formats
from ingest.kinesis_records import parse_event_record
from ingest.logic import BatchOutcome
from keydesign import Reading
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
from tests.unit.ingest.kinesis_events import kinesis_event, kinesis_record
from tests.unit.ingest.kpl import aggregate
from tests.unit.ingest.stored import stored_readings
from tests.unit.ingest.test_hostile_input import _assert_every_reject_is_a_message_sqs_accepts, _readings_of, handle
from tests.unit.ingest.test_logic import NOW, _ingestor

NS = 1_000_000  # nanoseconds a millisecond
Stored = tuple[str, int, dict[str, object], dict[str, str]]


def ingest(
    payloads: list[bytes], *, formats: Formats = DEFAULT_FORMATS, now_ms: int = NOW
) -> tuple[BatchOutcome, list[Stored], list[dict[str, Any]]]:
    """Ingest one batch of ``payloads`` as the handler does: the outcome, what is stored (newest copies) and
    the rejects' bodies. Nothing is ever handed back (no fault is injected), and every reading is counted once."""
    dynamodb, sqs = MemoryDynamo(tables={"readings"}), MemorySQS()
    ingestor = dataclasses.replace(_ingestor(dynamodb, sqs), formats=formats, wall_clock_ms=lambda: now_ms)
    try:
        outcome, failed = handle(ingestor, kinesis_event(payloads))
    finally:
        ingestor.close()
    assert failed == [] and outcome.retry == 0
    _readings_of(outcome)
    _assert_every_reject_is_a_message_sqs_accepts(sqs)
    return outcome, [_seen(r) for r in stored_readings(dynamodb.items())], _bodies(sqs)


def _seen(reading: Reading) -> Stored:
    return reading.entity_id, reading.ts_ms, dict(reading.measures), dict(reading.dimensions)


def _bodies(sqs: MemorySQS) -> list[dict[str, Any]]:
    return [json.loads(m["MessageBody"]) for m in sqs.messages]


def _why(bodies: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(b["field"], b["reason"]) for b in bodies]


# -- Influx line protocol (Telegraf's default) --------------------------------------------------

T_NS = (NOW - 60_000) * NS + 987_654  # sub-millisecond digits, cut


def test_each_line_is_a_reading_of_its_host_with_measurement_prefixed_measures() -> None:
    # Given a record of two lines as Telegraf writes them (several fields, tags, nanoseconds)
    record = line_protocol(
        Point("cpu")
        .tag("host", "web-01")
        .tag("cpu", "cpu-total")
        .field("usage_idle", 97.25)
        .field("usage_user", 1.5)
        .time(T_NS, WritePrecision.NS),
        Point("mem").tag("host", "web-01").field("used", 123456789).time(T_NS + 10 * NS, WritePrecision.NS),
    )
    # When it is ingested
    outcome, stored, rejects = ingest([record])
    # Then each line is one reading: the host is the entity, the other tags dimensions, the fields measures
    # named <measurement>_<field>, the time cut to the millisecond
    assert rejects == [] and outcome.written == 2
    assert stored == [
        ("web-01", NOW - 60_000, {"cpu_usage_idle": 97.25, "cpu_usage_user": 1.5}, {"cpu": "cpu-total"}),
        ("web-01", NOW - 60_000 + 10, {"mem_used": 123456789}, {}),
    ]


def test_booleans_are_1_and_0_strings_are_dimensions_and_escapes_are_undone() -> None:
    point = (
        Point("disk status")  # a space in a measurement, escaped by the writer
        .tag("host", "db-1")
        .tag("path", "/var/lib=x, y")  # an equals sign, a comma and a space in a tag value
        .field("healthy", True)
        .field("readonly", False)
        .field("mode", 'say "rw"')
        .field("free", 10)
        .time(T_NS, WritePrecision.NS)
    )
    _, stored, rejects = ingest([line_protocol(point)])
    assert rejects == []
    assert stored == [
        (
            "db-1",
            NOW - 60_000,
            {"disk_status_healthy": 1, "disk_status_readonly": 0, "disk_status_free": 10},
            {"path": "/var/lib=x, y", "mode": 'say "rw"'},
        )
    ]


def test_the_precision_setting_says_what_unit_line_protocol_timestamps_are_in() -> None:
    point = Point("t").tag("host", "h").field("v", 1.0)
    in_ms = line_protocol(point.time(NOW - 5_000, WritePrecision.MS))
    _, stored, _ = ingest([in_ms], formats=Formats(influx_unit_ns=NS))
    assert [s[1] for s in stored] == [NOW - 5_000]
    # The same record read as nanoseconds is a time in 1970: rejected naming the timestamp, never stored wrong
    _, stored, rejects = ingest([in_ms])
    assert stored == [] and [b["field"] for b in rejects] == ["timestamp"]


def test_a_bad_line_is_a_reject_naming_its_line_while_its_neighbours_are_stored() -> None:
    good = Point("cpu").tag("host", "h1").field("usage", 1.0).time(T_NS, WritePrecision.NS).to_line_protocol()
    no_host = Point("cpu").tag("dc", "x").field("usage", 2.0).time(T_NS, WritePrecision.NS).to_line_protocol()
    no_time = Point("cpu").tag("host", "h2").field("usage", 3.0).to_line_protocol()
    many = Point("cpu").tag("host", "h3").field("usage", 4.0).time(T_NS, WritePrecision.NS)
    for n in range(51):
        many = many.tag(f"t{n}", "v")
    lines = [good, "cpu,host=h5 usage", no_host, no_time, many.to_line_protocol(), "# a comment", "", good]
    # (the writer drops a NaN field; line protocol has no NaN)
    lines += [f"cpu,host=h4 usage=NaN {T_NS}", f'cpu,host=h6 usage="open {T_NS}']
    outcome, stored, rejects = ingest(["\n".join(lines).encode()])
    assert [s[0] for s in stored] == ["h1"]  # the one good reading (twice the same line: stored once)
    assert outcome.written == 2
    rejects.sort(key=lambda b: b["source"]["index"])
    assert [(b["field"], b["reason"].split(":")[0], b["source"]["index"]) for b in rejects] == [
        ("line", "line 2", 1),
        ("entity_id", "line 3", 2),
        ("timestamp", "line 4", 3),
        ("dimensions", "line 5", 4),
        ("line", "line 9", 6),
        ("line", "line 10", 7),
    ]
    assert "no tag names the entity: none of host, service.instance.id (entity_tags) is present" in rejects[1]["reason"]
    assert "holds 51 dimensions; the maximum is 50" in rejects[3]["reason"]
    assert "a field is not key=value" in rejects[0]["reason"]
    assert "string field value is not closed" in rejects[5]["reason"]
    # each reject carries its line as it arrived
    assert [b["payload"] for b in rejects[:3]] == ["cpu,host=h5 usage", no_host, no_time]


def test_a_text_record_no_line_of_which_is_line_protocol_is_one_reject_saying_it_is_neither() -> None:
    _, stored, rejects = ingest([b"hello world", b'"just a string"'])
    assert stored == []
    assert [(b["field"], b["source"]["index"]) for b in rejects] == [("data", None), ("data", None)]
    assert rejects[0]["reason"].startswith("is not JSON (") and "nor line protocol (line 1" in rejects[0]["reason"]
    assert "got a string" in rejects[1]["reason"]


def test_a_thousand_bad_lines_cost_a_bounded_number_of_messages() -> None:
    record = (
        "\n".join(f"cpu,host=h{n} usage" for n in range(1_000)).encode() + b"\ncpu,host=ok u=1 " + str(T_NS).encode()
    )
    outcome, stored, rejects = ingest([record])
    assert len(stored) == 1 and outcome.rejected == 1_000
    assert len(rejects) < 40 and sum(b["readings"] for b in rejects) == 1_000


# -- Telegraf JSON ----------------------------------------------------------------------------


def test_a_telegraf_json_metric_and_a_batch_of_them_are_readings() -> None:
    seconds = (NOW - 30_000) // 1000
    one = telegraf_json("cpu", {"usage_idle": 99.5, "on": True, "state": "ok"}, {"host": "h1", "cpu": "c0"}, seconds)
    batch = {
        "metrics": [
            telegraf_json("mem", {"free": 7}, {"host": "h2"}, seconds),
            telegraf_json("mem", {"free": [1]}, {"host": "h3"}, seconds),  # not a field value Telegraf writes
            telegraf_json("mem", {"free": 8}, {"rack": "r1"}, seconds),  # no host
        ]
    }
    _, stored, rejects = ingest([as_json(one), as_json(batch)])
    assert stored == [
        ("h1", seconds * 1000, {"cpu_usage_idle": 99.5, "cpu_on": 1}, {"cpu": "c0", "state": "ok"}),
        ("h2", seconds * 1000, {"mem_free": 7}, {}),
    ]
    assert [(b["field"], b["reason"].split(":")[0], b["source"]["index"]) for b in rejects] == [
        ("fields.free", "metrics[1]", 1),
        ("entity_id", "metrics[2]", 2),
    ]
    assert json.loads(rejects[0]["payload"]) == batch["metrics"][1]


def test_telegraf_json_timestamp_units_are_the_agents_setting() -> None:
    metric = as_json(telegraf_json("m", {"v": 1}, {"host": "h"}, NOW - 1_234))
    _, stored, _ = ingest([metric], formats=Formats(telegraf_json_unit_ns=NS))
    assert [s[1] for s in stored] == [NOW - 1_234]
    _, stored, rejects = ingest([metric])  # read as seconds (the default): far in the future, rejected
    assert stored == [] and "must lie between 1970" in rejects[0]["reason"]
    # A bad single metric is rejected with the record's bytes exactly
    assert rejects[0]["payload"] == metric.decode()


# -- OTLP (the OpenTelemetry Collector) ------------------------------------------------------


def _instruments(meter: Meter) -> None:
    meter.create_counter("http.server.requests").add(5, {"http.route": "/a"})
    meter.create_up_down_counter("queue.depth").add(-3)
    meter.create_gauge("room.temperature").set(21.5, {"room": "lab"})
    histogram = meter.create_histogram("http.server.duration", unit="ms")
    for value in (3.0, 7.0, 20.0):
        histogram.record(value)
    exponential = meter.create_histogram("payload.size")
    for value in (100.0, 300.0):
        exponential.record(value)

    def observe(options: CallbackOptions) -> list[Observation]:
        return [Observation(0.75, {"cpu": "0"})]

    meter.create_observable_gauge("system.cpu.utilization", callbacks=[observe])


RESOURCE = {"service.name": "checkout", "service.instance.id": "pod-7", "host.name": "node-1"}
DIMENSIONS = {"service_name": "checkout", "host_name": "node-1"}


def _otlp() -> Any:
    return otlp_request(_instruments, RESOURCE, exponential=("payload.size",))


def _expected(ts_ms: int) -> list[Stored]:
    def at(measures: dict[str, object], **extra: str) -> Stored:
        return ("pod-7", ts_ms, measures, {**DIMENSIONS, **extra})

    return sorted(
        [
            at({"http_server_requests": 5}, http_route="/a"),
            at({"queue_depth": -3}),
            at({"room_temperature": 21.5}, room="lab"),
            at(_histogram("http_server_duration", 3, 30.0, 3.0, 20.0)),
            at(_histogram("payload_size", 2, 400.0, 100.0, 300.0)),
            at({"system_cpu_utilization": 0.75}, cpu="0"),
        ],
        key=lambda s: sorted(s[2]),
    )


def _histogram(name: str, count: int, total: float, low: float, high: float) -> dict[str, object]:
    return {f"{name}_count": count, f"{name}_sum": total, f"{name}_min": low, f"{name}_max": high}


def _time_ms(request: Any) -> int:
    (point,) = request.resource_metrics[0].scope_metrics[0].metrics[0].sum.data_points
    return int(point.time_unix_nano // NS)


@pytest.mark.parametrize("closed", [False, True], ids=["flushed", "closed"])
@pytest.mark.parametrize("compression", ["none", "gzip", "zlib", "flate"])
@pytest.mark.parametrize("encoding", ["otlp_proto", "otlp_json"])
def test_every_sdk_data_point_is_a_reading_of_its_service_instance(
    encoding: str, compression: str, closed: bool
) -> None:
    # Given what the SDK exports for a counter, an up-down counter, gauges and histograms, as the Collector's
    # exporter writes it with this encoding and compression (flushed, as it does; closed, as others would)
    request = _otlp()
    data = request.SerializeToString() if encoding == "otlp_proto" else otlp_json(request)
    now_ms = _time_ms(request) + 1_000
    # When it is ingested
    outcome, stored, rejects = ingest([compress(data, compression, closed=closed)], now_ms=now_ms)
    # Then each data point is one reading: the entity is service.instance.id, the other resource and point
    # attributes are dimensions, a histogram is its count, sum, min and max
    assert rejects == []
    assert sorted(stored, key=lambda s: sorted(s[2])) == _expected(now_ms - 1_000)
    assert outcome.written == 6


def test_kpl_aggregated_records_of_each_format_are_read_member_by_member() -> None:
    # (the exporter's older releases aggregated records KPL's way)
    request = _otlp()
    now_ms = _time_ms(request) + 1_000
    line = line_protocol(Point("m").tag("host", "h1").field("v", 1).time((now_ms - 5) * NS, WritePrecision.NS))
    members = [("a", compress(request.SerializeToString(), "gzip")), ("b", line), ("c", b"\x00junk")]
    outcome, stored, rejects = ingest([aggregate(members)], now_ms=now_ms)
    assert sorted(stored, key=lambda s: sorted(s[2])) == sorted(
        [*_expected(now_ms - 1_000), ("h1", now_ms - 5, {"m_v": 1}, {})], key=lambda s: sorted(s[2])
    )
    assert [(b["field"], b["source"]["sub_sequence_number"]) for b in rejects] == [("data", 2)]
    assert outcome.written == 7


def test_a_summary_is_its_count_sum_and_quantiles() -> None:
    # The SDK makes no summaries (the Collector forwards them from Prometheus receivers): built with the
    # opentelemetry-proto messages themselves
    request = otlp_request(lambda m: m.create_counter("c").add(1), {"service.instance.id": "i-1"})
    metric = request.resource_metrics[0].scope_metrics[0].metrics.add(name="rpc.latency")
    t_ms = _time_ms(request)
    point = metric.summary.data_points.add(time_unix_nano=t_ms * NS + 5, count=4, sum=10.0)
    for share, value in ((0.5, 2.0), (0.99, 4.0), (0.999, 4.5), (1.0, 5.0)):
        point.quantile_values.add(quantile=share, value=value)
    point.attributes.append(KeyValue(key="method", value=AnyValue(string_value="Get")))
    _, stored, rejects = ingest([request.SerializeToString()], now_ms=t_ms)
    assert rejects == []
    summary = [s for s in stored if "rpc_latency_count" in s[2]]
    assert summary == [
        (
            "i-1",
            t_ms,
            {
                "rpc_latency_count": 4,
                "rpc_latency_sum": 10.0,
                "rpc_latency_p50": 2.0,
                "rpc_latency_p99": 4.0,
                "rpc_latency_p99_9": 4.5,
                "rpc_latency_p100": 5.0,
            },
            {"method": "Get"},
        )
    ]


def test_bad_data_points_are_rejects_naming_them_and_their_neighbours_are_stored() -> None:
    request = otlp_request(lambda m: m.create_counter("ok").add(1), {"service.instance.id": "i-1"})
    now_ms = _time_ms(request)
    scope = request.resource_metrics[0].scope_metrics[0]
    t_ns = now_ms * NS
    scope.metrics.add(name="no.data")
    gauge = scope.metrics.add(name="g").gauge
    gauge.data_points.add(as_double=1.0)  # no time
    gauge.data_points.add(time_unix_nano=t_ns)  # no value
    gauge.data_points.add(time_unix_nano=t_ns, as_double=2.0, flags=metrics_pb2.DATA_POINT_FLAGS_NO_RECORDED_VALUE_MASK)
    gauge.data_points.add(time_unix_nano=t_ns, as_double=float("inf"))
    gauge.data_points.add(time_unix_nano=t_ns, as_int=7)  # the good neighbour
    other = request.resource_metrics.add()  # a resource without the entity attribute
    other.resource.attributes.append(KeyValue(key="host.name", value=AnyValue(string_value="n1")))
    other.scope_metrics.add().metrics.add(name="x").gauge.data_points.add(time_unix_nano=t_ns, as_int=1)
    _, stored, rejects = ingest([request.SerializeToString()], now_ms=now_ms)
    assert sorted(str(s[2]) for s in stored) == ["{'g': 7}", "{'ok': 1}"]
    where = "resourceMetrics[0].scopeMetrics[0].metrics"
    rejects.sort(key=lambda b: b["source"]["index"])
    assert [(b["field"], b["reason"].split(": ")[0], b["source"]["index"]) for b in rejects] == [
        ("data", f"{where}[1]", 1),
        ("timeUnixNano", f"{where}[2] (g) data point 0", 2),
        ("value", f"{where}[2] (g) data point 1", 3),
        ("flags", f"{where}[2] (g) data point 2", 4),
        ("measures.g", f"{where}[2] (g) data point 3", 5),
        ("entity_id", "resourceMetrics[1].scopeMetrics[0].metrics[0] (x) data point 0", 7),
    ]
    assert "none of host, service.instance.id (entity_tags) is present" in rejects[-1]["reason"]


def test_two_names_that_become_one_are_a_reject_naming_both_never_merged() -> None:
    request = otlp_request(
        lambda m: m.create_gauge("t").set(1.0, {"a.b": "dot", "a_b": "underscore"}), {"service.instance.id": "i"}
    )
    _, stored, rejects = ingest([request.SerializeToString()], now_ms=_time_ms_any(request))
    assert stored == []
    assert [(b["field"], b["reason"].split(": ", 1)[1]) for b in rejects] == [
        ("dimensions.a_b", "attributes 'a.b' and 'a_b' are both stored as 'a_b'")
    ]


def test_the_entity_attribute_is_configurable() -> None:
    request = otlp_request(lambda m: m.create_gauge("t").set(1.0), {"device_id": "d-9", "service.instance.id": "x"})
    _, stored, _ = ingest(
        [request.SerializeToString()], formats=Formats(entity_tags=("device_id",)), now_ms=_time_ms_any(request)
    )
    assert [(s[0], s[3]) for s in stored] == [("d-9", {"service_instance_id": "x"})]


def _time_ms_any(request: Any) -> int:
    return int(request.resource_metrics[0].scope_metrics[0].metrics[0].gauge.data_points[0].time_unix_nano // NS)


def test_corrupt_or_oversized_compressed_records_are_one_reject_each() -> None:
    request = _otlp()
    raw = request.SerializeToString()
    gzipped = compress(raw, "gzip")  # flushed: cut anywhere, it no longer ends on the flush
    bomb = compress(b"\n" + b"\x00" * (MAX_INFLATED + 10), "gzip")
    dense = compress(b"\n" + b"\x00" * 100_000, "zlib")  # under 8 MiB, but a thousand times its size
    records = [gzipped[:-9], bomb, raw[:-3], compress(raw, "gzip", closed=True)[:-2], dense]
    _, stored, rejects = ingest(records, now_ms=0)
    assert stored == []
    assert [(b["field"], b["source"]["index"]) for b in rejects] == [("data", None)] * 5
    assert "gzip that does not decompress: the compressed stream is truncated" in rejects[0]["reason"]
    assert (
        f"is gzip that inflates past 16 times its size, {min(MAX_INFLATED, 16 * len(bomb)):,} bytes"
        in (rejects[1]["reason"])
    )
    assert "is not UTF-8 text (JSON or line protocol), nor OTLP protobuf" in rejects[2]["reason"]
    assert "gzip that does not decompress" in rejects[3]["reason"]
    assert f"is zlib that inflates past 16 times its size, {16 * len(dense):,} bytes" in rejects[4]["reason"]


# -- which format a record is --------------------------------------------------------------------


def _kinds(data: bytes, formats: Formats = DEFAULT_FORMATS) -> tuple[list[object], list[tuple[str, str]]]:
    decoded = decode_record(0, parse_event_record(kinesis_record(data, 0)), formats)
    return [c.value for c in decoded.candidates], [(r.field, r.reason) for r in decoded.rejects]


def test_a_format_the_deployment_does_not_enable_is_rejected_saying_which_it_is() -> None:
    only_json = Formats(enabled=frozenset())
    metric = as_json(telegraf_json("m", {"v": 1}, {"host": "h"}, 1))
    request = _otlp()
    assert _kinds(metric, only_json)[1] == [
        ("data", "is Telegraf JSON, a format this deployment does not read (ingest_formats: none)")
    ]
    assert _kinds(otlp_json(request), Formats(enabled=frozenset({"otlp_proto"})))[1] == [
        ("data", "is OTLP JSON, a format this deployment does not read (ingest_formats: otlp_proto)")
    ]
    # Without line protocol, text is JSON or nothing; without OTLP protobuf, its bytes are no format at all
    assert "is not JSON" in _kinds(b"cpu,host=h v=1 1", only_json)[1][0][1]
    assert "nor OTLP protobuf" in _kinds(request.SerializeToString(), only_json)[1][0][1]


def test_ingests_own_json_is_read_as_before_beside_the_agents_formats() -> None:
    ours = {"entity_id": "s1", "timestamp": NOW, "measures": {"fields": 1}, "dimensions": {"name": "x"}}
    assert _kinds(as_json(ours)) == ([ours], [])
    assert _kinds(as_json([ours, ours])) == ([ours, ours], [])
    assert _kinds(json.dumps(ours).encode("utf-16")) == ([ours], [])  # UTF-16 JSON, as before
    # a line-protocol record that starts with a blank line is not mistaken for OTLP protobuf
    values, rejects = _kinds(b"\ncpu,host=h v=1 1700000000000000000")
    assert rejects == [] and values == [{"entity_id": "h", "timestamp": 1_700_000_000_000, "measures": {"cpu_v": 1.0}}]


def test_agent_readings_resolve_to_the_last_published_copy_across_shards() -> None:
    # Given the same Telegraf metric published twice with random partition keys, so on two shards: the copy
    # published last got the *lower* sequence number (sequence numbers do not order two shards)
    metric = as_json(telegraf_json("cpu", {"usage": 12.5}, {"host": "h1"}, (NOW - 10_000) // 1000))
    first = kinesis_record(metric, 5, partition_key="3f1c9a", shard_id="shardId-000000000001")
    last = kinesis_record(metric, 1, partition_key="b72e40", shard_id="shardId-000000000002")
    dynamodb, sqs = MemoryDynamo(tables={"readings"}), MemorySQS()
    ingestor = _ingestor(dynamodb, sqs)
    try:
        for record in (first, last):  # each shard's batch on its own
            outcome, failed = handle(ingestor, {"Records": [record]})
            assert failed == [] and outcome.written == 1
    finally:
        ingestor.close()
    # Then readers find one reading, equal to what was published: an agent's reading carries no event id,
    # so its id is derived from its content and every copy of it is the same reading, whichever block wins
    readings = stored_readings(dynamodb.items())
    assert [_seen(r) for r in readings] == [("h1", (NOW - 10_000) // 1000 * 1000, {"cpu_usage": 12.5}, {})]
    # and two different values at one time are two readings, both kept: nothing is lost to the other shard
    other = as_json(telegraf_json("cpu", {"usage": 13.0}, {"host": "h1"}, (NOW - 10_000) // 1000))
    _, stored, _ = ingest([metric, other])
    assert sorted(s[2]["cpu_usage"] for s in stored) == [12.5, 13.0]  # type: ignore[type-var]
