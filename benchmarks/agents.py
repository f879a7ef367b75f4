"""The agents' formats in ingest (issue 39): CPU per reading of each, beside ingest's own JSON, through the
real Ingestor as the default stack configures it; and what importing each format's decoder costs the first
record of that format (they are imported lazily, so a cold start that meets none of them pays nothing).

The records are written as each agent writes them: Telegraf, one metric a record (line protocol by
``influxdb-client``'s ``Point``, or Telegraf's JSON); the Collector's exporter, one
``ExportMetricsServiceRequest`` a record (one resource: an entity's data points of the batch), built with
``opentelemetry-proto``'s messages, as protobuf, gzip-compressed protobuf (flushed, as the exporter
compresses) and OTLP/JSON."""

from __future__ import annotations

import json
import subprocess
import sys
import tracemalloc
import zlib
from collections import defaultdict
from typing import Any

from google.protobuf.json_format import MessageToJson  # type: ignore[import-untyped]
from influxdb_client.client.write.point import Point
from influxdb_client.domain.write_precision import WritePrecision
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from adapters.observability import metrics
from benchmarks.cold_start import FUNCTIONS
from benchmarks.harness import Result, benchmark
from benchmarks.ingest import _best, event_records, lambda_records, null_ingestors, readings, stack_env
from ingest.kinesis_records import parse_records
from ingest.logic import Ingestor
from ingest.settings import IngestSettings

NS = 1_000_000


def _line_protocol(items: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    out = []
    for item in items:
        point = Point("sensor").tag("host", item["entity_id"])  # type: ignore[no-untyped-call]
        for name, value in item["measures"].items():
            point = point.field(name, value)
        line = point.time(item["timestamp"] * NS, WritePrecision.NS).to_line_protocol()
        out.append((item["entity_id"], line.encode()))
    return out


def _telegraf_json(items: list[dict[str, Any]]) -> list[tuple[str, bytes]]:
    # json_timestamp_units = "1ms" (the readings are a few ms apart; seconds would merge them)
    out = []
    for i in items:
        tags = {"host": i["entity_id"]}
        metric = {"fields": i["measures"], "name": "sensor", "tags": tags, "timestamp": i["timestamp"]}
        out.append((i["entity_id"], json.dumps(metric, separators=(",", ":")).encode()))
    return out


def _otlp(items: list[dict[str, Any]]) -> list[tuple[str, ExportMetricsServiceRequest]]:
    """One request per entity (its resource), a gauge per measure, a data point per reading."""
    by_entity: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for item in items:
        by_entity[item["entity_id"]].append(item)
    out = []
    for entity, group in by_entity.items():
        request = ExportMetricsServiceRequest()
        resource_metrics = request.resource_metrics.add()
        resource_metrics.resource.attributes.append(
            KeyValue(key="service.instance.id", value=AnyValue(string_value=entity))
        )
        scope = resource_metrics.scope_metrics.add()
        scope.scope.name = "sensors"
        for name in group[0]["measures"]:
            gauge = scope.metrics.add(name=f"sensor.{name}").gauge
            for item in group:
                gauge.data_points.add(time_unix_nano=item["timestamp"] * NS, as_double=item["measures"][name])
        out.append((entity, request))
    return out


def _flushed_gzip(data: bytes) -> bytes:
    deflate = zlib.compressobj(1, zlib.DEFLATED, 31)
    return deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)


@benchmark("ingest-agents", "ingest CPU per reading of each agent format beside its own JSON; lazy imports' cost")
def ingest_agents(quick: bool) -> Result:
    count = 2_000 if quick else 10_000
    repeats = 2 if quick else 5
    items = readings(count)
    requests = _otlp(items)
    shapes: dict[str, list[dict[str, Any]]] = {
        "json, packed by the producer": lambda_records(items, packed=True),
        "json, one reading a record": lambda_records(items, packed=False),
        "influx line protocol, one metric a record (Telegraf)": event_records(_line_protocol(items)),
        "Telegraf JSON, one metric a record": event_records(_telegraf_json(items)),
        "OTLP protobuf, one resource a record (Collector)": event_records(
            [(e, r.SerializeToString()) for e, r in requests]
        ),
        "OTLP protobuf, gzip (flushed)": event_records(
            [(e, _flushed_gzip(r.SerializeToString())) for e, r in requests]
        ),
        "OTLP JSON": event_records([(e, MessageToJson(r, indent=None).encode()) for e, r in requests]),
    }
    env = {**stack_env(), "TELEGRAF_JSON_TIMESTAMP_UNITS": "1ms"}
    settings = IngestSettings.from_env(env)
    events = {label: {"Records": records} for label, records in shapes.items()}
    best: dict[str, float] = {}
    stored: dict[str, int] = {}
    with null_ingestors(settings, shapes) as (ingestors, _):
        for label, event in events.items():  # one unclocked cold run each (occupancy, marks)
            ingestors[label].ingest(parse_records(event), 900_000)
        for _ in range(repeats):  # the shapes alternate: each sees the same load
            for label, event in events.items():
                cpu, _, outcome = _best(1, lambda i=ingestors[label], e=event: i.ingest(parse_records(e), 900_000))
                assert outcome.rejected == 0 and not outcome.failed_records, (label, outcome.reject_fields)
                stored[label] = outcome.readings_stored
                best[label] = min(best.get(label, cpu), cpu)
            metrics.clear_metrics()
        peaks = {label: _peak_bytes(ingestors[label], events[label]) for label in _MEMORY_SHAPES}
    result = Result()
    baseline = best["json, one reading a record"] / stored["json, one reading a record"]
    for label, cpu in best.items():
        per = cpu / stored[label]
        records = len(shapes[label])
        result.add(
            f"CPU per reading: {label}",
            round(per * 1e6, 1),
            "µs",
            f"{stored[label]:,} readings in {records:,} records; {per / baseline:.2f}x JSON one reading a record",
        )
    for label, peak in peaks.items():
        wire = sum(len(r.data) for r in parse_records(events[label]))
        result.add(
            f"peak memory per reading: {label}",
            round(peak / stored[label]),
            "bytes",
            f"tracemalloc peak of one warm batch; its records hold {wire / stored[label]:.0f} bytes a reading",
        )
    for module, seconds in _lazy_imports(3 if quick else 9).items():
        when = "every cold start" if module == "ingest.formats" else "the first record of its format"
        result.add(f"import of {module}", round(seconds * 1000, 2), "ms", f"CPU, paid by {when}; best of runs")
    result.params = {"readings": count, "repeats": repeats, "entity_tags": settings.entity_tags}
    result.method = (
        "the readings of ingest-cpu (10,000 generated readings of 1,000 entities over 10 s, two measures each) "
        "written as each agent writes records: Telegraf one metric a record (influxdb-client's Point for line "
        "protocol, its JSON serializer's shape with json_timestamp_units 1ms), the Collector one "
        "ExportMetricsServiceRequest per resource (an entity's data points, a gauge per measure: two readings per "
        "generated reading), protobuf, gzip flushed as its exporter compresses, or OTLP/JSON; each through its "
        "own real Ingestor as the default stack configures it (DynamoDB and SQS fakes that accept everything), one "
        "unclocked cold run each, then the shapes alternating, best of N by CPU time; CPU per stored reading. "
        "Imports: a fresh interpreter imports what is loaded before the module (ingest.decoding for a format's "
        "reader, which a cold start has loaded; the shared stdlib and keydesign modules for ingest.formats, which "
        "every cold start loads), then the module, timed with time.process_time, best of N. Peak memory: "
        "tracemalloc's peak over one more warm batch of the shape, per stored reading"
    )
    return result


#: The shapes whose peak memory is measured: ingest's densest JSON, and the Collector's protobuf, which packs a
#: reading in a fifth of the bytes (so a batch of the same size holds five times the readings).
_MEMORY_SHAPES = ("json, packed by the producer", "OTLP protobuf, one resource a record (Collector)")


def _peak_bytes(ingestor: Ingestor, event: dict[str, Any]) -> int:
    records = parse_records(event)
    tracemalloc.start()
    try:
        ingestor.ingest(records, 900_000)
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
        metrics.clear_metrics()


_IMPORT = """
import sys, time
sys.path[:0] = [{functions!r}]
import {before}
started = time.process_time()
import {module}
print(time.process_time() - started)
"""
#: Each module timed, and what is loaded before it: ``ingest.formats`` is what every cold start imports for the
#: agents (after what it shares with the rest of ingest); the three format readers are imported on first use.
_TIMED = {
    "ingest.formats": "json, re, zlib, dataclasses, functools, ingest.kinesis_records, keydesign.model",
    "ingest.formats.lineprotocol": "ingest.decoding",
    "ingest.formats.telegraf": "ingest.decoding",
    "ingest.formats.otlp": "ingest.decoding",
}


def _lazy_imports(runs: int) -> dict[str, float]:
    """CPU seconds of importing each module of :data:`_TIMED` in a fresh interpreter (best of ``runs``)."""
    out: dict[str, float] = {}
    for module, before in _TIMED.items():
        code = _IMPORT.format(functions=str(FUNCTIONS), module=module, before=before)
        times = [
            float(subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout)  # noqa: S603
            for _ in range(runs)
        ]
        out[module] = min(times)
    return out
