"""Records as the agents write them, made by the agents' own libraries, not by strings written here.

* line protocol: ``influxdb-client``'s ``Point`` (the serializer of InfluxDB's own Python client; Telegraf's
  ``influx`` serializer writes the same protocol, nanosecond timestamps);
* OTLP: ``opentelemetry-sdk`` metrics read by an ``InMemoryMetricReader`` and encoded by
  ``opentelemetry-exporter-otlp-proto-common``'s ``encode_metrics`` into ``opentelemetry-proto``'s
  ``ExportMetricsServiceRequest`` (the message the Collector's ``awskinesisexporter`` writes a record of),
  serialized as protobuf or with protobuf's JSON printer (OTLP/JSON), and compressed as the exporter
  compresses (``flate`` raw deflate, ``gzip``, ``zlib``, each flushed and never closed);
* Telegraf JSON: the documented serializer format (``{"fields":..., "name":..., "tags":..., "timestamp":...}``,
  and ``{"metrics": [...]}`` with the batch format).
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections.abc import Callable, Mapping
from typing import Any

from google.protobuf.json_format import MessageToJson
from influxdb_client import Point, WritePrecision
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.metrics import Meter
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation, View
from opentelemetry.sdk.resources import Resource

__all__ = ["Point", "WritePrecision", "compress", "line_protocol", "otlp_request", "telegraf_json"]


def line_protocol(*points: Point) -> bytes:
    """One Telegraf record's worth of lines: each point as ``Point.to_line_protocol`` writes it."""
    return "\n".join(p.to_line_protocol() for p in points).encode("utf-8")


def telegraf_json(
    name: str, fields: Mapping[str, object], tags: Mapping[str, str], timestamp: int | float
) -> dict[str, Any]:
    """One metric as Telegraf's json serializer writes it (keys in its order)."""
    return {"fields": dict(fields), "name": name, "tags": dict(tags), "timestamp": timestamp}


def otlp_request(
    record: Callable[[Meter], None],
    resource: Mapping[str, str | int | float | bool],
    *,
    exponential: tuple[str, ...] = (),
) -> ExportMetricsServiceRequest:
    """What the SDK exports after ``record`` used a meter of a provider with ``resource``'s attributes
    (exactly these: no SDK defaults), histograms named in ``exponential`` aggregated as exponential ones."""
    reader = InMemoryMetricReader()
    views = [View(instrument_name=name, aggregation=ExponentialBucketHistogramAggregation()) for name in exponential]
    provider = MeterProvider(metric_readers=[reader], resource=Resource(dict(resource)), views=views)
    try:
        record(provider.get_meter("agents-test", "1.0"))
        data = reader.get_metrics_data()
    finally:
        provider.shutdown()
    assert data is not None
    return encode_metrics(data)


def otlp_json(request: ExportMetricsServiceRequest) -> bytes:
    """OTLP/JSON of ``request`` (protobuf's JSON printer: lowerCamelCase, 64-bit integers as text)."""
    return MessageToJson(request, indent=None).encode("utf-8")


#: zlib's window bits for each of the exporter's compressions.
_WBITS = {"gzip": 31, "zlib": 15, "flate": -15}


def compress(data: bytes, compression: str, *, closed: bool = False) -> bytes:
    """``data`` compressed whole, as the exporter's ``compression`` setting does: at its best speed, and
    *flushed*, not closed (its Go compressor's ``Flush``, zlib's ``Z_SYNC_FLUSH``: no final block, no gzip
    or zlib trailer; internal/compress/compresser.go). ``closed``: a complete stream, as other producers write."""
    if compression == "none":
        return data
    if closed and compression == "gzip":
        return gzip.compress(data)
    deflate = zlib.compressobj(1, zlib.DEFLATED, _WBITS[compression])
    return deflate.compress(data) + deflate.flush(zlib.Z_FINISH if closed else zlib.Z_SYNC_FLUSH)


def as_json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode("utf-8")
