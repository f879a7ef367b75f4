"""Powertools Logger and Metrics, set up once for every module to share.

Each Lambda sets ``POWERTOOLS_SERVICE_NAME`` (ingest, query, hotkeys, rotator);
the metrics namespace comes from ``POWERTOOLS_METRICS_NAMESPACE`` and defaults
to ``TimeSeries``. Logic modules may import from here; this module imports no
handler and no logic.

No tracer: X-Ray traces come from Lambda's active tracing alone, with no SDK in
the function, so a trace shows each invocation (and its init or restore) but not
the function's calls to DynamoDB, Kinesis or SQS; their counts are in the metrics
and log lines (docs/decisions.md, tracing).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar, cast

from aws_lambda_powertools import Logger, Metrics

NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "TimeSeries")

logger = Logger()
metrics = Metrics(namespace=NAMESPACE)

_Handler = TypeVar("_Handler", bound=Callable[..., Any])


def observed(handler: _Handler) -> _Handler:
    """``handler`` as every function's is decorated but the query's (which logs its request's correlation
    id) and the cursor rotation's (no metrics): its log lines carry the invocation's Lambda context,
    cleared between invocations, and its metrics are flushed when it returns or raises, a cold start
    counted."""
    wrapped = logger.inject_lambda_context(clear_state=True)(
        metrics.log_metrics(capture_cold_start_metric=True)(handler)
    )
    # Powertools' decorators are untyped: the handler is the function given, as declared.
    return cast("_Handler", wrapped)
