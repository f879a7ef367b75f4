"""Replaying a failure queue: each message's range read back and put through its function again.

A message is deleted only when its whole range was read back (or what the
stream no longer holds is named, and ``drop_lost`` says the operator has read
it), the records were put through the function in one event, as its mapping cut
them, and the function reported none of them failed (ingest's and the hot-key
detector's partial-batch response names the records not yet stored: rejected
readings count as done, they are on the rejects queue with their payloads).
Everything else is released, visible again at once, and reported with its
reason; a failure of one message (a range that cannot be read, an invocation
that fails or does not answer) is reported and the next goes on. Before each
message is worked, it and those still waiting are hidden for as long as reading
a range and one invocation may take, so none reappears to another consumer
mid-run. A crash half-way releases them too, or their visibility timeout does.
Replaying is idempotent: the records keep their sequence numbers, so a reading
stored again gets the same version, and the hot-key detector, given the same
batch, puts the same runs under the same names.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError

from keydesign import format_ts
from producer.redrive import MessageQueue
from replay.failures import FailedBatch, Source
from replay.invoker import INVOKE_TIMEOUT_S, InvocationFailed, Invoker
from replay.sources import Lost, RangeReader

#: Seconds a range's read back may take: its MAX_CALLS (200) GetRecords calls at Kinesis's 5 a second per
#: shard take 40 s; the rest is room for throttled calls and their retries.
READ_S = 300
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
    #: The tail of the range not read back, and why (the records read were not put through).
    unread: str | None = None
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
            "unread": self.unread,
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
    visibility_timeout_s: int = 300,
    invoke_timeout_s: int = INVOKE_TIMEOUT_S,
) -> list[Outcome]:
    """Replay up to ``limit`` messages of ``queue`` (see the module docstring); with ``dry_run`` read
    the ranges and report, invoke and delete nothing. ``visibility_timeout_s`` hides the messages
    received until the first is worked; ``invoke_timeout_s`` is the longest an invocation may take."""
    if invoker is None and not dry_run:
        raise ValueError("a replay needs an invoker unless it is a dry run")
    step_s = READ_S + (0 if dry_run else invoke_timeout_s)
    messages = queue.receive(limit, visibility_timeout_s=visibility_timeout_s)
    outcomes: list[Outcome] = []
    try:
        for index, batch in enumerate(messages):
            # This message and every one still waiting stay hidden while this one is worked.
            refused = {id(m) for m in queue.hold(messages[index:], step_s)}
            outcome = Outcome(batch)
            outcomes.append(outcome)
            if id(batch) in refused:
                outcome.kept_because = "SQS refused to keep it hidden (another consumer may hold it): not replayed"
                continue
            _replay_one(outcome, readers, invoker, function_for, dry_run=dry_run, drop_lost=drop_lost)
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
    outcome: Outcome,
    readers: Mapping[Source, RangeReader],
    invoker: Invoker | None,
    function_for: Callable[[FailedBatch], str],
    *,
    dry_run: bool,
    drop_lost: bool,
) -> None:
    batch = outcome.batch
    if batch.unreadable is not None or batch.source is None:
        outcome.kept_because = f"unreadable: {batch.unreadable}"
        return
    try:
        read = readers[batch.source].read(batch)
    except (BotoCoreError, ClientError) as exc:
        outcome.error = f"the range could not be read back: {exc}"
        outcome.kept_because = outcome.error
        return
    outcome.records, outcome.lost, outcome.unread = len(read.records), read.lost, read.describe_unread(batch)
    if outcome.unread is not None:
        # Put through only once read whole: the function gets the batch as its mapping cut it.
        outcome.kept_because = f"{outcome.unread}; nothing was put through, run the replay again"
        return
    if dry_run or invoker is None:
        return
    if read.records:
        # One event: the batch as the mapping cut it (the hot-key detector names its runs by their
        # first record, so a batch cut otherwise would count its loads again under other names).
        event = {"Records": read.records}
        try:
            answer = invoker.invoke(function_for(batch), event)
        except InvocationFailed as exc:
            outcome.error = str(exc)
            outcome.failed.extend(_sequence(r) for r in read.records)
        else:
            failures = (answer or {}).get("batchItemFailures") or []
            outcome.failed.extend(str(f.get("itemIdentifier", "?")) for f in failures if isinstance(f, dict))
    if outcome.failed:
        outcome.kept_because = f"{len(outcome.failed)} record(s) not stored yet (first {outcome.failed[0]})" + (
            f": {outcome.error}" if outcome.error else ""
        )
    elif read.lost is not None and not drop_lost:
        outcome.kept_because = f"{read.lost.describe()}; kept until you pass --drop-lost"


def _sequence(record: Mapping[str, Any]) -> str:
    if "kinesis" in record:
        return str(record["kinesis"]["sequenceNumber"])
    return str(record["dynamodb"]["SequenceNumber"])
