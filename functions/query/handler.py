"""Lambda entry point of the query API (``query.handler.handler``).

Settings are parsed at cold start, so a misconfigured function fails its first
invocation with the variable named; the cursor-signing secret is fetched on
first use and kept for ``CURSOR_KEY_TTL``.

The function runs with SnapStart (docs/decisions.md): this init runs once per
published version, and every cold start restores its snapshot. The runtime hooks
(``adapters.snapstart``) reseed the generators, close the pooled connections,
renew the credentials and empty the caches, so a restored copy's first request
reads what a cold start's would.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger, metrics
from adapters.snapstart import register_runtime_hooks
from query.api import create_app
from query.logic import QueryService
from query.settings import QuerySettings

app = create_app(QueryService.from_settings(QuerySettings.from_env()))
register_runtime_hooks()
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
