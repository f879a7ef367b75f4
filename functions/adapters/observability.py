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

from aws_lambda_powertools import Logger, Metrics

NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "TimeSeries")

logger = Logger()
metrics = Metrics(namespace=NAMESPACE)
