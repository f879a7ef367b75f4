"""The envelope of a Lambda stream event, checked before anything reads it.

Lambda's event source mappings always send ``{"Records": [...]}`` with a
sequence number in every record; the partial batch response names records by
it. An event without that shape was not sent by a mapping (a hand-made test
invocation, a wrong trigger), so there is nothing to report back record by
record: the handler logs one clear error and fails the invocation, instead of
letting Powertools trip over a missing key halfway through building a response.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


class NotAStreamEvent(ValueError):  # noqa: N818 - reads as the condition
    """The event is not what a Lambda stream event source mapping sends."""


def stream_records(event: object, *, sequence: tuple[str, str] | None = None) -> list[Any]:
    """``event["Records"]``; with ``sequence`` (``("kinesis", "sequenceNumber")``), each
    record is checked to carry ``record[body][name]`` as a string, which the partial batch
    response needs. (DynamoDB stream records are judged one by one by the hot-key logic,
    which skips a malformed one, so that handler checks only the envelope.)
    """
    if not isinstance(event, Mapping):
        raise NotAStreamEvent(f"the event must be a JSON object with Records, got {type(event).__name__}")
    records = event.get("Records")
    if not isinstance(records, list):
        raise NotAStreamEvent("the event has no Records list")
    if sequence is not None:
        body, name = sequence
        for position, record in enumerate(records):
            inner = record.get(body) if isinstance(record, Mapping) else None
            if not isinstance(inner, Mapping) or not isinstance(inner.get(name), str):
                raise NotAStreamEvent(f"Records[{position}] has no {body}.{name}")
    return records
