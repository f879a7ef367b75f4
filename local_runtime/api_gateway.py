"""A REST API (API Gateway, Lambda proxy integration) on loopback.

Every request under ``/<stage>/`` becomes an API Gateway REST proxy event
(payload version 1.0) for one function, the way a ``/{proxy+}`` resource with
``ANY`` delivers it, and the function's response becomes the HTTP response.
Routing is the function's business (Powertools' ``APIGatewayRestResolver``
resolves ``path`` itself), so the emulator matches nothing but the stage.

Faithful to API Gateway where a client can tell: ``path`` and the path
parameters arrive as sent, still percent-encoded (a REST API does not decode
them; an HTTP API would), so ``/entities/a%23b`` reaches a Powertools route as
``entity_id="a%23b"`` and the handler must unquote it; query parameters arrive
decoded; repeated headers and query parameters are in
``multiValue*`` with the last value in the single-valued map; a body that is
not UTF-8 arrives base64 with ``isBase64Encoded``; a handler that raises or
returns something that is not a proxy response is a 502
``{"message": "Internal server error"}``; one slower than the 29 s
integration timeout is a 504, sent at 29 s as API Gateway sends it, while the
function runs on (its result is then dropped, as Lambda's would be). Not emulated: authorizers and IAM/SigV4
(requests are not signed locally), usage plans and throttling, request
validation, custom domains, binary media type negotiation.
"""

from __future__ import annotations

import base64
import binascii
import json
import logging
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import KW_ONLY, dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from typing import Any
from urllib.parse import parse_qsl

from local_runtime.environment import ACCOUNT_ID, LoopbackServer
from local_runtime.functions import FunctionError, FunctionTimeoutError

_log = logging.getLogger(__name__)

#: API Gateway's maximum integration timeout for a REST API.
INTEGRATION_TIMEOUT_S = 29.0


@dataclass(frozen=True, slots=True)
class HttpRequest:
    method: str
    raw_path: str  # path and query as sent, still URL-encoded
    headers: list[tuple[str, str]]
    body: bytes
    source_ip: str
    host: str


@dataclass(frozen=True, slots=True)
class HttpResponse:
    status: int
    headers: list[tuple[str, str]]
    body: bytes


def proxy_event(request: HttpRequest, *, stage: str, request_id: str, now_ms: int) -> dict[str, Any] | None:
    """The REST proxy event for ``request``, or None when it is outside ``/<stage>``."""
    encoded_path, _, raw_query = request.raw_path.partition("?")
    prefix = f"/{stage}"
    if encoded_path != prefix and not encoded_path.startswith(prefix + "/"):
        return None
    path = encoded_path[len(prefix) :] or "/"

    single_headers: dict[str, str] = {}
    multi_headers: dict[str, list[str]] = {}
    for name, value in request.headers:
        single_headers[name] = value
        multi_headers.setdefault(name, []).append(value)

    multi_query: dict[str, list[str]] = {}
    for name, value in parse_qsl(raw_query, keep_blank_values=True):
        multi_query.setdefault(name, []).append(value)
    single_query = {name: values[-1] for name, values in multi_query.items()}

    body: str | None = None
    is_base64 = False
    if request.body:
        try:
            body = request.body.decode("utf-8")
        except UnicodeDecodeError:
            body = base64.b64encode(request.body).decode("ascii")
            is_base64 = True

    proxy = path.lstrip("/")
    resource = "/{proxy+}" if proxy else "/"
    user_agent = single_headers.get("User-Agent") or single_headers.get("user-agent")
    return {
        "resource": resource,
        "path": path,
        "httpMethod": request.method,
        "headers": single_headers or None,
        "multiValueHeaders": multi_headers or None,
        "queryStringParameters": single_query or None,
        "multiValueQueryStringParameters": multi_query or None,
        "pathParameters": {"proxy": proxy} if proxy else None,
        "stageVariables": None,
        "requestContext": {
            "accountId": ACCOUNT_ID,
            "apiId": "local",
            "domainName": request.host,
            "domainPrefix": request.host.split(".", 1)[0],
            "extendedRequestId": request_id,
            "httpMethod": request.method,
            "identity": {
                "accessKey": None,
                "accountId": None,
                "caller": None,
                "cognitoAuthenticationProvider": None,
                "cognitoAuthenticationType": None,
                "cognitoIdentityId": None,
                "cognitoIdentityPoolId": None,
                "principalOrgId": None,
                "sourceIp": request.source_ip,
                "user": None,
                "userAgent": user_agent,
                "userArn": None,
            },
            "path": f"{prefix}{path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTime": datetime.fromtimestamp(now_ms / 1000, UTC).strftime("%d/%b/%Y:%H:%M:%S +0000"),
            "requestTimeEpoch": now_ms,
            "resourceId": "local",
            "resourcePath": resource,
            "stage": stage,
        },
        "body": body,
        "isBase64Encoded": is_base64,
    }


def http_response(result: Any, *, request_id: str) -> HttpResponse:
    """The HTTP response for a proxy integration's result; 502 when it is not a valid proxy response."""
    if not isinstance(result, Mapping) or not isinstance(result.get("statusCode"), int):
        _log.error("malformed Lambda proxy response: %r", result)
        return gateway_error(HTTPStatus.BAD_GATEWAY, "Internal server error", request_id)
    status = int(result["statusCode"])
    single = result.get("headers") or {}
    multi = result.get("multiValueHeaders") or {}
    if not isinstance(single, Mapping) or not isinstance(multi, Mapping):
        return gateway_error(HTTPStatus.BAD_GATEWAY, "Internal server error", request_id)
    # A header named in both maps is sent with its multi-value list only.
    headers = [
        (str(n), str(v)) for n, values in multi.items() for v in (values if isinstance(values, list) else [values])
    ]
    in_multi = {str(n).lower() for n in multi}
    headers += [(str(n), str(v)) for n, v in single.items() if str(n).lower() not in in_multi]
    raw_body = result.get("body")
    if raw_body is None:
        body = b""
    elif result.get("isBase64Encoded"):
        try:
            body = base64.b64decode(str(raw_body), validate=True)
        except (binascii.Error, ValueError):
            return gateway_error(HTTPStatus.BAD_GATEWAY, "Internal server error", request_id)
    else:
        body = str(raw_body).encode("utf-8")
    headers.append(("x-amzn-RequestId", request_id))
    return HttpResponse(status, headers, body)


def gateway_error(status: HTTPStatus, message: str, request_id: str) -> HttpResponse:
    body = json.dumps({"message": message}).encode("utf-8")
    return HttpResponse(
        int(status),
        [("Content-Type", "application/json"), ("x-amzn-RequestId", request_id), ("x-amzn-ErrorType", status.phrase)],
        body,
    )


@dataclass(eq=False)
class RestApi:
    """``start()`` serves ``invoke`` (an event -> response callable) on ``http://127.0.0.1:<port>/<stage>``."""

    invoke: Callable[[dict[str, Any]], Any]
    _: KW_ONLY
    stage: str
    port: int = 0
    integration_timeout_s: float = INTEGRATION_TIMEOUT_S
    latencies_ms: list[float] = field(default_factory=list, init=False)
    _server: LoopbackServer | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def base_url(self) -> str:
        if self._server is None:
            raise RuntimeError("the REST API is not running")
        return f"{self._server.url}/{self.stage}"

    def start(self) -> str:
        if self._server is None:
            self._server = LoopbackServer(self._handle, port=self.port, name="rest-api")
        return self.base_url

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is not None:
            server.stop()

    def _handle(self, http: BaseHTTPRequestHandler) -> None:
        request_id = str(uuid.uuid4())
        length = int(http.headers.get("Content-Length") or 0)
        body = http.rfile.read(length) if length > 0 else b""
        request = HttpRequest(
            method=http.command,
            raw_path=http.path,
            headers=list(http.headers.items()),
            body=body,
            source_ip=http.client_address[0],
            host=http.headers.get("Host", ""),
        )
        started = time.monotonic()
        event = proxy_event(request, stage=self.stage, request_id=request_id, now_ms=int(time.time() * 1000))
        if event is None:
            response = gateway_error(
                HTTPStatus.NOT_FOUND, f"Not found: the API is served under /{self.stage}/", request_id
            )
        else:
            response = self._call(event, request_id, started)
        with self._lock:
            self.latencies_ms.append((time.monotonic() - started) * 1000)
        http.send_response(response.status)
        has_length = False
        for name, value in response.headers:
            if name.lower() == "content-length":
                has_length = True
            if name.lower() not in ("connection", "transfer-encoding"):
                http.send_header(name, value)
        if not has_length:
            http.send_header("Content-Length", str(len(response.body)))
        http.end_headers()
        if http.command != "HEAD" and response.body:
            http.wfile.write(response.body)

    def _call(self, event: dict[str, Any], request_id: str, started: float) -> HttpResponse:
        # The function runs in its own thread so the gateway can answer at its
        # timeout whatever the function is doing, as API Gateway does.
        outcome: Future[Any] = Future()

        def run() -> None:
            try:
                outcome.set_result(self.invoke(event))
            except BaseException as exc:  # handed to the request thread, raised there
                outcome.set_exception(exc)

        threading.Thread(target=run, name=f"invoke-{request_id[:8]}", daemon=True).start()
        try:
            result = outcome.result(timeout=max(0.0, self.integration_timeout_s - (time.monotonic() - started)))
        except FunctionTimeoutError:
            return gateway_error(HTTPStatus.GATEWAY_TIMEOUT, "Endpoint request timed out", request_id)
        except FunctionError as error:
            _log.error("the API function failed: %s", error)
            return gateway_error(HTTPStatus.BAD_GATEWAY, "Internal server error", request_id)
        except TimeoutError:  # the gateway's own timeout (FunctionTimeoutError is not one)
            _log.warning("the API function passed the %.1f s integration timeout: 504", self.integration_timeout_s)
            return gateway_error(HTTPStatus.GATEWAY_TIMEOUT, "Endpoint request timed out", request_id)
        return http_response(result, request_id=request_id)
