"""HTTP on loopback, through the REST API emulator, to a Powertools app and back."""

from __future__ import annotations

import http.client
import json
import threading
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

import pytest

from local_runtime.api_gateway import RestApi
from local_runtime.functions import FunctionSpec, LocalFunction
from tests.unit.local_runtime import tiny_api

pytestmark = pytest.mark.integration

TINY_API = "tests.unit.local_runtime.tiny_api.handler"


def call(
    base_url: str, method: str, path: str, body: bytes | None = None, headers: dict[str, str] | None = None
) -> tuple[int, dict[str, str], bytes]:
    parts = urlsplit(base_url)
    assert parts.hostname == "127.0.0.1"
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
    try:
        connection.request(method, parts.path + path, body=body, headers=headers or {})
        response = connection.getresponse()
        return response.status, {k.lower(): v for k, v in response.getheaders()}, response.read()
    finally:
        connection.close()


@pytest.fixture
def api() -> Iterator[RestApi]:
    function = LocalFunction(FunctionSpec(name="tiny", handler=TINY_API, timeout_s=5), handler=tiny_api.handler)
    server = RestApi(function.invoke, stage="v1")
    server.start()
    yield server
    server.stop()


def test_a_route_with_path_and_query_parameters(api: RestApi) -> None:
    status, headers, body = call(
        api.base_url, "GET", "/entities/plant%207%23a/readings?from=2026-11-22&measures=t&measures=rh"
    )
    assert status == 200
    assert headers["content-type"] == "application/json"
    assert "x-amzn-requestid" in headers
    assert json.loads(body) == {
        "entity_id": "plant 7#a",
        "raw_entity_id": "plant%207%23a",
        "from": "2026-11-22",
        "measures": ["t", "rh"],
        "path": "/entities/plant%207%23a/readings",
    }


def test_an_unknown_route_is_the_apps_404_and_a_path_outside_the_stage_the_gateways(api: RestApi) -> None:
    status, _, body = call(api.base_url, "GET", "/nowhere")
    assert status == 404
    assert json.loads(body)["message"] == "Not found"
    root = api.base_url.rsplit("/", 1)[0]
    status, _, body = call(root, "GET", "/entities/x/readings")
    assert status == 404
    assert "/v1/" in json.loads(body)["message"]


def test_a_json_body_goes_in_and_a_binary_body_comes_out(api: RestApi) -> None:
    status, _, body = call(
        api.base_url, "POST", "/echo", body=b'{"a": [1, 2]}', headers={"Content-Type": "application/json"}
    )
    assert (status, json.loads(body)) == (200, {"json": {"a": [1, 2]}, "content_type": "application/json"})
    status, headers, body = call(api.base_url, "GET", "/bytes")
    assert (status, body) == (200, b"\x00\xffbin")
    assert headers["content-length"] == "5"


def test_a_handler_that_raises_is_a_502(api: RestApi) -> None:
    status, _, body = call(api.base_url, "GET", "/boom")
    assert status == 502
    assert json.loads(body) == {"message": "Internal server error"}


def test_head_returns_headers_only(api: RestApi) -> None:
    status, headers, body = call(api.base_url, "HEAD", "/entities/x/readings")
    # Powertools has no HEAD route: its 404, without a body
    assert status == 404 and body == b""
    assert int(headers["content-length"]) > 0


def test_concurrent_requests_are_all_answered(api: RestApi) -> None:
    results: list[int] = []
    lock = threading.Lock()

    def one(n: int) -> None:
        status, _, _ = call(api.base_url, "GET", f"/entities/s-{n}/readings")
        with lock:
            results.append(status)

    threads = [threading.Thread(target=one, args=(n,)) for n in range(16)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert results == [200] * 16
    assert len(api.latencies_ms) == 16


def test_the_api_plugs_into_the_running_system(running: Any) -> None:
    # Given the running system, When a function is loaded from its handler path and served
    system = running()
    function = system.functions.load(FunctionSpec(name="query", handler=TINY_API, environment={}))
    base_url = system.serve_api(function)
    # Then the endpoints show the API under the configured stage, and requests reach the function
    assert system.endpoints.api_url == base_url
    assert base_url.startswith("http://127.0.0.1:") and base_url.endswith(f"/{system.config.api_stage}")
    status, _, body = call(base_url, "GET", "/entities/sensor-alpha-001/readings")
    assert status == 200 and json.loads(body)["entity_id"] == "sensor-alpha-001"
    assert system.stats()["functions"]["query"]["invocations"] == 1
    system.stop()
    with pytest.raises(OSError):
        call(base_url, "GET", "/entities/x/readings")


def test_stop_closes_the_port(api: RestApi) -> None:
    url = api.base_url
    api.stop()
    with pytest.raises(OSError):
        call(url, "GET", "/entities/x/readings")


def test_a_slow_function_is_a_504_sent_at_the_integration_timeout_not_when_it_ends() -> None:
    # Given a function that takes 3 s behind a gateway whose integration timeout is 0.3 s
    finished = threading.Event()

    def slow(event: dict[str, Any]) -> dict[str, Any]:
        finished.wait(3.0)
        return {"statusCode": 200, "body": "late"}

    server = RestApi(slow, stage="v1", integration_timeout_s=0.3)
    server.start()
    try:
        # When a client calls it
        started = time.monotonic()
        status, _, body = call(server.base_url, "GET", "/slow")
        elapsed = time.monotonic() - started
    finally:
        finished.set()
        server.stop()

    # Then the 504 comes at the timeout, as API Gateway sends it
    assert status == 504
    assert json.loads(body) == {"message": "Endpoint request timed out"}
    assert 0.3 <= elapsed < 1.5
