"""Readings written as the agents write their metrics, so ``tsctl publish`` can try each format without the agent.

Each agent writes one Kinesis record per metric, never several readings packed into one:

``influx``
    Telegraf's ``outputs.kinesis`` with ``data_format = "influx"``: one line of Influx
    line protocol, ``<measurement>,<entity tag>=<entity>,<dimension>=<value>...
    <measure>=<value>... <nanoseconds>``, escaped as InfluxDB's clients escape it
    (``influxdb-client``'s ``Point``: ``,``, ``=`` and space in keys and tag values,
    ``,`` and space in the measurement, ``\\n`` ``\\r`` ``\\t`` in all three), tags and
    fields in key order, a whole float without ``.0``, an integer measure an ``i`` integer.
``telegraf_json``
    Telegraf's ``json`` serializer: ``{"fields":{...},"name":...,"tags":{...},
    "timestamp":N}``, keys sorted as Go writes a map, the timestamp in
    ``json_timestamp_units`` (seconds by default, cut down as Telegraf cuts it).
``otlp_json`` / ``otlp_proto``
    The OpenTelemetry Collector's ``awskinesisexporter``: an OTLP
    ``ExportMetricsServiceRequest`` holding one ResourceMetrics (the entity as a
    resource attribute), one gauge per measure whose data point carries the
    dimensions as attributes; JSON as OTLP/JSON writes it (64-bit integers as
    decimal text), protobuf through ``opentelemetry-proto``'s own messages, which
    only an environment with that package has (:class:`FormatUnavailable` says
    so). Optionally compressed whole: ``gzip``, ``zlib`` or ``flate`` (raw deflate), flushed and never
    closed, as the exporter writes them.
``iot``
    What an AWS IoT Core topic rule of ``iot_topic_rule`` puts into the stream for a
    device publishing the reading without ``entity_id`` on its topic: the payload's
    fields plus ``entity_id`` from the topic level (``SELECT *, topic(n) AS entity_id``).

The partition key is the agent's: Telegraf's ``tag`` method on the entity tag (or
``random``), the Collector's random UUID, the rule's ``${topic(n)}``.
"""

from __future__ import annotations

import importlib
import json
import math
import uuid
import zlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ingest.formats import NS_PER_MS, TELEGRAF_JSON_UNITS, storable
from keydesign import InvalidInput, parse_timestamp

from .packing import KINESIS_MAX_RECORD_BYTES, PackedRecord, ReadingTooLarge

if TYPE_CHECKING:
    from infra.config import IotTopicRule

JSON = "json"
INFLUX = "influx"
TELEGRAF_JSON = "telegraf_json"
OTLP_JSON = "otlp_json"
OTLP_PROTO = "otlp_proto"
IOT = "iot"
#: Every format ``tsctl publish --record-format`` writes: ours first, then the agents'.
FORMATS = (JSON, INFLUX, TELEGRAF_JSON, OTLP_PROTO, OTLP_JSON, IOT)
AGENT_FORMATS = FORMATS[1:]
#: How the Collector's exporter may compress a record (``encoding.compression``), and zlib's window bits for each.
COMPRESSIONS = ("none", "gzip", "zlib", "flate")
_WBITS = {"gzip": 31, "zlib": 15, "flate": -15}
#: The tag (attribute) each agent format names the entity with by default; ingest's ``entity_tags``
#: default takes both.
DEFAULT_ENTITY_TAG = {
    INFLUX: "host",
    TELEGRAF_JSON: "host",
    OTLP_JSON: "service.instance.id",
    OTLP_PROTO: "service.instance.id",
}
#: The partition-key methods each agent format can use, its default first.
PARTITION_METHODS = {
    INFLUX: ("entity", "random"),
    TELEGRAF_JSON: ("entity", "random"),
    OTLP_JSON: ("random",),
    OTLP_PROTO: ("random",),
    IOT: ("entity",),
}

_MEASUREMENT_ESCAPES = str.maketrans({",": r"\,", " ": r"\ ", "\n": r"\n", "\t": r"\t", "\r": r"\r"})
_KEY_ESCAPES = str.maketrans({",": r"\,", "=": r"\=", " ": r"\ ", "\n": r"\n", "\t": r"\t", "\r": r"\r"})


class FormatUnavailable(RuntimeError):  # noqa: N818 - reads as the condition
    """A format this environment cannot write (a package it needs is not installed)."""


# -- one reading, the way each agent writes it -----------------------------------------------


def influx_line(reading: Mapping[str, Any], *, measurement: str, entity_tag: str) -> str:
    """The reading as one line of line protocol (nanosecond timestamp), as Telegraf's ``influx`` serializer
    writes a metric. Raises :class:`InvalidInput` for what line protocol cannot hold."""
    ts_ms = _ts_ms(reading)
    tags = {**_dimensions(reading)}
    if "entity_id" in reading:
        tags[entity_tag] = str(reading["entity_id"])
    # An empty key or value is no tag at all in line protocol.
    tag_text = "".join(f",{_key(k)}={_tag_value(v)}" for k, v in sorted(tags.items()) if k and v)
    measures = _measures(reading)
    fields = ",".join(f"{_key(name)}={_field_value(name, measures[name])}" for name in sorted(measures))
    return f"{measurement.translate(_MEASUREMENT_ESCAPES)}{tag_text} {fields} {ts_ms * NS_PER_MS}"


def telegraf_json(reading: Mapping[str, Any], *, measurement: str, entity_tag: str, unit: str = "1s") -> dict[str, Any]:
    """The reading as Telegraf's ``json`` serializer writes a metric (``json_timestamp_units`` ``unit``)."""
    tags = {**_dimensions(reading)}
    if "entity_id" in reading:
        tags[entity_tag] = str(reading["entity_id"])
    return {
        "fields": dict(_measures(reading)),
        "name": measurement,
        "tags": tags,
        "timestamp": _ts_ms(reading) * NS_PER_MS // TELEGRAF_JSON_UNITS[unit],
    }


def otlp_request(reading: Mapping[str, Any], *, entity_attribute: str) -> dict[str, Any]:
    """The reading as an OTLP/JSON ``ExportMetricsServiceRequest``: one gauge per measure."""
    time_ns = str(_ts_ms(reading) * NS_PER_MS)
    point_attributes = [_attribute(k, v) for k, v in _dimensions(reading).items()]
    metrics = []
    for name, value in _measures(reading).items():
        number = {"asInt": str(value)} if isinstance(value, int) else {"asDouble": value}
        point = {"timeUnixNano": time_ns, **number, **({"attributes": point_attributes} if point_attributes else {})}
        metrics.append({"name": name, "gauge": {"dataPoints": [point]}})
    resource = {"attributes": [_attribute(entity_attribute, reading["entity_id"])]} if "entity_id" in reading else {}
    return {
        "resourceMetrics": [{"resource": resource, "scopeMetrics": [{"scope": {"name": "tsctl"}, "metrics": metrics}]}]
    }


def otlp_proto(request: Mapping[str, Any]) -> bytes:
    """An OTLP/JSON request as the protobuf bytes ``opentelemetry-proto``'s message serializes it to."""
    try:  # imported only by this format, which only an environment with the package can write
        json_format = importlib.import_module("google.protobuf.json_format")
        service = importlib.import_module("opentelemetry.proto.collector.metrics.v1.metrics_service_pb2")
    except ImportError as exc:
        raise FormatUnavailable(
            f"otlp_proto needs the opentelemetry-proto package ({exc.name} is not installed): "
            "pip install opentelemetry-proto, or use --record-format otlp_json"
        ) from None
    message = service.ExportMetricsServiceRequest()
    json_format.ParseDict(request, message)
    return bytes(message.SerializeToString())


def iot_rule_output(reading: Mapping[str, Any], rule: IotTopicRule) -> tuple[str, dict[str, Any]]:
    """The topic a device publishes the reading on, and what the rule puts into the stream for it: the
    device's payload (the reading without ``entity_id``) with ``entity_id`` from the topic's level."""
    topic = rule.topic_for(str(reading.get("entity_id", "")))
    payload = {k: v for k, v in reading.items() if k != "entity_id"}
    return topic, {**payload, "entity_id": rule.entity_of(topic)}


def compress(data: bytes, how: str) -> bytes:
    """``data`` compressed whole as the Collector's exporter compresses a record: at its best speed, and flushed,
    never closed (its Go compressor's ``Flush``, zlib's ``Z_SYNC_FLUSH``: no final block, no gzip or zlib
    trailer), so the record ends on the empty stored block ``00 00 FF FF``."""
    if how == "none":
        return data
    if how not in _WBITS:
        raise ValueError(f"compression {how!r} is not one of {', '.join(COMPRESSIONS)}")
    deflate = zlib.compressobj(1, zlib.DEFLATED, _WBITS[how])
    return deflate.compress(data) + deflate.flush(zlib.Z_SYNC_FLUSH)


# -- records ---------------------------------------------------------------------------------


@dataclass(slots=True)
class AgentPacker:
    """Writes each reading as one record of an agent's format, with the agent's partition key: what
    :func:`producer.publisher.publish` takes in place of the JSON :class:`~producer.packing.Packer`."""

    format: str
    measurement: str = "reading"
    entity_tag: str | None = None
    partition_key: str | None = None
    telegraf_json_unit: str = "1s"
    compression: str = "none"
    iot_rule: IotTopicRule | None = None
    new_key: Callable[[], str] = field(default=lambda: str(uuid.uuid4()))

    def __post_init__(self) -> None:
        if self.format not in AGENT_FORMATS:
            raise ValueError(f"format {self.format!r} is not one of {', '.join(AGENT_FORMATS)}")
        methods = PARTITION_METHODS[self.format]
        self.partition_key = self.partition_key or methods[0]
        if self.partition_key not in methods:
            raise ValueError(
                f"the {self.format} agent's partition key is {' or '.join(methods)}, not {self.partition_key}"
            )
        if self.compression != "none" and self.format not in (OTLP_JSON, OTLP_PROTO):
            raise ValueError(f"only the OpenTelemetry Collector compresses records, not {self.format}")
        if self.telegraf_json_unit not in TELEGRAF_JSON_UNITS:
            raise ValueError(f"{self.telegraf_json_unit!r} is not one of {', '.join(TELEGRAF_JSON_UNITS)}")
        if not self.measurement or self.measurement.startswith("#"):
            raise ValueError(f"measurement {self.measurement!r} must name it (line protocol reads '#...' as a comment)")
        if self.format == IOT and self.iot_rule is None:
            raise ValueError("the iot format needs the topic rule (topic filter and entity level)")
        self.entity_tag = self.entity_tag or DEFAULT_ENTITY_TAG.get(self.format)
        if self.format == OTLP_PROTO:
            otlp_proto({})  # fails now, naming the package, rather than at the first reading

    def add(self, reading: dict[str, Any]) -> list[PackedRecord]:
        """The reading's record. Raises :class:`InvalidInput` when the format cannot hold it."""
        entity = str(reading.get("entity_id", "")) or "-"
        if self.format == INFLUX:
            data = influx_line(reading, measurement=self.measurement, entity_tag=str(self.entity_tag)).encode()
        elif self.format == TELEGRAF_JSON:
            metric = telegraf_json(
                reading, measurement=self.measurement, entity_tag=str(self.entity_tag), unit=self.telegraf_json_unit
            )
            data = _json(metric, sort_keys=True)
        elif self.format == IOT and self.iot_rule is not None:
            _, output = iot_rule_output(reading, self.iot_rule)
            entity = str(output["entity_id"]) or "-"
            data = _json(output)
        else:
            request = otlp_request(reading, entity_attribute=str(self.entity_tag))
            data = compress(_json(request) if self.format == OTLP_JSON else otlp_proto(request), self.compression)
        key = self.new_key() if self.partition_key == "random" else entity
        if len(data) + len(key.encode()) > KINESIS_MAX_RECORD_BYTES:
            raise ReadingTooLarge(f"a reading of {len(data):,} bytes as {self.format} does not fit in a Kinesis record")
        return [PackedRecord(key, data, 1)]

    def flush(self) -> list[PackedRecord]:
        """Nothing is held back: every record is closed as it is written."""
        return []

    def stored(self, reading: Mapping[str, Any]) -> list[dict[str, Any]]:
        """What ingest stores for ``reading`` written so (with its default ``entity_tags``, Telegraf JSON
        timestamps in this writer's unit), without event ids (an agent sends none: ingest derives them):
        Telegraf's measures are named ``<measurement>_<field>``; the Collector's gauges are one reading each;
        the IoT rule's output is the reading itself. A timestamp is cut to what the format carries."""
        ts_ms = _ts_ms(reading)
        base = {"entity_id": reading["entity_id"], "dimensions": dict(_dimensions(reading))}
        measures = _measures(reading)
        if self.format in (INFLUX, TELEGRAF_JSON):
            unit_ms = max(1, TELEGRAF_JSON_UNITS[self.telegraf_json_unit] // NS_PER_MS) if self.format != INFLUX else 1
            named = {storable(f"{self.measurement}_{name}"): value for name, value in measures.items()}
            return [{**base, "timestamp": ts_ms // unit_ms * unit_ms, "measures": named}]
        if self.format in (OTLP_JSON, OTLP_PROTO):
            return [{**base, "timestamp": ts_ms, "measures": {name: value}} for name, value in measures.items()]
        return [{**base, "timestamp": ts_ms, "measures": dict(measures)}]


# -- helpers ---------------------------------------------------------------------------------


def _ts_ms(reading: Mapping[str, Any]) -> int:
    if "timestamp" not in reading:
        raise InvalidInput("timestamp", "is required")
    return parse_timestamp(reading["timestamp"])


def _measures(reading: Mapping[str, Any]) -> Mapping[str, int | float]:
    measures = reading.get("measures")
    if not isinstance(measures, Mapping) or not measures:
        raise InvalidInput("measures", "is required: an object of at least one numeric measure")
    for name, value in measures.items():
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise InvalidInput(f"measures.{name}", f"must be a number, got {type(value).__name__}")
    return measures


def _dimensions(reading: Mapping[str, Any]) -> Mapping[str, str]:
    dimensions = reading.get("dimensions") or {}
    if not isinstance(dimensions, Mapping) or not all(isinstance(v, str) for v in dimensions.values()):
        raise InvalidInput("dimensions", "must be an object of name to string")
    return dimensions


def _key(text: str) -> str:
    return str(text).translate(_KEY_ESCAPES)


def _tag_value(text: str) -> str:
    # A value ending in a backslash would escape the space after it: a space is added, as influxdb-client's
    # Point adds it.
    escaped = _key(text)
    return f"{escaped} " if escaped.endswith("\\") else escaped


def _field_value(name: str, value: int | float) -> str:
    if isinstance(value, int):
        return f"{value}i"
    if not math.isfinite(value):
        raise InvalidInput(f"measures.{name}", f"line protocol has no {value}")
    text = str(value)
    return text.removesuffix(".0")  # a whole float is written without ".0", as other writers write it


def _attribute(key: str, value: object) -> dict[str, Any]:
    return {"key": key, "value": {"stringValue": str(value)}}


def _json(value: object, *, sort_keys: bool = False) -> bytes:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, sort_keys=sort_keys).encode("utf-8")
