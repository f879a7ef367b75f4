"""Lambda entry point of the rollup function (``rollup.handler.handler``), run every minute by EventBridge Scheduler.

Thin: settings parsed at import (a bad environment fails the cold start naming
the variable), one call to the logic, its report as metrics. A run that fails
raises (the Errors alarm); the next run starts again from the stored watermark.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import observed
from adapters.retry import Deadline
from rollup.logic import RollupRunner, emit
from rollup.settings import RollupSettings

#: Time kept back from the invocation's remaining time to save the watermark and return.
MARGIN_MS = 5_000


def create_handler(runner: RollupRunner) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The handler around ``runner``. Lambda's is made below from the environment; the local
    runtime makes its own around a runner on a clock ahead of the wall clock (compressed time)."""

    @observed
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        report = runner.run(Deadline.after_ms(context.get_remaining_time_in_millis() - MARGIN_MS))
        emit(report)
        return report.summary()

    return handler


SETTINGS = RollupSettings.from_env()
RUNNER = RollupRunner.from_settings(SETTINGS)
handler = create_handler(RUNNER)
tune_collector()  # last: everything above is init
