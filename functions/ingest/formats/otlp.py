"""OTLP metrics: an ``ExportMetricsServiceRequest``, protobuf or JSON, as the Collector's
``awskinesisexporter`` writes one per record (``encoding.name`` ``otlp_proto`` or ``otlp_json``).

The protobuf is read by :func:`read_proto` (on ``ingest.protowire``) into the shape
the JSON encoding has (OTLP/JSON: lowerCamelCase names, 64-bit integers as decimal
text or numbers), so one mapping, :func:`decode`, serves both.

Every data point becomes one reading (docs/ingest.md, "OpenTelemetry Collector"):

* the attributes are the resource's, the scope's and the data point's, merged in that
  order (a later one of the same key wins); the entity is the first of
  ``entity_tags`` among them, the others are dimensions (names made storable:
  ``service.name`` -> ``service_name``; values as text: ``true``, ``42``, ``1.5``,
  arrays and maps as compact JSON, bytes as base64);
* a gauge's or a sum's point: one measure named after the metric
  (``system.cpu.time`` -> ``system_cpu_time``), its value as sent (a cumulative sum
  is its running total);
* a histogram's or an exponential histogram's point: ``<name>_count``, and
  ``<name>_sum``, ``<name>_min``, ``<name>_max`` when the point has them; the bucket
  counts are not stored;
* a summary's point: ``<name>_count``, ``<name>_sum`` and one measure per quantile,
  ``<name>_p<quantile x 100>`` (``_p50``, ``_p99``, ``_p99_9``);
* the time is ``timeUnixNano`` cut to the millisecond (floor).

A point without a time or a value, or flagged as holding no recorded value, is a
reject naming it (``resourceMetrics[0].scopeMetrics[0].metrics[2] (name) data point
1``), as is a metric with no data; bytes that are not a well-formed request are one
reject for the record.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from typing import Any

from ingest.formats import NS_PER_MS, Formats, Part, reading, storable
from ingest.protowire import (
    ProtobufError,
    double,
    fields,
    fixed64,
    int64,
    message,
    sfixed64,
    text,
    varint,
)

#: How deep arrays and maps may nest in an attribute's value.
MAX_VALUE_DEPTH = 16
_NO_RECORDED_VALUE = 1
_KINDS = ("gauge", "sum", "histogram", "exponentialHistogram", "summary")
_INTEGER_TEXT = re.compile(r"-?[0-9]{1,20}\Z")
_DOUBLE_TEXT = {"NaN": math.nan, "Infinity": math.inf, "-Infinity": -math.inf}


# -- the protobuf, read into the JSON encoding's shape ----------------------------------------


def read_proto(data: bytes) -> dict[str, Any]:
    """An ``ExportMetricsServiceRequest`` as OTLP/JSON would write it. Raises ``ProtobufError`` saying where
    the bytes are not one (unknown fields are skipped, as protobuf's own parsers skip them)."""
    out: list[dict[str, Any]] = []
    for number, _, value in fields(data):
        if number == 1:
            path = f"resource_metrics[{len(out)}]"
            out.append(_resource_metrics(message(value, path), path))
    return {"resourceMetrics": out}


def _resource_metrics(buf: bytes, path: str) -> dict[str, Any]:
    resource: dict[str, Any] = {}
    scopes: list[dict[str, Any]] = []
    for number, _, value in fields(buf):
        if number == 1:
            attributes = [
                _key_value(message(v, f"{path}.resource.attributes"), f"{path}.resource.attributes", 0)
                for n, _, v in fields(message(value, f"{path}.resource"))
                if n == 1
            ]
            resource = {"attributes": attributes}
        elif number == 2:
            where = f"{path}.scope_metrics[{len(scopes)}]"
            scopes.append(_scope_metrics(message(value, where), where))
    return {"resource": resource, "scopeMetrics": scopes}


def _scope_metrics(buf: bytes, path: str) -> dict[str, Any]:
    scope: dict[str, Any] = {}
    metrics: list[dict[str, Any]] = []
    for number, _, value in fields(buf):
        if number == 1:
            attributes = []
            for n, _, v in fields(message(value, f"{path}.scope")):
                if n == 1:
                    scope["name"] = text(v, f"{path}.scope.name")
                elif n == 3:
                    attributes.append(_key_value(message(v, f"{path}.scope"), f"{path}.scope.attributes", 0))
            scope["attributes"] = attributes
        elif number == 2:
            where = f"{path}.metrics[{len(metrics)}]"
            metrics.append(_metric(message(value, where), where))
    return {"scope": scope, "metrics": metrics}


#: Metric field number -> the kind of its data points.
_POINT_FIELDS = {5: "gauge", 7: "sum", 9: "histogram", 10: "exponentialHistogram", 11: "summary"}


def _metric(buf: bytes, path: str) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for number, _, value in fields(buf):
        if number == 1:
            out["name"] = text(value, f"{path}.name")
        elif number in _POINT_FIELDS:
            kind = _POINT_FIELDS[number]
            points = [
                _point(message(v, f"{path}.{kind}.data_points"), f"{path}.{kind}.data_points", kind)
                for n, _, v in fields(message(value, f"{path}.{kind}"))
                if n == 1
            ]
            out[kind] = {"dataPoints": points}
    return out


def _common(number: int, value: int | bytes, attributes_field: int, point: dict[str, Any], path: str) -> bool:
    """The fields every data point has; False for the others."""
    if number == attributes_field:
        point.setdefault("attributes", []).append(_key_value(message(value, path), f"{path}.attributes", 0))
    elif number == 3:
        point["timeUnixNano"] = fixed64(value, f"{path}.time_unix_nano")
    elif number == 2:
        point["startTimeUnixNano"] = fixed64(value, f"{path}.start_time_unix_nano")
    elif (number, attributes_field) in ((8, 7), (10, 9), (10, 1)):
        point["flags"] = varint(value, f"{path}.flags")
    else:
        return False
    return True


_Decoder = Callable[[int | bytes, str], Any]
_NUMBER: dict[int, tuple[str, str, _Decoder]] = {4: ("asDouble", "as_double", double), 6: ("asInt", "as_int", sfixed64)}
_COUNT_SUM: dict[int, tuple[str, str, _Decoder]] = {4: ("count", "count", fixed64), 5: ("sum", "sum", double)}
#: Per kind of data point: the field number of its attributes, and its other fields read here:
#: field number -> (name in OTLP/JSON, name in the .proto, reader).
_POINTS: dict[str, tuple[int, dict[int, tuple[str, str, _Decoder]]]] = {
    "gauge": (7, _NUMBER),
    "sum": (7, _NUMBER),
    "histogram": (9, {**_COUNT_SUM, 11: ("min", "min", double), 12: ("max", "max", double)}),
    "exponentialHistogram": (1, {**_COUNT_SUM, 12: ("min", "min", double), 13: ("max", "max", double)}),
    "summary": (7, _COUNT_SUM),
}
_SUMMARY_QUANTILES = 6


def _point(buf: bytes, path: str, kind: str) -> dict[str, Any]:
    attributes_field, values = _POINTS[kind]
    point: dict[str, Any] = {}
    for number, _, value in fields(buf):
        if _common(number, value, attributes_field, point, path):
            continue
        if number in values:
            name, field, read = values[number]
            point[name] = read(value, f"{path}.{field}")
        elif kind == "summary" and number == _SUMMARY_QUANTILES:
            quantile: dict[str, float] = {}
            for n, _, v in fields(message(value, f"{path}.quantile_values")):
                if n in (1, 2):
                    quantile["quantile" if n == 1 else "value"] = double(v, f"{path}.quantile_values")
            point.setdefault("quantileValues", []).append(quantile)
    return point


def _key_value(buf: bytes, path: str, depth: int) -> dict[str, Any]:
    out: dict[str, Any] = {"key": ""}  # proto3 leaves out a default, as OTLP/JSON does
    for number, _, value in fields(buf):
        if number == 1:
            out["key"] = text(value, f"{path}.key")
        elif number == 2:
            out["value"] = _any_value(message(value, f"{path}.value"), path, depth)
    return out


def _any_value(buf: bytes, path: str, depth: int) -> dict[str, Any]:
    if depth > MAX_VALUE_DEPTH:
        raise ProtobufError(f"{path}: values nest deeper than {MAX_VALUE_DEPTH} levels")
    out: dict[str, Any] = {}
    for number, _, value in fields(buf):
        if number == 1:
            out = {"stringValue": text(value, path)}
        elif number == 2:
            out = {"boolValue": bool(varint(value, path))}
        elif number == 3:
            out = {"intValue": int64(value, path)}
        elif number == 4:
            out = {"doubleValue": double(value, path)}
        elif number in (5, 6):
            inner = [v for n, _, v in fields(message(value, path)) if n == 1]
            if number == 5:
                out = {"arrayValue": {"values": [_any_value(message(v, path), path, depth + 1) for v in inner]}}
            else:
                out = {"kvlistValue": {"values": [_key_value(message(v, path), path, depth + 1) for v in inner]}}
        elif number == 7:
            out = {"bytesValue": base64.b64encode(message(value, path)).decode("ascii")}
    return out


# -- the request, as readings -----------------------------------------------------------------


class _BadPointError(ValueError):
    def __init__(self, field: str, reason: str) -> None:
        self.field, self.reason = field, reason
        super().__init__(f"{field}: {reason}")


def decode(request: Mapping[str, Any], formats: Formats) -> list[Part]:
    """Every data point of an ``ExportMetricsServiceRequest`` (OTLP/JSON's shape) as a part."""
    parts: list[Part] = []
    resources = request.get("resourceMetrics")
    if not isinstance(resources, list):
        return [Part(request, "the request", error=("resourceMetrics", "must be an array of resource metrics"))]
    for i, raw_resource in enumerate(resources):
        path = f"resourceMetrics[{i}]"
        try:
            resource_metrics = _object(raw_resource, path)
            resource = _object(resource_metrics.get("resource", {}), f"{path}.resource")
            resource_attributes = _attributes(resource.get("attributes"), f"{path}.resource.attributes")
            scopes = _array(resource_metrics.get("scopeMetrics"), f"{path}.scopeMetrics")
        except _BadPointError as exc:
            parts.append(Part(raw_resource, path, error=(exc.field, exc.reason)))
            continue
        for j, raw_scope in enumerate(scopes):
            scope_path = f"{path}.scopeMetrics[{j}]"
            try:
                scope_metrics = _object(raw_scope, scope_path)
                scope = _object(scope_metrics.get("scope", {}), f"{scope_path}.scope")
                attributes = {
                    **resource_attributes,
                    **_attributes(scope.get("attributes"), f"{scope_path}.scope.attributes"),
                }
                metrics = _array(scope_metrics.get("metrics"), f"{scope_path}.metrics")
            except _BadPointError as exc:
                parts.append(Part(raw_scope, scope_path, error=(exc.field, exc.reason)))
                continue
            for k, metric in enumerate(metrics):
                _metric_parts(metric, f"{scope_path}.metrics[{k}]", attributes, formats, parts)
    return parts


def _metric_parts(
    metric: object, path: str, attributes: Mapping[str, str], formats: Formats, parts: list[Part]
) -> None:
    try:
        metric = _object(metric, path)
        name = metric.get("name")
        if not isinstance(name, str) or not name:
            raise _BadPointError("name", "a metric must have a name")
        kinds = [kind for kind in _KINDS if kind in metric]
        if len(kinds) != 1:
            raise _BadPointError("data", f"a metric must hold one of {', '.join(_KINDS)}; this one holds {len(kinds)}")
        kind = kinds[0]
        data = _object(metric[kind], f"{path}.{kind}")
        points = _array(data.get("dataPoints"), f"{path}.{kind}.dataPoints")
    except _BadPointError as exc:
        parts.append(Part(metric, path, error=(exc.field, exc.reason)))
        return
    for p, point in enumerate(points):
        where = f"{path} ({name}) data point {p}"
        try:
            mapped = _reading(kind, name, _object(point, where), attributes, formats)
        except _BadPointError as exc:
            parts.append(Part(point, where, error=(exc.field, exc.reason)))
            continue
        if isinstance(mapped, tuple):
            parts.append(Part(point, where, error=mapped))
        else:
            parts.append(Part(mapped, where))


def _reading(
    kind: str, name: str, point: Mapping[str, Any], attributes: Mapping[str, str], formats: Formats
) -> dict[str, object] | tuple[str, str]:
    flags = _integer(point.get("flags", 0), "flags")
    if flags & _NO_RECORDED_VALUE:
        raise _BadPointError("flags", "the point is flagged as holding no recorded value; there is nothing to store")
    time_ns = _integer(point.get("timeUnixNano", 0), "timeUnixNano")
    if time_ns <= 0:
        raise _BadPointError("timeUnixNano", "is missing: a data point without a time is not a reading")
    measure = storable(name)
    measures: dict[str, object] = {}
    if kind in ("gauge", "sum"):
        if "asDouble" in point:
            measures[measure] = _double(point["asDouble"], "asDouble")
        elif "asInt" in point:
            measures[measure] = _integer(point["asInt"], "asInt")
        else:
            raise _BadPointError("value", "the point has neither asDouble nor asInt")
    else:
        measures[f"{measure}_count"] = _integer(point.get("count", 0), "count")
        for key in ("sum", "min", "max"):
            if key in point:
                measures[f"{measure}_{key}"] = _double(point[key], key)
        if kind == "summary":
            for raw_quantile in _array(point.get("quantileValues", []), "quantileValues"):
                quantile = _object(raw_quantile, "quantileValues")
                share = _double(quantile.get("quantile", 0.0), "quantileValues.quantile")
                if not 0.0 <= share <= 1.0:
                    raise _BadPointError("quantileValues.quantile", f"{share!r} is not a quantile (0 to 1)")
                label = f"{share * 100:.6g}".replace(".", "_").replace("-", "_")
                measures[f"{measure}_p{label}"] = _double(quantile.get("value", 0.0), "quantileValues.value")
    merged = {**attributes, **_attributes(point.get("attributes"), "attributes")}
    return reading(merged, measures, time_ns // NS_PER_MS, formats, what="attribute")


def _object(value: object, path: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping):
        raise _BadPointError(path, f"must be an object, got {_kind(value)}")
    return value


def _array(value: object, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise _BadPointError(path, f"must be an array, got {_kind(value)}")
    return value


def _kind(value: object) -> str:
    return "null" if value is None else type(value).__name__


def _integer(value: object, path: str) -> int:
    """A 64-bit integer as OTLP/JSON writes one: a number or its decimal text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and _INTEGER_TEXT.match(value):
        return int(value)
    if isinstance(value, float) and value.is_integer():
        return int(value)
    raise _BadPointError(path, f"must be an integer, got {value!r:.40}")


def _double(value: object, path: str) -> float | int:
    """A double as OTLP/JSON writes one: a number, or ``NaN``, ``Infinity``, ``-Infinity`` (which validation
    then refuses, naming the measure)."""
    if isinstance(value, int | float) and not isinstance(value, bool):
        return value
    if isinstance(value, str) and value in _DOUBLE_TEXT:
        return _DOUBLE_TEXT[value]
    if isinstance(value, Decimal):  # a JSON literal past a double's range: validation refuses it by its value
        return value  # type: ignore[return-value]
    raise _BadPointError(path, f"must be a number, got {value!r:.40}")


def _attributes(value: object, path: str) -> dict[str, str]:
    """``[{"key": k, "value": AnyValue}]`` as key -> text."""
    out: dict[str, str] = {}
    for raw_entry in _array(value, path):
        entry = _object(raw_entry, path)
        key = entry.get("key", "")
        if not isinstance(key, str):
            raise _BadPointError(path, "an attribute must have a key (a string)")
        out[key] = _text(_plain(entry.get("value", {}), f"{path}.{key}", 0))
    return out


def _plain(value: object, path: str, depth: int) -> object:
    """An AnyValue as a plain value (str, bool, int, float, list, dict)."""
    if depth > MAX_VALUE_DEPTH:
        raise _BadPointError(path, f"values nest deeper than {MAX_VALUE_DEPTH} levels")
    if not isinstance(value, Mapping) or len(value) > 1:
        raise _BadPointError(path, "must be an AnyValue: an object with one of stringValue, boolValue, intValue, ...")
    if not value:
        return ""
    ((kind, inner),) = value.items()
    if kind in ("stringValue", "bytesValue") and isinstance(inner, str):
        return inner
    if kind == "boolValue" and isinstance(inner, bool):
        return inner
    if kind == "intValue":
        return _integer(inner, path)
    if kind == "doubleValue":
        return _double(inner, path)
    if kind == "arrayValue":
        values = _array(_object(inner, path).get("values"), path)
        return [_plain(v, path, depth + 1) for v in values]
    if kind == "kvlistValue":
        values = _array(_object(inner, path).get("values"), path)
        pairs = [_object(v, path) for v in values]
        return {str(p.get("key")): _plain(p.get("value", {}), path, depth + 1) for p in pairs}
    raise _BadPointError(path, f"{kind} is not an AnyValue kind (or its value is of the wrong type)")


def _text(value: object) -> str:
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return repr(value)
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False, default=str)
