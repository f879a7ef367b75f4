"""The on-failure record a stream mapping sends for a batch it gave up on, parsed.

Lambda's record (SQS destination) holds ``requestContext`` (the function and
the condition: ``RetryAttemptsExhausted``, ``RecordAgeExceeded``...), a
``timestamp``, and ``KinesisBatchInfo`` or ``DDBStreamBatchInfo``: the stream,
the shard, the first and last sequence numbers, the batch size and the
arrival times of its first and last records. A body this module cannot read is
reported as such and never deleted.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any, Literal

from keydesign import InvalidInput, parse_timestamp

Source = Literal["kinesis", "dynamodb"]
_BATCH_INFO: dict[str, Source] = {"KinesisBatchInfo": "kinesis", "DDBStreamBatchInfo": "dynamodb"}


@dataclass(frozen=True, slots=True)
class FailedBatch:
    """One message of a failure queue: the batch it names, or why it cannot be read."""

    message_id: str
    receipt_handle: str
    source: Source | None = None
    stream_arn: str = ""
    shard_id: str = ""
    first_sequence: str = ""
    last_sequence: str = ""
    batch_size: int = 0
    first_arrival_ms: int | None = None
    last_arrival_ms: int | None = None
    function_arn: str = ""
    condition: str = ""
    failed_at: str = ""
    #: Why the message cannot be replayed (not JSON, no batch info...); None when it can.
    unreadable: str | None = None

    @classmethod
    def parse(cls, message: Mapping[str, Any]) -> FailedBatch:
        message_id, handle = str(message.get("MessageId", "")), str(message.get("ReceiptHandle", ""))
        try:
            body = json.loads(message.get("Body") or "")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(message_id, handle, unreadable="the body is not a JSON object")
        found = [(key, source) for key, source in _BATCH_INFO.items() if isinstance(body.get(key), dict)]
        if len(found) != 1:
            return cls(message_id, handle, unreadable="the body holds no KinesisBatchInfo or DDBStreamBatchInfo")
        key, source = found[0]
        info: dict[str, Any] = body[key]
        found_context = body.get("requestContext")
        context: dict[str, Any] = found_context if isinstance(found_context, dict) else {}
        first, last = str(info.get("startSequenceNumber", "")), str(info.get("endSequenceNumber", ""))
        if not (first.isdigit() and last.isdigit() and int(first) <= int(last)):
            return cls(message_id, handle, source, unreadable=f"{key} names no sequence range ({first!r} to {last!r})")
        if not info.get("shardId") or not info.get("streamArn"):
            return cls(message_id, handle, source, unreadable=f"{key} names no stream or shard")
        return cls(
            message_id=message_id,
            receipt_handle=handle,
            source=source,
            stream_arn=str(info["streamArn"]),
            shard_id=str(info["shardId"]),
            first_sequence=first,
            last_sequence=last,
            batch_size=int(info.get("batchSize") or 0),
            first_arrival_ms=_time(info.get("approximateArrivalOfFirstRecord")),
            last_arrival_ms=_time(info.get("approximateArrivalOfLastRecord")),
            function_arn=str(context.get("functionArn", "")),
            condition=str(context.get("condition", "")),
            failed_at=str(body.get("timestamp", "")),
        )

    @property
    def range(self) -> str:
        return f"{self.shard_id} {self.first_sequence}..{self.last_sequence}"

    def as_dict(self) -> dict[str, Any]:
        """Every field but the receipt handle and the arrival times."""
        hidden = ("receipt_handle", "first_arrival_ms", "last_arrival_ms")
        return {name: value for name, value in asdict(self).items() if name not in hidden}


def _time(value: object) -> int | None:
    if not isinstance(value, str):
        return None
    try:
        return parse_timestamp(value, "time")
    except InvalidInput:
        return None
