"""Replaying a failure queue: each message's range read back and put through its function again.

A message is deleted only when every record of its range the stream still holds
was put through and the function reported none of them failed (ingest's and the
hot-key detector's partial-batch response names the records not yet stored:
rejected readings count as done, they are on the rejects queue with their
payloads), and nothing of the range was lost, unless ``drop_lost`` (the operator
has read what aged out). Everything else is released, visible again at once, and
reported with its reason; a crash half-way releases them too, or their
visibility timeout does. Replaying is idempotent: the records keep their
sequence numbers, so a reading stored again gets the same version, and the
hot-key detector puts the same runs under the same names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from keydesign import format_ts
from producer.redrive import MessageQueue
from replay.failures import FailedBatch, Source
from replay.invoker import MAX_EVENT_BYTES, InvocationFailed, Invoker
from replay.sources import Lost, RangeReader

#: Records of one event at most (a mapping's batch holds up to 10,000; the functions take any number).
MAX_EVENT_RECORDS = 1_000
#: A stream mapping's on-failure queue: ``MessageQueue(sqs, url, FailedBatch.parse)``.
FailureQueue = MessageQueue[FailedBatch]


@dataclass(slots=True)
class Outcome:
    """What a replay did with one message."""

    batch: FailedBatch
    records: int = 0
    #: Sequence numbers the function did not store (or the whole event's, when it failed).
    failed: list[str] = field(default_factory=list)
    lost: Lost | None = None
    error: str | None = None
    deleted: bool = False
    #: Why the message was kept (None when deleted, or in a dry run).
    kept_because: str | None = None

    def as_dict(self) -> dict[str, Any]:
        return {
            **self.batch.as_dict(),
            "records_read": self.records,
            "records_failed": len(self.failed),
            "lost": self.lost.describe() if self.lost is not None else None,
            "error": self.error,
            "deleted": self.deleted,
            "kept_because": self.kept_because,
        }


@dataclass(frozen=True, slots=True)
class Status:
    """A message as ``tsctl replay list`` shows it: its range, and until when its stream holds it."""

    batch: FailedBatch
    kept_until_ms: int | None

    def aged_out(self, now_ms: int) -> bool:
        return self.kept_until_ms is not None and now_ms >= self.kept_until_ms

    def as_dict(self, now_ms: int) -> dict[str, Any]:
        until = self.kept_until_ms
        return {
            **self.batch.as_dict(),
            "stream_keeps_it_until": format_ts(until) if until is not None else None,
            "aged_out": self.aged_out(now_ms),
        }


def peek(
    queue: FailureQueue, readers: Mapping[Source, RangeReader], limit: int, *, visibility_timeout_s: int = 60
) -> list[Status]:
    """Up to ``limit`` messages with until when their streams hold them; left in the queue."""
    messages = queue.receive(limit, visibility_timeout_s=visibility_timeout_s)
    try:
        return [Status(m, readers[m.source].kept_until(m) if m.source is not None else None) for m in messages]
    finally:
        queue.release(messages)


def replay(
    queue: FailureQueue,
    readers: Mapping[Source, RangeReader],
    invoker: Invoker | None,
    *,
    function_for: Callable[[FailedBatch], str],
    limit: int = 100,
    dry_run: bool = False,
    drop_lost: bool = False,
    visibility_timeout_s: int = 900,
) -> list[Outcome]:
    """Replay up to ``limit`` messages of ``queue`` (see the module docstring); with ``dry_run`` read
    the ranges and report, invoke and delete nothing."""
    if invoker is None and not dry_run:
        raise ValueError("a replay needs an invoker unless it is a dry run")
    messages = queue.receive(limit, visibility_timeout_s=visibility_timeout_s)
    outcomes: list[Outcome] = []
    try:
        for batch in messages:
            outcome = _replay_one(batch, readers, invoker, function_for, dry_run=dry_run, drop_lost=drop_lost)
            outcomes.append(outcome)
            if outcome.kept_because is not None or dry_run:
                continue
            if queue.delete([batch]):
                outcome.kept_because = "put through, but SQS did not delete the message; a later replay redoes it"
            else:
                outcome.deleted = True
    finally:
        # Whatever happened (even an exception), every message not deleted is visible again at once.
        deleted = {id(o.batch) for o in outcomes if o.deleted}
        queue.release([m for m in messages if id(m) not in deleted])
    return outcomes


def _replay_one(
    batch: FailedBatch,
    readers: Mapping[Source, RangeReader],
    invoker: Invoker | None,
    function_for: Callable[[FailedBatch], str],
    *,
    dry_run: bool,
    drop_lost: bool,
) -> Outcome:
    outcome = Outcome(batch)
    if batch.unreadable is not None or batch.source is None:
        outcome.kept_because = f"unreadable: {batch.unreadable}"
        return outcome
    read = readers[batch.source].read(batch)
    outcome.records, outcome.lost = len(read.records), read.lost
    if dry_run or invoker is None:
        return outcome
    function = function_for(batch)
    for event in events_of(read.records):
        try:
            answer = invoker.invoke(function, event)
        except InvocationFailed as exc:
            outcome.error = str(exc)
            outcome.failed.extend(_sequence(r) for r in event["Records"])
            continue
        failures = (answer or {}).get("batchItemFailures") or []
        outcome.failed.extend(str(f.get("itemIdentifier", "?")) for f in failures if isinstance(f, dict))
    if outcome.failed:
        outcome.kept_because = f"{len(outcome.failed)} record(s) not stored yet (first {outcome.failed[0]})" + (
            f": {outcome.error}" if outcome.error else ""
        )
    elif read.lost is not None and not drop_lost:
        outcome.kept_because = f"{read.lost.describe()}; kept until you pass --drop-lost"
    return outcome


def events_of(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The records as events of at most :data:`MAX_EVENT_RECORDS` records and :data:`MAX_EVENT_BYTES`."""
    events: list[dict[str, Any]] = []
    chunk: list[dict[str, Any]] = []
    size = 0
    for record in records:
        record_size = len(json.dumps(record)) + 2
        if chunk and (len(chunk) >= MAX_EVENT_RECORDS or size + record_size > MAX_EVENT_BYTES):
            events.append({"Records": chunk})
            chunk, size = [], 0
        chunk.append(record)
        size += record_size
    if chunk:
        events.append({"Records": chunk})
    return events


def _sequence(record: Mapping[str, Any]) -> str:
    if "kinesis" in record:
        return str(record["kinesis"]["sequenceNumber"])
    return str(record["dynamodb"]["SequenceNumber"])
