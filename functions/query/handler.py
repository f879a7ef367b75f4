"""Lambda entry point of the query API (``query.handler.handler``).

Settings are parsed at init, so a misconfigured function fails its init with the
variable named (with SnapStart, when the version is published); the
cursor-signing secret is fetched on first use and kept for ``CURSOR_KEY_TTL``.

The function runs with SnapStart (docs/decisions.md): this init runs once per
published version, and every cold start restores its snapshot. Before the
snapshot, :func:`prime` serves one request, so what is built on first use is
in the snapshot; after a restore the hooks (``adapters.snapstart``) reseed the
generators, close the pooled connections, renew the credentials and empty the
caches, so a restored copy's first request reads what a cold start's would.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping
from typing import Any, cast

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger, metrics
from adapters.secret_versions import read_secret
from adapters.snapstart import register_runtime_hooks
from query.api import create_app
from query.logic import QueryService
from query.settings import QuerySettings

#: Asked for by :func:`prime`: an id no producer sends (ids with a dot are valid, and this one is ours).
PRIMING_ENTITY = "snapstart.priming"


class _PrimingContext:
    """The Lambda context a request served before the snapshot is given: a timeout's worth of time."""

    aws_request_id = "snapstart-priming"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 20_000


def prime() -> None:
    """Serve one request before the snapshot (the last hour of :data:`PRIMING_ENTITY`, which has no
    readings) and read the cursor key once, so what Python, botocore and Powertools build on first
    use (the secret's client, each call's model and endpoint, the route's validation) is in the
    snapshot, not on a restored copy's first request. A restored copy forgets what was read."""
    now_ms = time.time_ns() // 1_000_000
    query = {"from": str(now_ms - 3_600_000), "to": str(now_ms)}
    event = {
        "resource": "/entities/{entity_id}/readings",
        "path": f"/entities/{PRIMING_ENTITY}/readings",
        "httpMethod": "GET",
        "headers": {},
        "multiValueHeaders": {},
        "queryStringParameters": query,
        "multiValueQueryStringParameters": {name: [value] for name, value in query.items()},
        "pathParameters": {"entity_id": PRIMING_ENTITY},
        "requestContext": {"requestId": _PrimingContext.aws_request_id, "stage": "snapstart"},
    }
    answer = app.resolve(event, cast("LambdaContext", _PrimingContext()))
    metrics.clear_metrics()  # the request's metrics are no one's
    if answer["statusCode"] != 200:
        raise RuntimeError(f"the priming request was answered {answer['statusCode']}: {answer['body'][:200]}")
    if SETTINGS.cursor_secret.secret_id is not None:
        read_secret(SETTINGS.cursor_secret.secret_id)


SETTINGS = QuerySettings.from_env()
app = create_app(QueryService.from_settings(SETTINGS))
register_runtime_hooks(prime=prime)
tune_collector()  # last: everything above is init


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    problem = proxy_event_problem(event)
    if problem is not None:
        logger.error("not an API Gateway REST proxy event", extra={"reason": problem})
        body = {"error": f"not an API Gateway REST proxy event: {problem}", "parameter": None}
        return {"statusCode": 400, "headers": {"Content-Type": "application/json"}, "body": json.dumps(body)}
    return app.resolve(event, context)


def proxy_event_problem(event: object) -> str | None:
    """What keeps ``event`` from being a REST proxy event the resolver can read, or None.

    API Gateway always sends these fields with these types; an event without
    them is a hand-made invocation, answered with a 400 instead of a traceback
    from inside the resolver.
    """
    if not isinstance(event, Mapping):
        return f"the event must be a JSON object, got {type(event).__name__}"
    for name in ("httpMethod", "path"):
        if not isinstance(event.get(name), str):
            return f"{name} must be a string"
    for name in ("headers", "queryStringParameters", "pathParameters"):
        value = event.get(name)
        if value is not None and not (isinstance(value, Mapping) and all(isinstance(v, str) for v in value.values())):
            return f"{name} must be an object of strings"
    for name in ("multiValueHeaders", "multiValueQueryStringParameters"):
        value = event.get(name)
        if value is not None and not (
            isinstance(value, Mapping)
            and all(isinstance(v, list) and all(isinstance(i, str) for i in v) for v in value.values())
        ):
            return f"{name} must be an object of string lists"
    return None
