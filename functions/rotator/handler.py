"""Lambda entry point of the rotator (``rotator.handler.handler``), run by EventBridge Scheduler.

Thin on purpose: Powertools decorators, the event parsed into a request, one
call to the logic. Settings are parsed at import, so a bad environment fails
the cold start with a message naming the variable. The invocation fails only
when the event is malformed or nothing could be done at all (the tables could
not be listed); a run that did part of its work returns its summary, errors
included, and the next scheduled run finishes the rest (retrying at once,
against the same fault, would rarely help). One exception: a *build* run whose
table DynamoDB is still CREATING when its time is up fails, so that Lambda's
retries of the asynchronous invoke (two, a minute or two apart) wait for it
again and set it up as soon as it is ACTIVE; a scheduled run may not look at
that table for hours.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import metrics, observed
from rotator.logic import Rotator
from rotator.request import InvalidRequest, RotationRequest
from rotator.settings import RotatorSettings


class TablesStillCreating(RuntimeError):  # noqa: N818 - reads as the condition
    """A build run's tables were still CREATING at the end of its time: the invocation fails, to be retried."""


def create_handler(rotator: Rotator) -> Callable[[dict[str, Any], LambdaContext], dict[str, Any]]:
    """The handler around ``rotator``. Lambda's is made below from the environment; the local
    runtime makes its own around a Rotator whose Lambda client is its in-process mapping API."""

    @observed
    def handler(event: dict[str, Any], context: LambdaContext) -> dict[str, Any]:
        settings = rotator.settings
        try:
            request = RotationRequest.from_event(
                event, dry_run_default=settings.dry_run, allow_now_override=settings.allow_now_override
            )
        except InvalidRequest:
            metrics.add_metric(name="RotationRequestsRefused", unit=MetricUnit.Count, value=1)
            raise
        budget_ms = context.get_remaining_time_in_millis()
        if request.build:
            summary = rotator.build(request.build, now_ms=request.now, dry_run=request.dry_run, budget_ms=budget_ms)
            if summary.creating:
                raise TablesStillCreating(
                    f"still CREATING at the end of the run: {', '.join(summary.creating)}; Lambda retries the build"
                )
        else:
            summary = rotator.run(now_ms=request.now, dry_run=request.dry_run, budget_ms=budget_ms)
        return summary.to_dict()

    return handler


SETTINGS = RotatorSettings.from_env()
ROTATOR = Rotator(SETTINGS)
handler = create_handler(ROTATOR)
tune_collector()  # last: everything above is init
