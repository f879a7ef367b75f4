"""Lambda entry point of the ingest function (``ingest.handler.handler``).

Thin on purpose: Powertools decorators, the event parsed once into typed records
(``ingest.kinesis_records.StreamRecord``), then the logic. The logic works the
whole batch at once (blocks hold readings of many records); Powertools'
``BatchProcessor`` then asks :meth:`BatchOutcome.settle` about each record and
builds the ``ReportBatchItemFailures`` response from the ones it raises for.
Settings are parsed at import, so a bad environment fails the cold start with
a message naming the variable.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.collector import tune_collector
from adapters.observability import logger, observed
from adapters.stream_events import NotAStreamEvent
from ingest.kinesis_records import parse_records
from ingest.logic import Ingestor
from ingest.settings import IngestSettings


def create_handler(ingestor: Ingestor) -> Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]:
    """The handler around ``ingestor``. Lambda's is made below from the environment; the local
    runtime makes its own around an Ingestor with a fault injector or its replayed clock."""
    # Partial failures are reported even when every record failed: Lambda then
    # retries from the first one, exactly as it would after an exception, but the
    # invocation is not counted as a function error and the metrics still flush.
    processor = BatchProcessor(event_type=EventType.KinesisDataStreams, raise_on_entire_batch_failure=False)

    @observed
    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        try:
            records = parse_records(event)
        except NotAStreamEvent as exc:
            logger.error("not a Kinesis stream event; nothing was ingested", extra={"reason": str(exc)})
            raise
        outcome = ingestor.ingest(records, context.get_remaining_time_in_millis())
        return process_partial_response(
            event=event, record_handler=outcome.settle, processor=processor, context=context
        )

    return handler


SETTINGS = IngestSettings.from_env()
INGESTOR = Ingestor.from_settings(SETTINGS)
handler = create_handler(INGESTOR)
tune_collector()  # last: everything above is init
