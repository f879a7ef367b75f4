"""Readings written as the agents write them, checked against the agents' own libraries: influxdb-client's
``Point`` for line protocol, opentelemetry-proto's messages for OTLP (JSON and protobuf)."""

from __future__ import annotations

import json
import sys
import uuid
import zlib
from typing import Any

import pytest
from google.protobuf import json_format
from hypothesis import example, given, settings
from hypothesis import strategies as st
from influxdb_client import Point, WritePrecision
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest

from infra.config import IotTopicRule
from keydesign import InvalidInput
from producer.formats import (
    AGENT_FORMATS,
    AgentPacker,
    FormatUnavailable,
    compress,
    influx_line,
    iot_rule_output,
    otlp_proto,
    otlp_request,
    telegraf_json,
)
from producer.packing import ReadingTooLarge

TS_MS = 1_795_000_000_123
READING: dict[str, Any] = {
    "entity_id": "sensor-000001",
    "event_id": "w0-1",
    "timestamp": TS_MS,
    "measures": {"temp": 21.5, "count": 3, "whole": 20.0},
    "dimensions": {"site": "plant 7", "line": "a,b=c"},
}

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,20}", fullmatch=True)
numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=False, allow_infinity=False, width=64),
)
readings = st.fixed_dictionaries(
    {
        "entity_id": st.from_regex(r"[A-Za-z0-9._:@+=/-]{1,40}", fullmatch=True),
        "timestamp": st.integers(min_value=1_000_000_000_000, max_value=4_000_000_000_000),
        "measures": st.dictionaries(names, numbers, min_size=1, max_size=5),
        # the characters line protocol escapes, often, among any others but lone surrogates (no reading
        # holds one: Reading.parse refuses a string UTF-8 cannot encode, and so do the OTLP messages)
        "dimensions": st.dictionaries(
            names,
            st.text(
                st.one_of(st.sampled_from(',= \\"\n\r\t#'), st.characters(exclude_categories=("Cs",))), max_size=30
            ),
            max_size=4,
        ),
    }
)


# -- line protocol: what influxdb-client's Point writes ----------------------------------------


def _point(reading: dict[str, Any], measurement: str, entity_tag: str) -> str:
    point = Point(measurement).tag(entity_tag, reading["entity_id"])
    point.time(reading["timestamp"] * 10**6, WritePrecision.NS)
    for name, value in reading.get("dimensions", {}).items():
        if name != entity_tag:
            point.tag(name, value)
    for name, value in reading["measures"].items():
        point.field(name, value)
    return str(point.to_line_protocol())


def test_a_line_is_what_influxdb_clients_point_writes() -> None:
    line = influx_line(READING, measurement="env reading", entity_tag="host")
    assert line == _point(READING, "env reading", "host")
    assert line == (
        r"env\ reading,host=sensor-000001,line=a\,b\=c,site=plant\ 7 count=3i,temp=21.5,whole=20 1795000000123000000"
    )


@settings(max_examples=300, deadline=None)
@example(reading={**READING, "dimensions": {"a": "ends\\", "z": "x"}}, measurement="m")
@example(reading={**READING, "dimensions": {"k e,y=": 'v\n\t\r"q"', "empty": ""}}, measurement="m#, n")
@given(
    reading=readings,
    measurement=st.text(st.one_of(st.sampled_from(",= \\\n"), st.characters()), min_size=1, max_size=20).filter(
        lambda m: not m.startswith("#")
    ),
)
def test_any_reading_is_written_as_point_writes_it(reading: dict[str, Any], measurement: str) -> None:
    assert influx_line(reading, measurement=measurement, entity_tag="host") == _point(reading, measurement, "host")


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_a_number_line_protocol_cannot_hold_is_refused_naming_the_measure(value: float) -> None:
    with pytest.raises(InvalidInput) as caught:
        influx_line({**READING, "measures": {"temp": value}}, measurement="m", entity_tag="host")
    assert caught.value.field == "measures.temp"


# -- Telegraf's JSON serializer -----------------------------------------------------------------


def test_a_telegraf_metric_has_the_serializers_fields_and_its_timestamp_units() -> None:
    metric = telegraf_json(READING, measurement="env", entity_tag="host")
    assert metric == {
        "fields": {"temp": 21.5, "count": 3, "whole": 20.0},
        "name": "env",
        "tags": {"site": "plant 7", "line": "a,b=c", "host": "sensor-000001"},
        "timestamp": TS_MS // 1000,  # seconds, cut down as Telegraf cuts them
    }
    assert telegraf_json(READING, measurement="env", entity_tag="host", unit="1ms")["timestamp"] == TS_MS
    assert telegraf_json(READING, measurement="env", entity_tag="host", unit="10us")["timestamp"] == TS_MS * 100
    record = AgentPacker("telegraf_json", measurement="env").add(READING)[0]
    assert list(json.loads(record.data)) == ["fields", "name", "tags", "timestamp"]  # Go's map order: sorted
    assert record.partition_key == "sensor-000001"


# -- OTLP: what opentelemetry-proto's messages read ---------------------------------------------


def test_an_otlp_request_is_an_export_metrics_service_request_with_a_gauge_per_measure() -> None:
    request = otlp_request(READING, entity_attribute="service.instance.id")
    message = json_format.ParseDict(request, ExportMetricsServiceRequest())
    (resource_metrics,) = message.resource_metrics
    assert [(a.key, a.value.string_value) for a in resource_metrics.resource.attributes] == [
        ("service.instance.id", "sensor-000001")
    ]
    (scope,) = resource_metrics.scope_metrics
    values = {}
    for metric in scope.metrics:
        (point,) = metric.gauge.data_points
        assert point.time_unix_nano == TS_MS * 10**6
        assert {a.key: a.value.string_value for a in point.attributes} == READING["dimensions"]
        values[metric.name] = point.as_int if point.WhichOneof("value") == "as_int" else point.as_double
    assert values == READING["measures"]
    assert isinstance(values["count"], int)
    # the protobuf is the same request
    assert ExportMetricsServiceRequest.FromString(otlp_proto(request)) == message


@settings(max_examples=100, deadline=None)
@given(reading=readings)
def test_any_reading_round_trips_through_opentelemetry_protos_messages(reading: dict[str, Any]) -> None:
    request = otlp_request(reading, entity_attribute="host.name")
    message = ExportMetricsServiceRequest.FromString(otlp_proto(request))
    assert json_format.MessageToDict(message) == json.loads(json.dumps(request))


@pytest.mark.parametrize(("how", "wbits"), [("gzip", 31), ("zlib", 15), ("flate", -15)])
def test_records_are_compressed_whole_as_the_collector_compresses_them_flushed_never_closed(
    how: str, wbits: int
) -> None:
    packer = AgentPacker("otlp_proto", compression=how)
    (record,) = packer.add(READING)
    inflater = zlib.decompressobj(wbits)
    message = ExportMetricsServiceRequest.FromString(inflater.decompress(record.data))
    assert message.resource_metrics[0].resource.attributes[0].value.string_value == "sensor-000001"
    # flushed, not closed: the stream ends on an empty stored block, with no final block and no trailer
    assert record.data.endswith(b"\x00\x00\xff\xff") and not inflater.eof
    assert compress(b"x", "none") == b"x"


def test_the_collectors_partition_key_is_a_fresh_random_uuid_per_record() -> None:
    packer = AgentPacker("otlp_json")
    keys = [packer.add(READING)[0].partition_key for _ in range(50)]
    assert len(set(keys)) == 50
    assert all(uuid.UUID(key).version == 4 for key in keys)
    with pytest.raises(ValueError, match="random, not entity"):
        AgentPacker("otlp_json", partition_key="entity")


def test_without_opentelemetry_proto_the_proto_format_is_refused_naming_the_package(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(sys.modules, "opentelemetry.proto.collector.metrics.v1.metrics_service_pb2", None)
    with pytest.raises(FormatUnavailable, match="pip install opentelemetry-proto"):
        AgentPacker("otlp_proto")
    AgentPacker("otlp_json")  # the JSON encoding needs no package


# -- IoT Core: what the topic rule puts into the stream -----------------------------------------


def test_the_iot_record_is_the_devices_payload_with_the_entity_from_its_topic() -> None:
    rule = IotTopicRule("fleet/+/+/readings", 3)
    topic, output = iot_rule_output(READING, rule)
    assert topic == "fleet/data/sensor-000001/readings"
    assert output == READING  # SELECT *, topic(3) AS entity_id: our own reading again
    (record,) = AgentPacker("iot", iot_rule=rule).add(READING)
    assert json.loads(record.data) == READING
    assert record.partition_key == "sensor-000001"  # ${topic(3)}


# -- the packer ------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", AGENT_FORMATS)
def test_every_agent_format_writes_one_reading_a_record_and_holds_nothing_back(fmt: str) -> None:
    packer = AgentPacker(fmt, iot_rule=IotTopicRule("s/+", 2))
    records = [r for i in range(5) for r in packer.add({**READING, "timestamp": TS_MS + i})]
    assert len(records) == 5
    assert all(r.readings == 1 for r in records)
    assert packer.flush() == []


@pytest.mark.parametrize(
    ("kwargs", "says"),
    [
        ({"format": "json"}, "not one of"),
        ({"format": "influx", "partition_key": "group"}, "entity or random"),
        ({"format": "influx", "compression": "gzip"}, "only the OpenTelemetry Collector"),
        ({"format": "telegraf_json", "telegraf_json_unit": "2s"}, "not one of"),
        ({"format": "iot"}, "topic rule"),
        ({"format": "influx", "measurement": "#env"}, "comment"),
        ({"format": "telegraf_json", "measurement": ""}, "comment"),
    ],
)
def test_options_the_agent_does_not_have_are_refused(kwargs: dict[str, Any], says: str) -> None:
    with pytest.raises(ValueError, match=says):
        AgentPacker(**kwargs)


def test_a_reading_the_format_cannot_hold_is_invalid_input_and_an_oversize_one_too_large() -> None:
    packer = AgentPacker("influx")
    with pytest.raises(InvalidInput) as caught:
        packer.add({**READING, "measures": {"temp": "warm"}})
    assert caught.value.field == "measures.temp"
    with pytest.raises(InvalidInput) as caught:
        packer.add({"entity_id": "e", "measures": {"t": 1}})
    assert caught.value.field == "timestamp"
    with pytest.raises(ReadingTooLarge):
        packer.add({**READING, "dimensions": {"pad": "x" * 1_100_000}})
