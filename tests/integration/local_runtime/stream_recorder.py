"""A stand-in for the hot-key handler: Powertools' batch processor over DynamoDB stream events.

It records every change it processes and fails, once, the first change of each of the first three batches
that hold more than one, so the partial batch response (retry from that sequence number) is exercised with
real stream records and the changes after the failure are always delivered again.
"""

from __future__ import annotations

from typing import Any

from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from tests.integration.local_runtime import recordings

PROCESSOR = BatchProcessor(event_type=EventType.DynamoDBStreams, raise_on_entire_batch_failure=False)


def record_handler(record: DynamoDBRecord) -> None:
    assert record.dynamodb is not None
    keys = record.dynamodb.keys or {}
    sk = str(keys["sk"])
    with recordings.LOCK:
        if sk in recordings.TO_FAIL and sk not in recordings.FAILED_ONCE:
            recordings.FAILED_ONCE.add(sk)
            raise RuntimeError(f"failing {sk} once")
        recordings.SEEN.append(
            {
                "pk": str(keys["pk"]),
                "sk": sk,
                "event": record.event_name.name if record.event_name else None,
                "size_bytes": record.dynamodb.size_bytes,
                "created": record.dynamodb.approximate_creation_date_time,
                "source": record.event_source_arn,
                "region": record.aws_region,
            }
        )


def handler(event: dict[str, Any], context: Any) -> Any:
    records = event["Records"]
    with recordings.LOCK:
        if len(records) > 1 and len(recordings.TO_FAIL) < 3:
            recordings.TO_FAIL.add(str(records[0]["dynamodb"]["Keys"]["sk"]["S"]))
    return process_partial_response(event=event, record_handler=record_handler, processor=PROCESSOR, context=context)
