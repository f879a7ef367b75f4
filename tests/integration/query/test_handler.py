"""The Lambda entry point: settings at cold start, the cursor secret from Secrets Manager
(fetched once), metrics flushed, and paging across invocations."""

from __future__ import annotations

import importlib
import json
import sys
from collections.abc import Iterator
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from adapters.clients import client
from adapters.observability import metrics
from adapters.settings import SettingsError
from doubles.lambda_context import FakeLambdaContext
from keydesign import format_ts
from tests.integration.query.conftest import HOUR, NOW, PREFIX, Store, StoreFactory
from tests.unit.query.apigw import ApiClient, entity_path, rest_event

pytestmark = pytest.mark.integration

ENV = {
    "LAYOUT": "hybrid",
    "SHARDS": "4",
    "BUCKET": "1h",
    "TABLE_PREFIX": PREFIX,
    "POWERTOOLS_SERVICE_NAME": "query",
    "POWERTOOLS_METRICS_NAMESPACE": "TimeSeries",
}


@pytest.fixture
def store(make_store: StoreFactory) -> Store:
    made = make_store("hybrid")
    # relative to the wall clock: the handler runs with the real one
    made.write_series("sensor-1", 12, 600_000)
    return made


def load_handler() -> ModuleType:
    sys.modules.pop("query.handler", None)
    return importlib.import_module("query.handler")


@pytest.fixture
def secret_arn(store: Store) -> str:
    return str(
        client("secretsmanager").create_secret(Name="query/cursor-key", SecretString="s3cr3t-" + "x" * 40)["ARN"]
    )


@pytest.fixture
def handler(monkeypatch: pytest.MonkeyPatch, secret_arn: str) -> Iterator[ModuleType]:
    for name, value in {**ENV, "CURSOR_SECRET_ARN": secret_arn}.items():
        monkeypatch.setenv(name, value)
    metrics.clear_metrics()
    module = load_handler()
    yield module
    sys.modules.pop("query.handler", None)
    metrics.clear_metrics()


def test_pages_follow_across_invocations_with_the_secret_fetched_once(
    handler: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    fetches: list[str] = []
    client("secretsmanager").meta.events.register(
        "before-parameter-build.secrets-manager.GetSecretValue",
        lambda params, **kwargs: fetches.append(params["VersionStage"]),
    )
    api = ApiClient(handler.handler)
    path = entity_path("sensor-1", "readings")
    params: dict[str, Any] = {"from_": format_ts(NOW - 4 * HOUR), "to": format_ts(NOW), "limit": 5}

    first = api.get(path, **params)
    second = api.get(path, **params, cursor=first.body["next_cursor"])
    third = api.get(path, **params, cursor=second.body["next_cursor"])

    assert [r.status for r in (first, second, third)] == [200, 200, 200]
    ids = [i["event_id"] for r in (first, second, third) for i in r.body["items"]]
    assert ids == [f"e{n:02d}" for n in range(12)]
    assert third.body["next_cursor"] is None
    # The current key, read once for the three pages (every cursor verified under it: the previous
    # key is read only for one that does not)
    assert fetches == ["AWSCURRENT"]
    emitted = [json.loads(line) for line in capsys.readouterr().out.splitlines() if '"_aws"' in line]
    reads = [blob for blob in emitted if "QueryCalls" in blob]
    assert [blob["route"] for blob in reads] == ["entity_readings"] * 3
    assert sum(blob["ItemsRead"][0] for blob in reads) >= 12


def test_a_range_past_the_limit_is_refused_naming_it(handler: ModuleType) -> None:
    reply = ApiClient(handler.handler).get(
        entity_path("sensor-1", "readings"), from_=format_ts(NOW - 32 * 24 * HOUR), to=format_ts(NOW)
    )

    assert reply.status == 400
    assert "at most 31d" in reply.body["error"]


def test_a_missing_cursor_secret_fails_the_cold_start_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, store: Store
) -> None:
    for name, value in ENV.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("CURSOR_SECRET_ARN", raising=False)
    monkeypatch.delenv("CURSOR_SECRET", raising=False)

    with pytest.raises(SettingsError, match="CURSOR_SECRET_ARN"):
        load_handler()
    sys.modules.pop("query.handler", None)


MALFORMED_EVENTS = [
    ({}, "httpMethod must be a string"),
    ([], "must be a JSON object, got list"),
    ({"httpMethod": None, "path": "/readings"}, "httpMethod must be a string"),
    ({"httpMethod": "GET", "path": 5}, "path must be a string"),
    ({"httpMethod": "GET", "path": "/readings", "queryStringParameters": {"from": 5}}, "queryStringParameters"),
    ({"httpMethod": "GET", "path": "/readings", "multiValueQueryStringParameters": {"from": None}}, "string lists"),
    ({"httpMethod": "GET", "path": "/readings", "headers": ["Accept"]}, "headers must be an object of strings"),
]


@pytest.mark.parametrize(("event", "reason"), MALFORMED_EVENTS, ids=lambda v: repr(v)[:40])
def test_an_event_api_gateway_never_sends_is_a_400_and_one_logged_error(
    handler: ModuleType, monkeypatch: pytest.MonkeyPatch, event: Any, reason: str
) -> None:
    # Given an event that is not a REST proxy event (a hand-made invocation)
    errors: list[str] = []
    monkeypatch.setattr(handler.logger, "error", lambda message, **_: errors.append(message))
    # When the handler gets it
    reply = handler.handler(event, FakeLambdaContext())
    # Then it answers with the API's error shape instead of raising inside the resolver
    assert reply["statusCode"] == 400
    body = json.loads(reply["body"])
    assert set(body) == {"error", "parameter"} and reason in body["error"]
    assert errors == ["not an API Gateway REST proxy event"]


_hostile_text = st.text(alphabet=st.characters(), max_size=30)  # lone surrogates, controls, anything
_json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | _hostile_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(_hostile_text, inner, max_size=3),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    path=st.sampled_from(["/readings", "/entities/sensor-1/readings", "/entities/sensor-1/latest", "/nope"])
    | _hostile_text.map(lambda t: "/entities/" + t + "/readings"),
    params=st.dictionaries(_hostile_text, _hostile_text, max_size=4),
    extra=st.dictionaries(
        st.sampled_from(["headers", "pathParameters", "requestContext", "body", "isBase64Encoded", "resource"]),
        _json_value,
        max_size=3,
    ),
)
def test_no_event_makes_the_handler_raise_or_answer_5xx(
    handler: ModuleType, path: str, params: dict[str, str], extra: dict[str, Any]
) -> None:
    """Property: whatever the event holds, the answer is a JSON reply with a 2xx or 4xx status."""
    event = {**rest_event(path, params), **extra}
    reply = handler.handler(event, FakeLambdaContext())
    assert 200 <= reply["statusCode"] < 500, reply
    body = json.loads(reply["body"])
    if reply["statusCode"] >= 400:
        assert set(body) == {"error", "parameter"}
