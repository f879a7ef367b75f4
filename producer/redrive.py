"""The rejects queue read back: peek at it, and send chosen readings to the stream again.

A reject message (``reading-rejected/1``, see ``functions/ingest/rejects.py``)
carries the refused payload (``payload`` as text, or ``payload_base64``), the
``field`` and ``reason``, a stable ``reject_id`` and the ``source``. The body is
read defensively: unknown fields are ignored, and a body this module cannot
read is reported as such and never deleted.

**Peeking** receives messages with a visibility timeout (so one pass sees each
message once) and then makes them visible again at once
(``ChangeMessageVisibility`` to 0). Nothing is consumed; while a peek runs,
other consumers do not see the messages it holds, and if the peek dies they
return by themselves when the timeout ends. Each receive counts in the
message's ``ApproximateReceiveCount`` (the rejects queue has no redrive
policy, so that has no effect).

**Redriving** sends each chosen reading as its own Kinesis record through
:class:`~producer.publisher.Publisher` (only failed records are retried) and
deletes a message only after Kinesis accepted its reading. A reading Kinesis
still refuses, a delete that fails, or a crash half-way leaves the message in
the queue: it becomes visible again and a later redrive sends it again. A
reading sent twice is harmless: its event id (given, or derived from its
content by the ingest function) gives it the same key, so the second write
overwrites the first.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

from keydesign import InvalidInput, Reading

from .packing import BatchPlanner, PackedRecord, partitioner
from .publisher import Publisher

#: Reasons the ingest function gives a reading whose period's table no longer takes writes:
#: sent again it would be refused again (see docs/ingest.md, "Late readings").
CLOSED_PERIOD_MARK = "its table no longer takes writes"


class SqsApi(Protocol):
    """The SQS calls used here (a boto3 SQS client satisfies it)."""

    def receive_message(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def change_message_visibility_batch(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def delete_message_batch(self, **kwargs: Any) -> Mapping[str, Any]: ...
    def get_queue_attributes(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class RejectMessage:
    """One message of the rejects queue, parsed."""

    message_id: str
    receipt_handle: str
    reject_id: str
    field: str
    reason: str
    rejected_at: str
    source: dict[str, Any]
    payload: bytes | None
    payload_truncated: bool
    #: Why the message itself cannot be read (not JSON, no payload...); None when it can.
    unreadable: str | None = None

    @classmethod
    def parse(cls, message: Mapping[str, Any]) -> RejectMessage:
        handle = str(message.get("ReceiptHandle", ""))
        message_id = str(message.get("MessageId", ""))
        try:
            body = json.loads(message.get("Body") or "")
        except ValueError:
            body = None
        if not isinstance(body, dict):
            return cls(message_id, handle, message_id, "?", "?", "", {}, None, False, "the body is not a JSON object")
        payload, unreadable = _payload_of(body)
        source = body.get("source")
        return cls(
            message_id=message_id,
            receipt_handle=handle,
            reject_id=str(body.get("reject_id") or message_id),
            field=str(body.get("field", "?")),
            reason=str(body.get("reason", "?")),
            rejected_at=str(body.get("rejected_at", "")),
            source=dict(source) if isinstance(source, dict) else {},
            payload=payload,
            payload_truncated=bool(body.get("payload_truncated", False)),
            unreadable=unreadable,
        )

    def payload_text(self) -> str:
        """The payload for people: its text, or a Python bytes literal when it is not UTF-8."""
        if self.payload is None:
            return ""
        try:
            return self.payload.decode("utf-8")
        except UnicodeDecodeError:
            return repr(self.payload)

    def why_not_redrivable(self, *, include_closed: bool = False) -> str | None:
        """None when the payload can be sent again; otherwise why not. A reading refused because
        its period had closed is not, unless ``include_closed`` (the grace was widened meanwhile)."""
        if self.unreadable is not None:
            return self.unreadable
        if self.payload_truncated:
            return "the payload was truncated when it was rejected; the whole reading is not in the queue"
        if CLOSED_PERIOD_MARK in self.reason and not include_closed:
            return "its period is closed: the stream would refuse it again (docs/ingest.md, 'Late readings')"
        return None

    def as_dict(self) -> dict[str, Any]:
        return {
            "reject_id": self.reject_id,
            "field": self.field,
            "reason": self.reason,
            "rejected_at": self.rejected_at,
            "source": self.source,
            "payload": self.payload_text(),
            "payload_truncated": self.payload_truncated,
            "redrivable": self.why_not_redrivable() is None,
            "not_redrivable_because": self.why_not_redrivable(),
        }


def _payload_of(body: Mapping[str, Any]) -> tuple[bytes | None, str | None]:
    text = body.get("payload")
    if isinstance(text, str):
        return text.encode("utf-8", errors="surrogatepass"), None
    encoded = body.get("payload_base64")
    if isinstance(encoded, str):
        try:
            return base64.b64decode(encoded, validate=True), None
        except (binascii.Error, ValueError):
            return None, "payload_base64 is not valid base64"
    return None, "the message carries no payload"


class Received(Protocol):
    """A message as a queue reader keeps it: its id and the handle that releases or deletes it."""

    @property
    def message_id(self) -> str: ...
    @property
    def receipt_handle(self) -> str: ...


M = TypeVar("M", bound=Received)


class MessageQueue(Generic[M]):
    """An SQS queue read by hand: receive with a visibility timeout (each message parsed by ``parse``),
    release, delete. The rejects queue, and the stream mappings' failure queues (``replay``)."""

    def __init__(
        self, sqs: SqsApi, queue_url: str, parse: Callable[[Mapping[str, Any]], M], *, wait_s: int = 1
    ) -> None:
        self._sqs = sqs
        self.queue_url = queue_url
        self._parse = parse
        self._wait_s = wait_s

    def approximate_count(self) -> int:
        attributes = self._sqs.get_queue_attributes(
            QueueUrl=self.queue_url, AttributeNames=["ApproximateNumberOfMessages"]
        ).get("Attributes", {})
        return int(attributes.get("ApproximateNumberOfMessages", 0))

    def receive(self, limit: int, *, visibility_timeout_s: int) -> list[M]:
        """Up to ``limit`` messages, each held invisible for ``visibility_timeout_s``."""
        out: list[M] = []
        seen: set[str] = set()
        while len(out) < limit:
            answer = self._sqs.receive_message(
                QueueUrl=self.queue_url,
                MaxNumberOfMessages=min(10, limit - len(out)),
                VisibilityTimeout=visibility_timeout_s,
                WaitTimeSeconds=self._wait_s,
            )
            messages = answer.get("Messages") or []
            if not messages:
                break
            for message in messages:
                parsed = self._parse(message)
                if parsed.message_id in seen:  # cannot happen inside the timeout; guard anyway
                    continue
                seen.add(parsed.message_id)
                out.append(parsed)
        return out

    def release(self, messages: Sequence[M]) -> int:
        """Make ``messages`` visible again now; returns how many SQS did not release
        (those return by themselves when their visibility timeout ends)."""
        return len(self.hold(messages, 0))

    def hold(self, messages: Sequence[M], seconds: int) -> list[M]:
        """Keep ``messages`` hidden ``seconds`` from now (0: visible again now); returns those SQS refused
        (a receipt handle no longer valid: the message may be another consumer's now)."""
        refused: list[M] = []
        for chunk in _chunks(messages, 10):
            entries = [
                {"Id": str(n), "ReceiptHandle": m.receipt_handle, "VisibilityTimeout": seconds}
                for n, m in enumerate(chunk)
            ]
            answer = self._sqs.change_message_visibility_batch(QueueUrl=self.queue_url, Entries=entries)
            refused.extend(chunk[int(f["Id"])] for f in answer.get("Failed") or ())
        return refused

    def delete(self, messages: Sequence[M]) -> list[M]:
        """Delete ``messages``; returns those SQS did not delete."""
        left: list[M] = []
        for chunk in _chunks(messages, 10):
            entries = [{"Id": str(n), "ReceiptHandle": m.receipt_handle} for n, m in enumerate(chunk)]
            answer = self._sqs.delete_message_batch(QueueUrl=self.queue_url, Entries=entries)
            left.extend(chunk[int(f["Id"])] for f in answer.get("Failed") or ())
        return left


#: The rejects queue: ``MessageQueue(sqs, url, RejectMessage.parse)``.
RejectsQueue = MessageQueue[RejectMessage]


def peek(queue: RejectsQueue, limit: int, *, visibility_timeout_s: int = 60) -> list[RejectMessage]:
    """Up to ``limit`` messages, left in the queue (made visible again before returning)."""
    messages = queue.receive(limit, visibility_timeout_s=visibility_timeout_s)
    queue.release(messages)
    return messages


def summarise(messages: Iterable[RejectMessage]) -> dict[str, Any]:
    """Counts by reason and by field, and the oldest and newest ``rejected_at``."""
    items = list(messages)
    times = sorted(m.rejected_at for m in items if m.rejected_at)
    by_reason = Counter((m.field, m.reason) for m in items)
    return {
        "messages": len(items),
        "by_field": dict(Counter(m.field for m in items).most_common()),
        "by_reason": [{"field": f, "reason": r, "count": c} for (f, r), c in by_reason.most_common()],
        "redrivable": sum(1 for m in items if m.why_not_redrivable() is None),
        "oldest": times[0] if times else None,
        "newest": times[-1] if times else None,
    }


@dataclass(frozen=True, slots=True)
class FieldRename:
    """``old=new``: move a field of the reading (dots reach into objects: ``measures.tmp=measures.temp``)."""

    old: tuple[str, ...]
    new: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> FieldRename:
        old, sep, new = text.partition("=")
        if not sep or not old.strip() or not new.strip():
            raise ValueError(f"{text!r} is not OLD=NEW (e.g. temperature=measures.temp)")
        return cls(tuple(old.strip().split(".")), tuple(new.strip().split(".")))

    def apply(self, reading: dict[str, Any]) -> bool:
        """Rename in place; False when the reading has no such field (left unchanged)."""
        parent = _walk(reading, self.old[:-1], create=False)
        if parent is None or self.old[-1] not in parent:
            return False
        value = parent.pop(self.old[-1])
        target = _walk(reading, self.new[:-1], create=True)
        if target is None:
            parent[self.old[-1]] = value
            return False
        target[self.new[-1]] = value
        return True


def _walk(value: dict[str, Any], path: Sequence[str], *, create: bool) -> dict[str, Any] | None:
    for name in path:
        child = value.get(name)
        if child is None and create:
            child = value[name] = {}
        if not isinstance(child, dict):
            return None
        value = child
    return value


@dataclass(slots=True)
class RedriveReport:
    """What a redrive did with every message it received: each is in exactly one list."""

    dry_run: bool
    sent: list[RejectMessage] = field(default_factory=list)
    #: Messages left in the queue, with why (a reject can be in the queue twice: rejects are at least once).
    kept: list[tuple[RejectMessage, str]] = field(default_factory=list)
    not_selected: int = 0
    readings: list[dict[str, Any]] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        return {
            "dry_run": self.dry_run,
            "sent_and_deleted" if not self.dry_run else "would_send": len(self.sent),
            "kept": [{"reject_id": m.reject_id, "message_id": m.message_id, "why": why} for m, why in self.kept],
            "not_selected": self.not_selected,
        }


def redrive(
    queue: RejectsQueue,
    publisher: Publisher | None,
    *,
    select: Callable[[RejectMessage], bool] = lambda m: True,
    renames: Sequence[FieldRename] = (),
    limit: int = 1000,
    dry_run: bool = False,
    visibility_timeout_s: int = 300,
    partition_key: Callable[[str], str] | None = None,
    include_closed: bool = False,
) -> RedriveReport:
    """Send the chosen readings back to the stream; delete each message once Kinesis took its reading.

    Messages not chosen, not redrivable, still invalid after the renames, or
    refused by Kinesis are released (visible again at once) and listed in
    ``kept``; with ``dry_run`` nothing is sent or deleted.
    """
    if publisher is None and not dry_run:
        raise ValueError("a redrive needs a publisher unless it is a dry run")
    key_of = partition_key or partitioner("group")
    report = RedriveReport(dry_run=dry_run)
    messages = queue.receive(limit, visibility_timeout_s=visibility_timeout_s)
    release: list[RejectMessage] = []
    chosen: list[tuple[RejectMessage, PackedRecord]] = []
    try:
        for message in messages:
            if not select(message):
                report.not_selected += 1
                release.append(message)
                continue
            record, why = _record_of(message, renames, key_of, include_closed=include_closed)
            if record is None:
                report.kept.append((message, why))
                release.append(message)
                continue
            chosen.append((message, record))
            sent = json.loads(record.data)
            report.readings.extend(sent if isinstance(sent, list) else [sent])
        if dry_run:
            report.sent.extend(m for m, _ in chosen)  # released below, with the rest
            return report
        while chosen and publisher is not None:
            batch, rest = _next_batch(chosen)
            refused = {id(r) for r in publisher.send([r for _, r in batch])}
            chosen = rest  # a crash before this line leaves the batch in ``chosen``, released below
            accepted = [m for m, r in batch if id(r) not in refused]
            for message, record in batch:
                if id(record) in refused:
                    report.kept.append((message, f"Kinesis did not accept it ({publisher.summary.failure})"))
                    release.append(message)
            undeleted = queue.delete(accepted)
            for message in undeleted:
                # Sent but still in the queue: it returns after the timeout and is sent again (idempotent).
                report.kept.append((message, "sent, but SQS did not delete the message; a later redrive resends it"))
                release.append(message)
            left = {id(m) for m in undeleted}
            report.sent.extend(m for m in accepted if id(m) not in left)
    finally:
        # Whatever happened (even an exception), unsent messages become visible again.
        queue.release([*release, *(m for m, _ in chosen)])
    return report


def _next_batch(
    chosen: list[tuple[RejectMessage, PackedRecord]],
) -> tuple[list[tuple[RejectMessage, PackedRecord]], list[tuple[RejectMessage, PackedRecord]]]:
    planner = BatchPlanner()
    for n, (_, record) in enumerate(chosen):
        for _full in planner.add([record]):
            return chosen[:n], chosen[n:]
    return chosen, []


def _record_of(
    message: RejectMessage, renames: Sequence[FieldRename], key_of: Callable[[str], str], *, include_closed: bool
) -> tuple[PackedRecord | None, str]:
    why = message.why_not_redrivable(include_closed=include_closed)
    if why is not None:
        return None, why
    try:
        value = json.loads(message.payload or b"")
    except ValueError as exc:
        return None, f"the payload is not JSON ({exc}); fix it at the producer and publish it again"
    # A fold (ingest's one message for many invalid elements of a record) is an array of readings.
    readings = value if isinstance(value, list) else [value]
    for position, reading in enumerate(readings):
        where = f"element {position}: " if isinstance(value, list) else ""
        if not isinstance(reading, dict):
            return None, f"{where}the payload is not a reading (a JSON object)"
        for rename in renames:
            rename.apply(reading)
        try:
            # The shape only: the time window is the ingest function's to judge, at the time it receives it.
            Reading.parse(reading)
        except InvalidInput as exc:
            return None, f"{where}still invalid after the fix-ups: {exc}"
    if not readings:
        return None, "the payload is an empty array"
    data = json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode("utf-8")
    return PackedRecord(partition_key=key_of(str(readings[0]["entity_id"])), data=data, readings=len(readings)), ""


def _chunks(items: Sequence[M], size: int) -> Iterable[Sequence[M]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]
