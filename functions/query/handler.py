"""Lambda entry point of the query API (``query.handler.handler``).

Settings are parsed at cold start, so a misconfigured function fails its first
invocation with the variable named; the cursor-signing secret is fetched on
first use and kept for the container's life.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.logging import correlation_paths
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.observability import logger, metrics, tracer
from query.api import create_app
from query.logic import QueryService
from query.settings import QuerySettings

app = create_app(QueryService.from_settings(QuerySettings.from_env()))


@logger.inject_lambda_context(correlation_id_path=correlation_paths.API_GATEWAY_REST)
@tracer.capture_lambda_handler
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    return app.resolve(event, context)
