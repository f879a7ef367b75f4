"""The envelope of a Lambda stream event, checked before anything reads it.

Lambda's event source mappings always send ``{"Records": [...]}``; the partial
batch response names the records (a Kinesis record by its sequence number,
which ``ingest.kinesis_records`` checks as it parses each one). An event
without that shape was not sent by a mapping (a hand-made test invocation, a
wrong trigger), so there is nothing to report back record by record: the
handler logs one clear error and fails the invocation, instead of letting
Powertools trip over a missing key halfway through building a response.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.batch.types import PartialItemFailureResponse
from aws_lambda_powertools.utilities.typing import LambdaContext

from adapters.observability import logger, observed

StreamHandler = Callable[[dict[str, Any], LambdaContext], PartialItemFailureResponse]


class NotAStreamEvent(ValueError):  # noqa: N818 - reads as the condition
    """The event is not what a Lambda stream event source mapping sends."""


def stream_records(event: object) -> list[Any]:
    """``event["Records"]``. (DynamoDB stream records are judged one by one by the hot-key
    logic, which skips a malformed one; Kinesis records by ``ingest.kinesis_records``.)"""
    if not isinstance(event, Mapping):
        raise NotAStreamEvent(f"the event must be a JSON object with Records, got {type(event).__name__}")
    records = event.get("Records")
    if not isinstance(records, list):
        raise NotAStreamEvent("the event has no Records list")
    return records


def stream_handler(
    event_type: EventType,
    parse: Callable[[object], Sequence[Any]],
    work: Callable[[Sequence[Any], LambdaContext], Any],
    refused: str,
) -> StreamHandler:
    """A stream function's handler: ``parse`` the records (an event no mapping sent is logged as
    ``refused`` and raised), ``work`` them as one batch, and answer the partial batch response of the
    records its outcome's ``settle`` raises for. Every record failed is still a partial response: Lambda
    retries from the first either way, and the metrics still flush."""
    processor = BatchProcessor(event_type=event_type, raise_on_entire_batch_failure=False)

    @observed
    def handler(event: dict[str, Any], context: LambdaContext) -> PartialItemFailureResponse:
        try:
            records = parse(event)
        except NotAStreamEvent as exc:
            logger.error(refused, extra={"reason": str(exc)})
            raise
        outcome = work(records, context)
        return process_partial_response(
            event=event, record_handler=outcome.settle, processor=processor, context=context
        )

    return handler
