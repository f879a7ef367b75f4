"""Lambda entry point of the compaction function (``compaction.handler.handler``), run on a schedule.

Thin: settings parsed at import (a bad environment fails the cold start naming the variable), one
call to the logic, its report as metrics. A run that stopped on an error raises it once its metrics
are out (the Errors alarm; the lag is reported all the same); the next run starts again from the
stored state, at the step that failed.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import observed
from adapters.retry import Deadline
from compaction.logic import CompactionRunner, emit
from compaction.settings import CompactionSettings

#: Time kept back from the invocation's remaining time to save the state and return.
MARGIN_MS = 5_000


def create_handler(runner: CompactionRunner) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The handler around ``runner``. Lambda's is made below from the environment; the local runtime
    makes its own around a runner on a clock of its own."""

    @observed
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        report = runner.run(Deadline.after_ms(context.get_remaining_time_in_millis() - MARGIN_MS))
        emit(report)
        if report.error is not None:
            raise report.error
        return report.summary()

    return handler


SETTINGS = CompactionSettings.from_env()
RUNNER = CompactionRunner.from_settings(SETTINGS)
handler = create_handler(RUNNER)
tune_collector()  # last: everything above is init
