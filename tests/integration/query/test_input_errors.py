"""Bad input on every route is a 400 naming the parameter: never a 500, never another query."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from keydesign import format_ts
from query.settings import QueryLimits
from tests.integration.query.conftest import HOUR, NOW, Store, api_for, reading, shared_store
from tests.unit.query.apigw import ApiClient, entity_path, rest_event

pytestmark = pytest.mark.integration

DAY = 24 * HOUR
FROM, TO = format_ts(NOW - 2 * HOUR), format_ts(NOW)
GOOD = {"from_": FROM, "to": TO}

INJECTIONS = [
    'sensor" OR "1"="1',
    "sensor' OR '1'='1",
    "sensor) OR attribute_exists(pk",
    "#pk",
    "sensor#0001",
    "sensor-1#2026-11-22T06:00:00.000Z#~",
    "sensor\x00",
    "sensor\n",
    "s\u00e9nsor",
    "\u6e29\u5ea6\u8a08",
    "\U0001f525",
    "sensor~",
    "sensor 1",
    "x" * 129,
    "%",
    "sensor%ZZ",
]


@pytest.fixture(scope="module")
def store() -> Iterator[Store]:
    """One for the whole module: its tests only read it."""
    with shared_store() as made:
        made.write(reading("sensor-1", NOW - HOUR, "e1"))
        yield made


@pytest.fixture
def api(store: Store) -> ApiClient:
    return api_for(store, limits=QueryLimits(max_range_ms=7 * DAY, latest_lookback_ms=2 * DAY))


def assert_400(api: ApiClient, path: str, parameter: str | None, **params: Any) -> dict[str, Any]:
    reply = api.get(path, **params)
    assert reply.status == 400, reply.body
    assert reply.body["parameter"] == parameter, reply.body
    assert reply.body["error"]
    return reply.body


@pytest.mark.parametrize("tail", ["readings", "latest", "aggregates"])
@pytest.mark.parametrize("entity", INJECTIONS)
def test_hostile_entity_ids_are_refused_by_name(api: ApiClient, entity: str, tail: str) -> None:
    params: dict[str, Any] = dict(GOOD, interval="1h") if tail == "aggregates" else dict(GOOD)
    if tail == "latest":
        params = {}

    assert_400(api, entity_path(entity, tail), "entity_id", **params)


@pytest.mark.parametrize("entity", [":pk", ":sk_low", "a=b", "sensor-1:=:pk", "@+/="])
def test_ids_that_look_like_placeholders_are_plain_data(api: ApiClient, entity: str) -> None:
    # Valid ids made of expression syntax reach DynamoDB only as bound values: no data, no error.
    reply = api.get(entity_path(entity, "readings"), **GOOD)

    assert reply.status == 200
    assert reply.body["entity_id"] == entity
    assert reply.body["items"] == []


def test_an_id_with_bytes_that_are_not_utf8_is_refused(api: ApiClient) -> None:
    reply = api.send(rest_event("/entities/sensor%FF/readings", {"from": FROM, "to": TO}))

    assert reply.status == 400
    assert reply.body["parameter"] == "entity_id"


def test_an_encoded_slash_is_part_of_the_id(api: ApiClient) -> None:
    reply = api.get(entity_path("site/7", "readings"), **GOOD)

    assert reply.status == 200
    assert reply.body["entity_id"] == "site/7"


@pytest.mark.parametrize(
    ("params", "parameter", "message"),
    [
        ({"from_": TO, "to": FROM}, "from", "before 'to'"),
        ({"from_": FROM, "to": FROM}, "from", "before 'to'"),
        ({"from_": format_ts(NOW - 8 * DAY), "to": TO}, "to", "at most 7d"),
        ({"to": TO}, "from", "required"),
        ({"from_": FROM}, "to", "required"),
        ({"from_": "yesterday", "to": TO}, "from", "RFC 3339"),
        ({"from_": "1795000000", "to": TO}, "from", "epoch seconds"),
        ({"from_": FROM, "to": "2026-11-22T12:00:00 01:00"}, "to", "%2B"),
        ({"from_": FROM, "to": "10000-01-01T00:00:00Z"}, "to", "RFC 3339"),
        ({**GOOD, "limit": 0}, "limit", "at least 1"),
        ({**GOOD, "limit": -5}, "limit", "at least 1"),
        ({**GOOD, "limit": 1001}, "limit", "at most 1,000"),
        ({**GOOD, "limit": 10**30}, "limit", "at most 1,000"),
        ({**GOOD, "limit": "ten"}, "limit", "whole number"),
        ({**GOOD, "limit": "1.5"}, "limit", "whole number"),
        ({**GOOD, "order": "sideways"}, "order", "one of"),
        ({**GOOD, "consistent": "maybe"}, "consistent", "true or false"),
        ({**GOOD, "explain": "2"}, "explain", "true or false"),
        ({**GOOD, "measures": "temp;DROP"}, "measures", "not a measure name"),
        ({**GOOD, "measures": "#m"}, "measures", "not a measure name"),
        ({**GOOD, "measures": ""}, "measures", "no empty entries"),
        ({**GOOD, "cursor": "x" * 1025}, "cursor", "at most 1024"),
        ({**GOOD, "mesures": "temp"}, "mesures", "not a parameter"),
    ],
)
@pytest.mark.parametrize("path", [entity_path("sensor-1", "readings"), "/readings"])
def test_bad_read_parameters_are_named(
    api: ApiClient, path: str, params: dict[str, Any], parameter: str, message: str
) -> None:
    body = assert_400(api, path, parameter, **params)

    assert message in body["error"]


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({**GOOD}, "interval"),
        ({**GOOD, "interval": "5 minutes"}, "interval"),
        ({**GOOD, "interval": "0s"}, "interval"),
        ({**GOOD, "interval": "1s"}, "interval"),  # 7,200 intervals is fine; see below
        ({**GOOD, "interval": "1h", "stats": "median"}, "stats"),
        ({**GOOD, "interval": "1h", "measures": "a b"}, "measures"),
        ({"from_": TO, "to": FROM, "interval": "1h"}, "from"),
        ({**GOOD, "interval": "1h", "limit": 5}, "limit"),
        ({**GOOD, "interval": "1h", "cursor": "abc"}, "cursor"),
    ],
)
def test_bad_aggregate_parameters_are_named(api: ApiClient, params: dict[str, Any], parameter: str) -> None:
    if params.get("interval") == "1s":
        params = {**params, "from_": format_ts(NOW - 6 * HOUR)}  # 21,600 intervals: too many
    assert_400(api, entity_path("sensor-1", "aggregates"), parameter, **params)


@pytest.mark.parametrize(
    ("params", "parameter"),
    [
        ({"lookback": "3d"}, "lookback"),
        ({"lookback": "0s"}, "lookback"),
        ({"lookback": "a while"}, "lookback"),
        ({"from_": FROM}, "from"),
        ({"measures": ","}, "measures"),
    ],
)
def test_bad_latest_parameters_are_named(api: ApiClient, params: dict[str, Any], parameter: str) -> None:
    assert_400(api, entity_path("sensor-1", "latest"), parameter, **params)
