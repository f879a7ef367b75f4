"""Realistic API Gateway REST (v1, Lambda proxy) events and a fake Lambda context, and the query
service the unit tests put behind them (over in-memory tables).

REST APIs hand the Lambda the path still percent-encoded and the query string
decoded, with repeated parameters in ``multiValueQueryStringParameters``; the
builders below do the same, so the tests see what production sees.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote, unquote

from adapters.observability import metrics
from adapters.shard_map_source import StaticShardMap
from doubles.lambda_context import FakeLambdaContext
from keydesign import Layout, ShardMap
from query.cursor import CursorCodec
from query.logic import QueryService
from query.settings import QueryLimits

ParamValue = str | int | bool | Sequence[str]


def memory_service(
    layout: Layout,
    shard_map: ShardMap,
    reader: Any,
    *,
    now_ms: int,
    limits: QueryLimits | None = None,
    **options: Any,
) -> QueryService:
    """The query service over ``reader``'s tables, planned with ``shard_map``, its cursors signed with a
    fixed key, its clock stopped at ``now_ms``; ``options``: the service's other parts (rollups, ...)."""
    return QueryService(
        layout=layout,
        shard_maps=StaticShardMap(shard_map),
        reader=reader,
        cursors=CursorCodec(lambda: b"k" * 40),
        limits=limits or QueryLimits(),
        clock_ms=lambda: now_ms,
        **options,
    )


def entity_path(entity_id: str, tail: str) -> str:
    """``/entities/<id>/<tail>`` with the id percent-encoded as a client must send it."""
    return f"/entities/{quote(entity_id, safe='')}/{tail}"


def _text(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def rest_event(path: str, params: Mapping[str, ParamValue] | None = None, *, method: str = "GET") -> dict[str, Any]:
    """The proxy event API Gateway sends for ``method path?params`` on stage ``prod``."""
    multi: dict[str, list[str]] = {}
    for name, value in (params or {}).items():
        multi[name] = [_text(value)] if isinstance(value, str | int | bool) else [str(v) for v in value]
    single = {name: values[-1] for name, values in multi.items()}
    segments = path.strip("/").split("/")
    path_parameters = None
    resource = path
    if len(segments) == 3 and segments[0] == "entities":
        path_parameters = {"entity_id": unquote(segments[1])}
        resource = f"/entities/{{entity_id}}/{segments[2]}"
    headers = {
        "Accept": "application/json",
        "Host": "abc123.execute-api.eu-west-1.amazonaws.com",
        "User-Agent": "pytest",
        "X-Forwarded-For": "203.0.113.9",
        "X-Forwarded-Proto": "https",
    }
    request_id = str(uuid.uuid4())
    return {
        "resource": resource,
        "path": path,
        "httpMethod": method,
        "headers": headers,
        "multiValueHeaders": {name: [value] for name, value in headers.items()},
        "queryStringParameters": single or None,
        "multiValueQueryStringParameters": multi or None,
        "pathParameters": path_parameters,
        "stageVariables": None,
        "requestContext": {
            "accountId": "123456789012",
            "apiId": "abc123",
            "domainName": "abc123.execute-api.eu-west-1.amazonaws.com",
            "extendedRequestId": request_id,
            "httpMethod": method,
            "identity": {"sourceIp": "203.0.113.9", "userAgent": "pytest", "userArn": None},
            "path": f"/prod{path}",
            "protocol": "HTTP/1.1",
            "requestId": request_id,
            "requestTimeEpoch": 1_795_000_000_000,
            "resourceId": "res123",
            "resourcePath": resource,
            "stage": "prod",
        },
        "body": None,
        "isBase64Encoded": False,
    }


@dataclass
class Reply:
    status: int
    body: Any
    headers: Mapping[str, str]


class ApiClient:
    """Sends events to a resolver (or handler) and decodes the replies."""

    def __init__(self, resolve: Callable[[dict[str, Any], Any], dict[str, Any]]) -> None:
        self._resolve = resolve

    def send(self, event: dict[str, Any]) -> Reply:
        try:
            raw = self._resolve(event, FakeLambdaContext())
        finally:
            # One invocation, one metrics flush: the resolver alone never flushes.
            metrics.clear_metrics()
        body = raw.get("body")
        headers = dict(raw.get("headers") or {})
        headers.update({name: values[-1] for name, values in (raw.get("multiValueHeaders") or {}).items()})
        return Reply(raw["statusCode"], json.loads(body) if body else None, headers)

    def get(self, path: str, **params: ParamValue) -> Reply:
        # 'from' is a Python keyword: accept from_ too.
        if "from_" in params:
            params["from"] = params.pop("from_")
        return self.send(rest_event(path, params))
