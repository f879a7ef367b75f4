"""Powertools Logger, Tracer and Metrics, set up once for every module to share.

Each Lambda sets ``POWERTOOLS_SERVICE_NAME`` (ingest, query, hotkeys, rotator);
the metrics namespace comes from ``POWERTOOLS_METRICS_NAMESPACE`` and defaults
to ``TimeSeries``. Logic modules may import from here; this module imports no
handler and no logic.
"""

from __future__ import annotations

import os

from aws_lambda_powertools import Logger, Metrics, Tracer

NAMESPACE = os.environ.get("POWERTOOLS_METRICS_NAMESPACE", "TimeSeries")

logger = Logger()
# Only botocore is patched: every AWS call goes through it, and patching all (the default) imports
# requests and the other libraries the X-Ray SDK can patch, at cold start, for nothing.
tracer = Tracer(patch_modules=("botocore",))
metrics = Metrics(namespace=NAMESPACE)
