"""Fuzzing each agent format's decoder with Hypothesis: whatever a record holds, ingest does not raise,
every part is stored or rejected with a reason (on a message SQS accepts), nothing is handed back; and
what the agents' own writers write is read back as it was written."""

from __future__ import annotations

import gzip
import json
import math
import zlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from opentelemetry.proto.collector.metrics.v1.metrics_service_pb2 import ExportMetricsServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, ArrayValue, KeyValue, KeyValueList

from ingest.decoding import DEFAULT_FORMATS
from ingest.formats import lineprotocol, storable
from tests.unit.ingest.agents import Point, WritePrecision, as_json, compress, line_protocol, otlp_json, telegraf_json
from tests.unit.ingest.test_agent_formats import NS, ingest
from tests.unit.ingest.test_logic import NOW

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
T_NS = (NOW - 60_000) * NS

# Names and values with every character line protocol escapes, and then some. A backslash only in string
# values: influxdb-client does not escape one in a key or tag value (``\=`` would read as an escaped '='), so
# no reader, InfluxDB's included, can read such a key back; Telegraf's serializer does not write one.
_tricky = st.text(st.sampled_from(list('abcXYZ_09 ,="\n\t.#é😀-')), min_size=1, max_size=8)
_string_value = st.text(st.sampled_from(list('ab ,="\\\n\té😀')), max_size=8)
_field_value = st.one_of(
    st.floats(allow_nan=False, allow_infinity=False),
    st.integers(-(2**63), 2**63 - 1),
    st.booleans(),
    _string_value,
)


@st.composite
def points(draw: st.DrawFn) -> tuple[Point, dict[str, str], dict[str, Any], str]:
    """A Point as influxdb-client writes it, and the tags and fields it was given."""
    measurement = draw(_tricky.filter(lambda m: not m.startswith("#")))
    tags = draw(st.dictionaries(_tricky, _tricky, max_size=4))
    tags["host"] = draw(st.sampled_from(["web-01", "db.2", "h_3"]))
    fields = draw(st.dictionaries(_tricky, _field_value, min_size=1, max_size=4))
    point = Point(measurement)
    for key, value in tags.items():
        point = point.tag(key, value)
    for key, value in fields.items():
        point = point.field(key, value)
    return point.time(T_NS + draw(st.integers(0, 10**9)), WritePrecision.NS), tags, fields, measurement


@FUZZ
@given(st.lists(points(), min_size=1, max_size=5))
def test_whatever_influxdb_clients_point_writes_is_read_back_as_it_was_written(
    drawn: list[tuple[Point, dict[str, str], dict[str, Any], str]],
) -> None:
    text = line_protocol(*(p for p, _, _, _ in drawn)).decode("utf-8")
    parts = lineprotocol.decode(text, DEFAULT_FORMATS)
    # every line the writer wrote is line protocol to the reader (the writer leaves out an empty tag key or value)
    assert len(parts) == len(drawn)
    for part, (_, tags, fields, measurement) in zip(parts, drawn, strict=True):
        assert part.error is None or part.error[0] != "line", part
        if part.error is not None:  # two names became one: rejected naming it, never merged
            assert "stored as" in part.error[1] or "both named" in part.error[1], part
            continue
        assert isinstance(part.value, dict)
        numbers = {k: v for k, v in fields.items() if not isinstance(v, str)}
        strings = {k: v for k, v in fields.items() if isinstance(v, str)}
        assert part.value["entity_id"] == tags["host"]
        expected = {storable(f"{measurement}_{k}"): int(v) if isinstance(v, bool) else v for k, v in numbers.items()}
        assert part.value["measures"] == expected
        # the writer leaves out a tag with an empty key or value; string fields are dimensions
        written_tags = {k: v for k, v in tags.items() if k and v and k != "host"}
        assert part.value.get("dimensions", {}) == {storable(k): v for k, v in {**written_tags, **strings}.items()}


# -- hostile records of each format: conservation, never a crash -------------------------------

_line_alphabet = st.sampled_from([*list('cpu,host=h1 v=1.5i"\\ t#\n\r-e9uTF'), "1700000000000000000", "é", "\x00"])
hostile_lines = st.lists(_line_alphabet, max_size=60).map("".join).map(lambda t: t.encode("utf-8"))


def _good_line(n: int) -> bytes:
    return Point("m").tag("host", f"h{n}").field("v", n).time(T_NS + n, WritePrecision.NS).to_line_protocol().encode()


@FUZZ
@given(st.lists(hostile_lines | st.integers(0, 20).map(_good_line), min_size=1, max_size=6))
def test_no_line_protocol_record_makes_ingest_raise_or_lose_a_line(payloads: list[bytes]) -> None:
    outcome, stored, _ = ingest(payloads)
    good = {p for p in payloads if p.startswith(b"m,host=")}
    assert len(stored) >= len({g.split(b",")[1] for g in good})  # every good line's reading is stored
    assert outcome.readings == outcome.written + outcome.rejected


_json_scalar = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**30), 10**30), st.floats(), st.text(max_size=6), st.just("1e400")
)
_json_value = st.recursive(
    _json_scalar, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=5), inner, max_size=3)
)


@st.composite
def telegraf_metric(draw: st.DrawFn) -> object:
    tags = draw(st.dictionaries(st.sampled_from(["host", "cpu", "a.b", "a_b", ""]), st.text(max_size=5) | _json_value))
    fields = draw(st.dictionaries(st.text(max_size=6), _json_value, max_size=4))
    stamp = draw(st.one_of(st.integers(-(10**20), 10**20), st.floats(), _json_value, st.just((NOW - 5_000) // 1000)))
    metric = telegraf_json(draw(st.text(max_size=5)), {}, {}, 0)
    metric.update(fields=fields, tags=tags, timestamp=stamp)
    if draw(st.booleans()):
        del metric[draw(st.sampled_from(sorted(metric)))]
    return metric if draw(st.integers(0, 9)) else draw(_json_value)


@FUZZ
@given(st.lists(telegraf_metric(), min_size=1, max_size=4), st.booleans())
def test_no_telegraf_json_makes_ingest_raise(metrics: list[object], batched: bool) -> None:
    payloads = [as_json({"metrics": metrics})] if batched else [json.dumps(m).encode() for m in metrics]
    outcome, _, _ = ingest([p.replace(b'"1e400"', b"1e400") for p in payloads])
    assert outcome.readings == outcome.written + outcome.rejected


# OTLP: requests built with opentelemetry-proto's own messages, every field drawn, hostile values included.
_doubles = st.floats() | st.sampled_from([math.nan, math.inf, 1e-300, 1e300, -0.0])


def _any_value(depth: int = 0) -> st.SearchStrategy[AnyValue]:
    leaves = st.one_of(
        st.text(max_size=6).map(lambda s: AnyValue(string_value=s)),
        st.booleans().map(lambda b: AnyValue(bool_value=b)),
        st.integers(-(2**63), 2**63 - 1).map(lambda i: AnyValue(int_value=i)),
        _doubles.map(lambda d: AnyValue(double_value=d)),
        st.binary(max_size=4).map(lambda b: AnyValue(bytes_value=b)),
        st.just(AnyValue()),
    )
    if depth >= 2:
        return leaves
    nested = _any_value(depth + 1)
    return (
        leaves
        | st.lists(nested, max_size=2).map(lambda vs: AnyValue(array_value=ArrayValue(values=vs)))
        | (
            st.lists(st.tuples(st.text(max_size=3), nested), max_size=2).map(
                lambda kvs: AnyValue(kvlist_value=KeyValueList(values=[KeyValue(key=k, value=v) for k, v in kvs]))
            )
        )
    )


_attributes = st.lists(
    st.tuples(st.sampled_from(["service.instance.id", "host", "a.b", "a_b", "k", ""]), _any_value()), max_size=4
)
_times = st.sampled_from([0, (NOW - 1_000) * NS + 999_999, 2**64 - 1, 1])


@st.composite
def otlp_requests(draw: st.DrawFn) -> ExportMetricsServiceRequest:
    request = ExportMetricsServiceRequest()
    for _ in range(draw(st.integers(1, 2))):
        resource_metrics = request.resource_metrics.add()
        for key, value in draw(_attributes):
            resource_metrics.resource.attributes.append(KeyValue(key=key, value=value))
        scope = resource_metrics.scope_metrics.add()
        for _ in range(draw(st.integers(0, 3))):
            metric = scope.metrics.add(name=draw(st.sampled_from(["cpu.time", "x", "", "a.b", "a_b"])))
            kind = draw(st.sampled_from(["gauge", "sum", "histogram", "exponential_histogram", "summary", "none"]))
            if kind == "none":
                continue
            data = getattr(metric, kind)
            for _ in range(draw(st.integers(0, 3))):
                point = data.data_points.add(time_unix_nano=draw(_times), flags=draw(st.sampled_from([0, 0, 1])))
                for key, value in draw(_attributes):
                    point.attributes.append(KeyValue(key=key, value=value))
                if kind in ("gauge", "sum"):
                    choice = draw(st.sampled_from(["double", "int", "none"]))
                    if choice == "double":
                        point.as_double = draw(_doubles)
                    elif choice == "int":
                        point.as_int = draw(st.integers(-(2**63), 2**63 - 1))
                else:
                    point.count = draw(st.integers(0, 2**64 - 1))
                    point.sum = draw(_doubles)
                    if kind == "summary":
                        for share in draw(st.lists(_doubles, max_size=3)):
                            point.quantile_values.add(quantile=share, value=draw(_doubles))
                    else:
                        point.min, point.max = draw(_doubles), draw(_doubles)
    return request


@FUZZ
@given(otlp_requests(), st.sampled_from(["proto", "json"]), st.sampled_from(["none", "gzip", "zlib", "flate"]))
def test_no_otlp_request_makes_ingest_raise(request: ExportMetricsServiceRequest, encoding: str, how: str) -> None:
    data = request.SerializeToString() if encoding == "proto" else otlp_json(request)
    outcome, _stored, _ = ingest([compress(data, how)])
    points = sum(
        len(getattr(m, m.WhichOneof("data")).data_points) if m.WhichOneof("data") else 1
        for r in request.resource_metrics
        for s in r.scope_metrics
        for m in s.metrics
    )
    # every part stored or rejected; with nothing rejected, one reading per data point
    assert outcome.readings == outcome.written + outcome.rejected
    if not outcome.rejected:
        assert outcome.readings == points


_valid = None


def _valid_request() -> bytes:
    global _valid  # noqa: PLW0603 - built once: the SDK's export of a few instruments
    if _valid is None:
        from tests.unit.ingest.test_agent_formats import _otlp  # noqa: PLC0415

        _valid = _otlp().SerializeToString()
    return _valid


@FUZZ
@given(st.data())
def test_no_corruption_of_an_otlp_record_makes_ingest_raise(data: st.DataObject) -> None:
    raw = _valid_request()
    how = data.draw(st.sampled_from(["none", "gzip", "zlib", "flate"]))
    blob = bytearray(compress(raw, how, closed=data.draw(st.booleans())))
    for _ in range(data.draw(st.integers(1, 4))):
        position = data.draw(st.integers(0, len(blob) - 1))
        action = data.draw(st.sampled_from(["flip", "cut", "insert"]))
        if action == "flip":
            blob[position] ^= data.draw(st.integers(1, 255))
        elif action == "cut":
            del blob[position : position + data.draw(st.integers(1, 8))]
        else:
            blob[position:position] = data.draw(st.binary(min_size=1, max_size=4))
        if not blob:
            blob = bytearray(b"\n")
    outcome, _, _ = ingest([bytes(blob)])
    assert outcome.readings == outcome.written + outcome.rejected


@FUZZ
@given(st.binary(max_size=300), st.sampled_from([b"", b"\x1f\x8b", b"\x78\x9c", b"\n", b"\x78\x01"]))
def test_no_binary_record_makes_ingest_raise(blob: bytes, head: bytes) -> None:
    for data in (head + blob, gzip.compress(head + blob), zlib.compress(head + blob)):
        outcome, _, _ = ingest([data])
        assert outcome.readings == outcome.written + outcome.rejected


@st.composite
def otlp_json_documents(draw: st.DrawFn) -> object:
    """The OTLP/JSON skeleton with any of its values replaced, now and then, by arbitrary JSON."""

    def maybe(value: object) -> object:
        return draw(_json_value) if draw(st.integers(0, 5)) == 0 else value

    attribute = {"key": maybe("service.instance.id"), "value": maybe({"stringValue": maybe("i-1")})}
    point = {
        "timeUnixNano": maybe(str((NOW - 1_000) * NS)),
        draw(st.sampled_from(["asDouble", "asInt", "count", "sum"])): maybe(draw(st.sampled_from([1.5, "7", "NaN"]))),
        "attributes": maybe([attribute]),
        "quantileValues": maybe([{"quantile": maybe(0.5), "value": maybe(1.0)}]),
        "flags": maybe(0),
    }
    kind = draw(st.sampled_from(["gauge", "sum", "histogram", "exponentialHistogram", "summary", "other"]))
    metric = {"name": maybe("m.x"), kind: maybe({"dataPoints": maybe([point, maybe(point)])})}
    scope = {"scope": maybe({"name": "s", "attributes": maybe([attribute])}), "metrics": maybe([metric])}
    resource = {"resource": maybe({"attributes": maybe([attribute])}), "scopeMetrics": maybe([scope])}
    return {"resourceMetrics": maybe([resource, maybe(resource)])}


@FUZZ
@given(otlp_json_documents())
def test_no_otlp_json_document_makes_a_reader_raise(document: object) -> None:
    outcome, _, rejects = ingest([json.dumps(document).encode()])
    assert outcome.readings == outcome.written + outcome.rejected
    assert not [b for b in rejects if "could not be read" in b["reason"]]  # the readers' safety net never caught


def test_a_reader_that_raises_costs_its_record_alone(monkeypatch: Any) -> None:
    from ingest.formats import lineprotocol as module  # noqa: PLC0415

    def broken(text: str, formats: object) -> object:
        raise RuntimeError("a bug")

    monkeypatch.setattr(module, "decode", broken)
    good = as_json(telegraf_json("m", {"v": 1}, {"host": "h"}, (NOW - 1_000) // 1000))
    _, stored, rejects = ingest([_good_line(1), good])
    assert [s[0] for s in stored] == ["h"]
    assert [(b["field"], b["reason"], b["source"]["index"]) for b in rejects] == [
        ("data", "could not be read (RuntimeError); please report this with the payload", None)
    ]
