"""The REST layer on an in-memory store: status codes, error bodies, and no input ever yielding a 5xx."""

from __future__ import annotations

import dataclasses
import json
import re
import string
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.partition_reader import Page, PageRequest, StoredBlock
from adapters.shard_map_source import StaticShardMap
from doubles.lambda_context import FakeLambdaContext
from doubles.memory_dynamo import MemoryReader
from keydesign import Layout, Reading, ShardMap, format_ts, parse_timestamp
from keydesign.blocks import read_header
from keydesign.varints import write_varint
from query import api
from query.api import create_app
from query.cursor import CursorCodec
from query.logic import QueryService
from query.merge import Position
from query.models import LatestReading
from query.params import TimeRange
from query.settings import QueryLimits
from tests.unit.query.apigw import ApiClient, entity_path, memory_service, rest_event

QUERY_MD = Path(__file__).resolve().parents[3] / "docs" / "query.md"
NOW = parse_timestamp("2026-11-22T12:00:00Z")
HOUR = 3_600_000
FROM, TO = format_ts(NOW - 6 * HOUR), format_ts(NOW)
ROUTES = {
    "entity_readings": (entity_path("sensor-1", "readings"), {"from": FROM, "to": TO}),
    "latest": (entity_path("sensor-1", "latest"), {}),
    "aggregates": (entity_path("sensor-1", "aggregates"), {"from": FROM, "to": TO, "interval": "1h"}),
    "range_readings": ("/readings", {"from": FROM, "to": TO}),
}
PARAMETERS = {
    "entity_readings": ["from", "to", "limit", "cursor", "order", "measures", "consistent", "explain"],
    "latest": ["lookback", "measures", "consistent", "explain"],
    "aggregates": ["from", "to", "interval", "stats", "measures", "consistent", "explain"],
    "range_readings": ["from", "to", "limit", "cursor", "order", "measures", "consistent", "explain"],
}


def build(
    kind: str = "hybrid", reader: Any = None, limits: QueryLimits | None = None
) -> tuple[ApiClient, MemoryReader]:
    service, store = build_service(kind, reader, limits)
    return ApiClient(create_app(service).resolve), store


def build_service(
    kind: str = "hybrid", reader: Any = None, limits: QueryLimits | None = None
) -> tuple[QueryService, MemoryReader]:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    store = MemoryReader(page_items=5)
    store.tables.add("readings")
    readings = [
        Reading.parse(
            {
                "entity_id": f"sensor-{n % 3}",
                "timestamp": format_ts(NOW - 5 * HOUR + n * 400_000),
                "event_id": f"e{n:03d}",
                "measures": {"temp": n / 2, "rh": 40 + n},
            }
        )
        for n in range(40)
    ]
    store.store(layout, shard_map, [(reading, 1) for reading in readings])
    service = memory_service(layout, shard_map, reader or store, now_ms=NOW, limits=limits)
    return service, store


API, _ = build()


@pytest.mark.parametrize("route", list(ROUTES))
def test_every_route_answers(route: str) -> None:
    path, params = ROUTES[route]

    reply = API.get(path, **params)

    assert reply.status == 200, reply.body
    assert reply.headers["Content-Type"] == "application/json"


@pytest.mark.parametrize(
    ("path", "method"),
    [("/nope", "GET"), ("/entities/sensor-1", "GET"), ("/entities/sensor-1/readings", "POST"), ("/", "GET")],
)
def test_an_unknown_route_is_a_404_with_the_error_body(path: str, method: str) -> None:
    reply = API.send(rest_event(path, {"from": FROM, "anything": "x"}, method=method))

    assert reply.status == 404
    assert reply.body == {"error": f"no route {method} {path}", "parameter": None}


@pytest.mark.parametrize("route", list(ROUTES))
def test_an_unknown_parameter_is_named_even_when_others_are_missing(route: str) -> None:
    path, _ = ROUTES[route]

    reply = API.get(path, **{"form": FROM})

    assert reply.status == 400
    assert reply.body["parameter"] == "form"
    assert "is not a parameter of this route" in reply.body["error"]


def test_a_repeated_parameter_is_refused() -> None:
    path, params = ROUTES["entity_readings"]

    reply = API.send(rest_event(path, {**params, "order": ["asc", "desc"]}))

    assert reply.status == 400
    assert reply.body == {"error": "order: was given 2 times; give it once", "parameter": "order"}


def test_cross_entity_reads_on_a_layout_without_buckets_are_a_400_without_a_parameter() -> None:
    api, _ = build("random")

    reply = api.get("/readings", from_=FROM, to=TO)

    assert reply.status == 400
    assert reply.body["parameter"] is None
    assert "hybrid layout" in reply.body["error"]


class Throttled:
    def read_page(self, request: PageRequest) -> Page:
        raise ClientError({"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow"}}, "Query")


class Broken:
    def read_page(self, request: PageRequest) -> Page:
        raise RuntimeError("bug")


def test_throttling_after_retries_is_a_503_with_retry_after() -> None:
    api, _ = build(reader=Throttled())
    path, params = ROUTES["entity_readings"]

    reply = api.get(path, **params)

    assert reply.status == 503
    assert reply.headers["Retry-After"] == "1"
    assert reply.body["parameter"] is None


def test_a_fault_of_ours_is_a_500_json_body_with_the_request_id() -> None:
    api, _ = build(reader=Broken())
    path, params = ROUTES["entity_readings"]

    reply = api.get(path, **params)

    assert reply.status == 500
    assert reply.body["error"].startswith("internal error (request id ")
    assert "bug" not in reply.body["error"]


def _body_cut(payload: bytes) -> bytes:
    return payload[: read_header(payload).body_at] + b"\x00"


def _string_deltas(payload: bytes) -> bytes:
    """A block of format 2 (no checksum) with the header of ``payload`` and a time delta that is a string."""
    header = read_header(payload)
    head = bytearray([2])
    for number in (header.count, header.first_ms, header.span_ms):
        write_varint(number, head)
    body = [["0", *[0] * (header.count - 1)], {"v": [1] * header.count}]
    return bytes(head) + b"\x01\x07" + json.dumps(body).encode()


class Damaged:
    """Every block it returns is damaged by ``damage``."""

    def __init__(self, inner: MemoryReader, damage: Any) -> None:
        self.inner, self.damage = inner, damage

    def read_page(self, request: PageRequest) -> Page:
        page = self.inner.read_page(request)
        blocks = tuple(StoredBlock(b.sk, self.damage(b.payload)) for b in page.blocks)
        return dataclasses.replace(page, blocks=blocks)


@pytest.mark.parametrize(
    ("damage", "reason"),
    [(_body_cut, "checksum does not match"), (_string_deltas, "a time delta is not a whole number")],
)
def test_a_block_that_does_not_decode_is_a_500_naming_it_and_its_key_is_logged(
    damage: Any, reason: str, caplog: pytest.LogCaptureFixture
) -> None:
    _, store = build()
    api, _ = build(reader=Damaged(store, damage))
    path, params = ROUTES["entity_readings"]

    reply = api.get(path, **params)

    # Then the read fails rather than return the range with a hole, and the operator can find the block
    assert reply.status == 500
    assert reply.body["error"].startswith("a stored block of readings in this range cannot be decoded")
    (error,) = [record.__dict__ for record in caplog.records if record.getMessage() == "a stored block does not decode"]
    assert error["table"] == "readings" and error["pk"].startswith("000")
    assert error["sk"].startswith("sensor-1#") and reason in error["reason"]
    # ... and the answer names the block too: its table and key, and what is wrong with it
    assert f"table 'readings', pk {error['pk']!r}, sk {error['sk']!r}: {error['reason']}" in reply.body["error"]
    assert reply.body["parameter"] is None


def test_an_aggregate_over_the_scan_limit_is_a_413_naming_the_range() -> None:
    api, _ = build(limits=QueryLimits(max_scan_items=10))
    path, params = ROUTES["aggregates"]

    reply = api.get(path, **params)

    # Then it is refused saying which budget and where to split the range
    assert reply.status == 413
    assert reply.body["parameter"] == "to"
    assert "decoded the 10 readings one request may read after reading [" in reply.body["error"]
    assert reply.body["error"].endswith(" separately")


def test_max_limit_lowers_the_default_and_the_ceiling() -> None:
    api, _ = build(limits=QueryLimits(max_limit=5))
    path, params = ROUTES["range_readings"]

    default = api.get(path, **params)
    too_big = api.get(path, **params, limit=6)

    assert default.body["count"] == 5
    assert too_big.status == 400
    assert too_big.body["parameter"] == "limit"


text = st.text(alphabet=st.characters(codec="utf-8"), max_size=40)
value = st.one_of(
    text,
    st.sampled_from(["", "0", "-1", "1001", "true", "asc", "desc", "1h", "0s", "count,max", FROM, TO, "9" * 30]),
    st.integers(-(10**20), 10**20).map(str),
)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    route=st.sampled_from(list(ROUTES)),
    entity=st.one_of(st.just("sensor-1"), text.filter(bool)),
    chosen=st.dictionaries(st.sampled_from(sorted({p for ps in PARAMETERS.values() for p in ps})), value, max_size=5),
    keep_required=st.booleans(),
)
def test_no_input_yields_a_server_error(route: str, entity: str, chosen: dict[str, str], keep_required: bool) -> None:
    """Property: whatever the parameters, the answer is 200 or a 4xx naming a real parameter."""
    path, required = ROUTES[route]
    if path.startswith("/entities/"):
        path = entity_path(entity, path.rsplit("/", 1)[1])
    params = {**(required if keep_required else {}), **chosen}

    reply = API.get(path, **params)

    assert reply.status in (200, 400, 404), reply.body
    if reply.status != 200:
        assert set(reply.body) == {"error", "parameter"}
        assert reply.body["parameter"] in {None, "entity_id", *PARAMETERS[route], *params}


@settings(max_examples=200, deadline=None)
@given(entity=st.text(alphabet=string.printable + "é温#\"'", min_size=1, max_size=30))
def test_entity_ids_outside_the_id_alphabet_are_400_naming_entity_id(entity: str) -> None:
    reply = API.get(entity_path(entity, "readings"), from_=FROM, to=TO)

    allowed = set(string.ascii_letters + string.digits + "._:@+=/-")
    if set(entity) <= allowed and len(entity) <= 128:
        assert reply.status == 200
    else:
        assert reply.status == 400
        assert reply.body["parameter"] == "entity_id"


def test_a_page_of_large_readings_ends_before_the_lambda_response_limit_and_resumes_exactly() -> None:
    # Given 1,000 readings each carrying fifty 256-character dimensions, some all quotes and
    # backslashes (escaped twice in the response), some outside ASCII (escaped as \\uXXXX)
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(layout.bucket, 4)
    store = MemoryReader()
    dims = {f"d{k:02d}": ('"\\' * 128 if k % 2 else chr(0x3B1 + k % 20) * 256) for k in range(50)}
    readings = [
        Reading.parse(
            {
                "entity_id": "sensor-1",
                "timestamp": format_ts(NOW - HOUR + n),
                "event_id": f"e{n:04d}",
                "measures": {"v": n},
                "dimensions": dims,
            }
        )
        for n in range(1000)
    ]
    store.store(layout, shard_map, [(reading, 1) for reading in readings])
    service = memory_service(layout, shard_map, store, now_ms=NOW)
    resolve = create_app(service).resolve
    path = entity_path("sensor-1", "readings")
    query = {"from": format_ts(NOW - HOUR), "to": format_ts(NOW), "limit": "1000"}

    # When the pages are followed
    seen: list[str] = []
    sizes: list[int] = []
    cursor = None
    while True:
        raw = resolve(rest_event(path, {**query, **({"cursor": cursor} if cursor else {})}), None)
        sizes.append(len(json.dumps(raw)))
        body = json.loads(raw["body"])
        seen.extend(i["event_id"] for i in body["items"])
        cursor = body["next_cursor"]
        if cursor is None:
            break

    # Then every response stayed under Lambda's 6 MB, and nothing was skipped or repeated
    assert len(sizes) > 1
    assert max(sizes) < 6_000_000
    assert seen == [f"e{n:04d}" for n in range(1000)]


def _forger() -> tuple[QueryService, CursorCodec]:
    """A service over an empty hybrid table, and the codec that signs its cursors (as a leaked key would)."""
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    codec = CursorCodec(lambda: b"k" * 40)
    service = QueryService(
        layout=layout,
        shard_maps=StaticShardMap(ShardMap.initial(layout.bucket, 4)),
        reader=MemoryReader(),
        cursors=codec,
        limits=QueryLimits(),
        clock_ms=lambda: NOW,
    )
    return service, codec


@pytest.mark.parametrize(
    ("route", "anchor"),
    [
        ("entity_readings", NOW - 7 * HOUR),  # before 'from'
        ("entity_readings", NOW),  # at 'to', which is exclusive
        ("range_readings", NOW - 6 * HOUR + 1),  # not where a bucket meets the range
        ("range_readings", NOW - 9 * HOUR),
    ],
)
def test_a_validly_signed_cursor_outside_the_range_is_still_refused(route: str, anchor: int) -> None:
    # Given a cursor forged with the right key and binding (a leaked key) but pointing outside the range
    service, codec = _forger()
    entity = "sensor-1" if route == "entity_readings" else None
    bound = service._binding(route, entity, TimeRange(NOW - 6 * HOUR, NOW), "asc", None)
    cursor = codec.encode(bound, Position(format_ts(anchor), "sensor-1#x#y"))
    path, params = ROUTES[route]

    reply = ApiClient(create_app(service).resolve).get(path, **params, cursor=cursor)

    assert reply.status == 400
    assert reply.body == {"error": "cursor: points outside the requested range", "parameter": "cursor"}


@pytest.mark.parametrize("sk", ["sensor-1#x#y", "no-separators", "bad id!#2026-11-22T07:00:00.000Z#e1", "a#b#c#d"])
def test_a_validly_signed_cross_entity_cursor_that_is_not_a_reading_position_is_refused(sk: str) -> None:
    # Given a forged cursor (a leaked key) inside the range whose reading key is not one
    service, codec = _forger()
    bound = service._binding("range_readings", None, TimeRange(NOW - 6 * HOUR, NOW), "asc", None)
    cursor = codec.encode(bound, Position(format_ts(NOW - 6 * HOUR), sk))
    path, params = ROUTES["range_readings"]

    reply = ApiClient(create_app(service).resolve).get(path, **params, cursor=cursor)

    # Then it is a 400 naming the cursor, not a fault of ours
    assert reply.status == 400
    assert reply.body == {"error": "cursor: carries an unreadable position", "parameter": "cursor"}


# -- the routes, each a function of query.api ------------------------------------------


def test_a_route_is_a_function_of_the_module_on_the_router_and_answers_on_its_own() -> None:
    # Given the route, imported on its own, and registered on the router under its method and path
    assert api.ROUTES[("GET", "/entities/{entity_id}/latest")] is api.latest
    service, _ = build_service()

    # When it is called alone, and the same request goes through the app
    alone = api.latest(entity_id="sensor-1", service=service)
    reply = ApiClient(create_app(service).resolve).get(entity_path("sensor-1", "latest"))

    # Then both give the same answer, a reading
    assert reply.status == 200, reply.body
    assert LatestReading.model_validate(reply.body) == alone
    assert alone.reading is not None


def test_the_routes_are_the_ones_docs_query_md_lists() -> None:
    # A route added without its row in the table of docs/query.md fails here.
    table = re.findall(r"^\| `([A-Z]+) (/\S*)` \|", QUERY_MD.read_text(encoding="utf-8"), re.MULTILINE)

    assert len(table) == len(set(table))
    assert set(api.ROUTES) == set(table)


@pytest.mark.parametrize("route", ["entity_readings", "range_readings"])
def test_a_route_reads_until_the_functions_remaining_time_less_the_response_margin(route: str) -> None:
    path, params = ROUTES[route]
    app = create_app(build_service()[0])
    margin = QueryLimits().response_margin_ms

    def within(remaining_ms: int) -> Any:
        context = FakeLambdaContext(remaining_ms)
        reply = ApiClient(lambda event, _: app.resolve(event, context)).get(path, **params)
        assert reply.status == 200, reply.body
        return reply.body

    assert within(margin + 60_000)["complete"] is True
    out_of_time = within(margin)
    assert out_of_time["complete"] is False
    assert out_of_time["cut_short_by"] == "deadline"


def test_each_app_answers_with_its_own_service_though_they_share_the_router() -> None:
    # Given two apps in one process, on a layout with buckets and on one without, and a schema-only app
    hybrid, _ = build()
    random, _ = build("random")
    create_app(None)

    # When each is asked in turn, then each answers as its own service does
    for _ in range(2):
        assert hybrid.get("/readings", from_=FROM, to=TO).status == 200
        assert random.get("/readings", from_=FROM, to=TO).status == 400
