"""HTTP requests become REST proxy events (v1.0) and proxy responses become HTTP responses."""

from __future__ import annotations

import base64
import json
from http import HTTPStatus
from typing import Any

import pytest

from local_runtime.api_gateway import HttpRequest, gateway_error, http_response, proxy_event
from tests.unit.local_runtime import tiny_api

STAGE = "v1"
NOW_MS = 1_795_333_000_000


def request(
    raw_path: str, method: str = "GET", body: bytes = b"", headers: list[tuple[str, str]] | None = None
) -> HttpRequest:
    return HttpRequest(
        method=method,
        raw_path=raw_path,
        headers=headers or [("Host", "127.0.0.1:8080"), ("User-Agent", "curl/8")],
        body=body,
        source_ip="127.0.0.1",
        host="127.0.0.1:8080",
    )


def event_for(raw_path: str, **kwargs: Any) -> dict[str, Any]:
    event = proxy_event(request(raw_path, **kwargs), stage=STAGE, request_id="req-1", now_ms=NOW_MS)
    assert event is not None
    return event


def test_the_event_has_the_rest_proxy_shape() -> None:
    event = event_for("/v1/entities/sensor-1/readings?from=2026-11-22T00:00:00Z&measures=temp&measures=rh")
    assert event["resource"] == "/{proxy+}"
    assert event["path"] == "/entities/sensor-1/readings"
    assert event["httpMethod"] == "GET"
    assert event["pathParameters"] == {"proxy": "entities/sensor-1/readings"}
    assert event["queryStringParameters"] == {"from": "2026-11-22T00:00:00Z", "measures": "rh"}
    assert event["multiValueQueryStringParameters"] == {"from": ["2026-11-22T00:00:00Z"], "measures": ["temp", "rh"]}
    assert event["headers"]["User-Agent"] == "curl/8"
    assert event["multiValueHeaders"]["Host"] == ["127.0.0.1:8080"]
    context = event["requestContext"]
    assert (context["stage"], context["requestId"], context["path"], context["httpMethod"]) == (
        STAGE,
        "req-1",
        "/v1/entities/sensor-1/readings",
        "GET",
    )
    assert context["identity"]["sourceIp"] == "127.0.0.1"
    assert context["requestTimeEpoch"] == NOW_MS
    assert event["body"] is None and event["isBase64Encoded"] is False


def test_the_path_stays_encoded_and_the_query_is_decoded_as_a_rest_api_delivers_them() -> None:
    event = event_for("/v1/entities/plant%207%23a%C3%A9/readings?from=a%2Bb&note=x+y")
    assert event["path"] == "/entities/plant%207%23a%C3%A9/readings"
    assert event["pathParameters"] == {"proxy": "entities/plant%207%23a%C3%A9/readings"}
    assert event["requestContext"]["path"] == "/v1/entities/plant%207%23a%C3%A9/readings"
    assert event["queryStringParameters"] == {"from": "a+b", "note": "x y"}


def test_no_query_string_and_the_root_path() -> None:
    event = event_for("/v1")
    assert (event["path"], event["resource"], event["pathParameters"]) == ("/", "/", None)
    assert event["queryStringParameters"] is None and event["multiValueQueryStringParameters"] is None


@pytest.mark.parametrize("path", ["/", "/v2/entities", "/v1x/entities", "/entities/v1"])
def test_a_request_outside_the_stage_is_not_an_event(path: str) -> None:
    assert proxy_event(request(path), stage=STAGE, request_id="r", now_ms=NOW_MS) is None


def test_a_body_that_is_not_utf8_arrives_base64() -> None:
    event = event_for("/v1/echo", method="POST", body=b"\xff\x00")
    assert event["isBase64Encoded"] is True
    assert base64.b64decode(event["body"]) == b"\xff\x00"
    text = event_for("/v1/echo", method="POST", body=b'{"a": 1}')
    assert (text["body"], text["isBase64Encoded"]) == ('{"a": 1}', False)


def test_a_powertools_app_routes_the_events() -> None:
    # Given the tiny Powertools app, When it resolves an event built from a URL with encoded segments
    response = tiny_api.handler(event_for("/v1/entities/plant%207%23a/readings?from=x&measures=a&measures=b"), None)
    # Then the route matched, with the path parameter as sent (the app decodes it) and the query parameters
    assert response["statusCode"] == 200
    assert json.loads(response["body"]) == {
        "entity_id": "plant 7#a",
        "raw_entity_id": "plant%207%23a",
        "from": "x",
        "measures": ["a", "b"],
        "path": "/entities/plant%207%23a/readings",
    }
    # And an unknown route is Powertools' 404
    assert tiny_api.handler(event_for("/v1/nowhere"), None)["statusCode"] == 404


def test_a_proxy_response_becomes_an_http_response() -> None:
    response = http_response(
        {
            "statusCode": 201,
            "headers": {"Content-Type": "application/json", "X-One": "1"},
            "multiValueHeaders": {"Set-Cookie": ["a=1", "b=2"], "X-One": ["1"]},
            "body": '{"ok": true}',
            "isBase64Encoded": False,
        },
        request_id="req-9",
    )
    assert response.status == 201
    assert response.body == b'{"ok": true}'
    assert ("Set-Cookie", "a=1") in response.headers and ("Set-Cookie", "b=2") in response.headers
    assert [h for h in response.headers if h[0] == "X-One"] == [("X-One", "1")]
    assert ("Content-Type", "application/json") in response.headers
    assert ("x-amzn-RequestId", "req-9") in response.headers


def test_a_base64_body_is_decoded() -> None:
    body = base64.b64encode(b"\x00\xffbin").decode()
    response = http_response({"statusCode": 200, "body": body, "isBase64Encoded": True}, request_id="r")
    assert response.body == b"\x00\xffbin"


@pytest.mark.parametrize(
    "result",
    [
        None,
        "ok",
        {"body": "no status"},
        {"statusCode": "200"},
        {"statusCode": 200, "body": "%%%", "isBase64Encoded": True},
    ],
    ids=["none", "string", "no-status", "status-not-int", "bad-base64"],
)
def test_a_malformed_proxy_response_is_a_502(result: Any) -> None:
    response = http_response(result, request_id="r")
    assert response.status == HTTPStatus.BAD_GATEWAY
    assert json.loads(response.body) == {"message": "Internal server error"}


def test_gateway_errors_are_json_with_the_request_id() -> None:
    error = gateway_error(HTTPStatus.GATEWAY_TIMEOUT, "Endpoint request timed out", "r-1")
    assert error.status == 504
    assert json.loads(error.body) == {"message": "Endpoint request timed out"}
    assert ("x-amzn-RequestId", "r-1") in error.headers
