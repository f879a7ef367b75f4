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

from collections.abc import Mapping
from typing import Any


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
