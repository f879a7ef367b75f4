"""Lambda entry point of the hot-key function (``hotkeys.handler.handler``).

Triggered by the readings table's DynamoDB stream. Thin on purpose: Powertools
decorators, then the logic. The logic works the whole batch at once (its load
is stored run by run, not record by record);
Powertools' ``BatchProcessor`` then asks :meth:`BatchOutcome.settle` about each
record and builds the ``ReportBatchItemFailures`` response from the ones whose
load could not be counted. Settings are parsed at import, so a bad environment
fails the cold start with a message naming the variable.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger, observed
from adapters.stream_events import NotAStreamEvent, stream_records
from hotkeys.logic import HotKeyMonitor
from hotkeys.settings import HotKeySettings

SETTINGS = HotKeySettings.from_env()
MONITOR = HotKeyMonitor(SETTINGS)
# Every record failed is still a partial response, not an exception: Lambda
# retries from the first failed record either way, and the metrics still flush.
PROCESSOR = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)
tune_collector()  # last: everything above is init


@observed
def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
    try:
        records = stream_records(event)
    except NotAStreamEvent as exc:
        logger.error("not a DynamoDB stream event; no load was counted", extra={"reason": str(exc)})
        raise
    outcome = MONITOR.process(records)
    return process_partial_response(event=event, record_handler=outcome.settle, processor=PROCESSOR, context=context)
