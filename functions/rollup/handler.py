"""Lambda entry point of the rollup function (``rollup.handler.handler``), run every minute by EventBridge Scheduler.

Thin: settings parsed at import (a bad environment fails the cold start naming
the variable), one call to the logic, its report as metrics. A run that fails
raises (the Errors alarm); the next run starts again from the stored watermark.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger, metrics, tracer
from adapters.retry import Deadline
from rollup.logic import RollupRunner, emit
from rollup.settings import RollupSettings

SETTINGS = RollupSettings.from_env()
RUNNER = RollupRunner.from_settings(SETTINGS)
#: Time kept back from the invocation's remaining time to save the watermark and return.
MARGIN_MS = 5_000
tune_collector()  # last: everything above is init


@logger.inject_lambda_context(clear_state=True)
@tracer.capture_lambda_handler(capture_response=False)
@metrics.log_metrics(capture_cold_start_metric=True)
def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
    report = RUNNER.run(Deadline.after_ms(context.get_remaining_time_in_millis() - MARGIN_MS))
    emit(report)
    return report.summary()
