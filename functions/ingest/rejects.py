"""The rejects queue: readings that can never be stored, with why and where from.

A reject is sent to SQS as one JSON message (schema ``reading-rejected/1``)::

    {"type": "reading-rejected", "version": 1,
     "reject_id": "shardId-000000000000/4959...9138/-/3",
     "field": "measures.temp", "reason": "must be a number, got str",
     "source": {"stream_arn": ..., "shard_id": ..., "sequence_number": ...,
                "sub_sequence_number": null, "index": 3, "partition_key": ...},
     "payload": "{\\"entity_id\\": ...}",        # UTF-8 text, or
     "payload_base64": null,                    # base64 when it is not UTF-8
     "payload_bytes": 1234, "payload_sha256": "...", "payload_truncated": false,
     "rejected_at": "2026-11-22T06:57:51.123Z"}

``reject_id`` is stable across redeliveries (shard, sequence number,
sub-sequence number of a KPL member, index in a JSON array), so a consumer
can drop the duplicate a redelivered batch sends; on a FIFO queue it is also
the deduplication id. A payload over ``payload_limit`` bytes is cut (never
the envelope) and says so, with the size and hash of the whole, so a 1 MB
bad record costs one bounded message instead of a failed call.

SendMessageBatch limits: 10 entries and 256 KiB per call (the sum of the
bodies and attributes). Entries SQS fails (``Failed``, not a sender fault)
and failed calls are retried with backoff while time allows; what still is
not sent is handed back, and the caller reports its Kinesis record for
redelivery: a reject is never dropped.
"""

from __future__ import annotations

import base64
import hashlib
import json
import random
import re
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from adapters.clients import SQS_PERMANENT, error_code
from adapters.observability import logger
from adapters.retry import Backoff, Deadline, RetryLoop, Sleep
from keydesign import format_ts

MAX_BATCH_ENTRIES = 10
MAX_REQUEST_BYTES = 256 * 1024
DEFAULT_PAYLOAD_LIMIT = 64 * 1024
_Entry = tuple[int, dict[str, Any]]  # (index of the reject, SendMessageBatch entry)
# Two message attributes: names and types (25 bytes), values of at most 128 characters
# (field: up to 4 UTF-8 bytes each = 512; shard_id: ASCII, 128). 665 bytes; kept at 1 KiB.
_ATTRIBUTE_ALLOWANCE = 1024

# What SQS accepts in a message body or attribute (XML 1.0 characters): #x9 #xA #xD,
# #x20-#xD7FF, #xE000-#xFFFD, #x10000-#x10FFFF. moto does not check; SQS refuses the call.
_SQS_REFUSED = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")
MAX_ATTRIBUTE_CHARS = 128


def sqs_text(text: str) -> str:
    """``text`` with every character SQS refuses written as ``\\uXXXX``, cut to :data:`MAX_ATTRIBUTE_CHARS`
    characters (``-`` when empty): always a value SQS accepts."""
    if not text:
        return "-"
    if not text.isascii() or not text.isprintable():
        text = _SQS_REFUSED.sub(lambda found: f"\\u{ord(found.group()):04x}", text)
    return text[:MAX_ATTRIBUTE_CHARS]


class SendMessageBatchApi(Protocol):
    """The one SQS call the publisher makes (a boto3 SQS client satisfies it)."""

    def send_message_batch(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Reject:
    """One reading (or undecodable record) that will never be stored, and where it came from."""

    payload: bytes
    field: str
    reason: str
    shard_id: str
    sequence_number: str
    sub_sequence_number: int | None = None
    index: int | None = None
    partition_key: str = ""
    stream_arn: str = ""
    #: How many readings this reject stands for: 1, or more for a fold (``fold`` is its number).
    readings: int = 1
    fold: int | None = None

    @property
    def reject_id(self) -> str:
        sub = "-" if self.sub_sequence_number is None else str(self.sub_sequence_number)
        index = "-" if self.index is None else str(self.index)
        if self.fold is not None:
            index = f"fold-{self.fold}"
        return f"{self.shard_id}/{self.sequence_number}/{sub}/{index}"


@dataclass(slots=True)
class RejectsReport:
    """Every index of a :meth:`RejectsPublisher.publish` is either in ``sent`` or ``unsent``."""

    sent: set[int] = field(default_factory=set)
    unsent: dict[int, str] = field(default_factory=dict)
    calls: int = 0
    retried: int = 0
    truncated: int = 0

    def merge(self, other: RejectsReport) -> None:
        self.sent |= other.sent
        self.unsent.update(other.unsent)
        self.calls += other.calls
        self.retried += other.retried
        self.truncated += other.truncated


def reject_message(reject: Reject, *, payload_limit: int, rejected_at_ms: int) -> tuple[str, bool]:
    """The JSON body of ``reject`` (ASCII only, so SQS accepts every character),
    at most ``MAX_REQUEST_BYTES - allowance`` long; True when the payload was cut."""
    raw = reject.payload
    try:
        text: str | None = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    truncated = len(raw) > payload_limit
    if text is not None:
        shown = raw[:payload_limit].decode("utf-8", errors="ignore") if truncated else text
    else:
        shown = base64.b64encode(raw[: payload_limit * 3 // 4]).decode("ascii")
    envelope: dict[str, Any] = {
        "type": "reading-rejected",
        "version": 1,
        "reject_id": reject.reject_id,
        "field": reject.field,
        "reason": reject.reason,
        "source": {
            "stream_arn": reject.stream_arn,
            "shard_id": reject.shard_id,
            "sequence_number": reject.sequence_number,
            "sub_sequence_number": reject.sub_sequence_number,
            "index": reject.index,
            "partition_key": reject.partition_key,
        },
        "readings": reject.readings,
        "payload": shown if text is not None else None,
        "payload_base64": shown if text is None else None,
        "payload_bytes": len(raw),
        "payload_sha256": hashlib.sha256(raw).hexdigest(),
        "payload_truncated": truncated,
        "rejected_at": format_ts(rejected_at_ms),
    }
    budget = MAX_REQUEST_BYTES - _ATTRIBUTE_ALLOWANCE
    body = json.dumps(envelope, ensure_ascii=True, separators=(",", ":"))
    while len(body) > budget:
        # Escapes (\uXXXX) make the body longer than the payload; cut by the overflow until it fits.
        overflow = len(body) - budget
        shown = shown[: max(0, len(shown) - overflow - 64)]
        envelope["payload" if text is not None else "payload_base64"] = shown
        envelope["payload_truncated"] = truncated = True
        body = json.dumps(envelope, ensure_ascii=True, separators=(",", ":"))
    return body, truncated


class RejectsPublisher:
    """Sends rejects with SendMessageBatch; thread-safe; one instance per container."""

    def __init__(
        self,
        api: SendMessageBatchApi,
        queue_url: str,
        *,
        payload_limit: int = DEFAULT_PAYLOAD_LIMIT,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        wall_clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
    ) -> None:
        if payload_limit < 1 or payload_limit > MAX_REQUEST_BYTES // 2:
            raise ValueError(f"payload_limit must lie in 1..{MAX_REQUEST_BYTES // 2}")
        self._api = api
        self._queue_url = queue_url
        self._fifo = queue_url.endswith(".fifo")
        self._payload_limit = payload_limit
        self._retry = RetryLoop(Backoff(base_ms=100, max_delay_ms=2_000), sleep=sleep, rng=rng, max_attempts=5)
        self._wall_clock_ms = wall_clock_ms
        self._pool = ThreadPoolExecutor(max_workers=4, thread_name_prefix="rejects")

    @property
    def payload_limit(self) -> int:
        return self._payload_limit

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def publish(self, rejects: Sequence[Reject], deadline: Deadline) -> RejectsReport:
        """Send every reject; each index ends up in ``sent`` or ``unsent`` (with why)."""
        report = RejectsReport()
        if not rejects:
            return report
        now_ms = self._wall_clock_ms()
        entries: list[tuple[int, dict[str, Any], int]] = []
        for index, reject in enumerate(rejects):
            body, truncated = reject_message(reject, payload_limit=self._payload_limit, rejected_at_ms=now_ms)
            report.truncated += truncated
            entries.append((index, self._entry(reject, body), len(body) + _ATTRIBUTE_ALLOWANCE))
        futures = [self._pool.submit(self._send_batch, batch, deadline) for batch in _batches(entries)]
        for future in futures:
            report.merge(future.result())
        return report

    def _entry(self, reject: Reject, body: str) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "MessageBody": body,
            "MessageAttributes": {
                "field": {"DataType": "String", "StringValue": sqs_text(reject.field)},
                "shard_id": {"DataType": "String", "StringValue": sqs_text(reject.shard_id)},
            },
        }
        if self._fifo:
            entry["MessageGroupId"] = sqs_text(reject.shard_id)
            entry["MessageDeduplicationId"] = hashlib.sha256(reject.reject_id.encode()).hexdigest()
        return entry

    def _send_batch(self, batch: list[_Entry], deadline: Deadline) -> RejectsReport:
        report = RejectsReport()
        report.retried += self._retry.run(
            batch,
            lambda pending, _attempt: self._call(pending, report),
            deadline,
            lambda pending, why: _unsent(report, pending, why),
            unstarted="not sent",
        )
        return report

    def _call(self, pending: list[_Entry], report: RejectsReport) -> tuple[list[_Entry], str]:
        """One SendMessageBatch; returns the entries left to retry, and why."""
        request = [{**entry, "Id": str(position)} for position, (_, entry) in enumerate(pending)]
        report.calls += 1
        try:
            response = self._api.send_message_batch(QueueUrl=self._queue_url, Entries=request)
        except ClientError as exc:
            code = error_code(exc) or "Unknown"
            why = f"SendMessageBatch failed with {code}"
            if code in SQS_PERMANENT:
                _unsent(report, pending, why)
                return [], why
            return pending, why
        except (BotoConnectionError, HTTPClientError) as exc:
            return pending, f"SendMessageBatch failed with {type(exc).__name__}"
        except Exception as exc:  # never drop a reject on an unknown failure: hand it back
            logger.exception("SendMessageBatch failed unexpectedly; the records will be redelivered")
            _unsent(report, pending, f"unexpected {type(exc).__name__}: {exc}")
            return [], ""
        failed = {str(f.get("Id")): f for f in response.get("Failed") or ()}
        retry: list[_Entry] = []
        why = ""
        for position, (index, entry) in enumerate(pending):
            failure = failed.get(str(position))
            if failure is None:
                report.sent.add(index)
            elif failure.get("SenderFault"):
                report.unsent[index] = f"SQS refused the message: {failure.get('Code')}: {failure.get('Message')}"
            else:
                retry.append((index, entry))
                why = f"SQS failed the entry with {failure.get('Code')}"
        return retry, why


def _unsent(report: RejectsReport, pending: Sequence[_Entry], reason: str) -> None:
    for index, _ in pending:
        report.unsent[index] = reason


def _batches(entries: Sequence[tuple[int, dict[str, Any], int]]) -> list[list[_Entry]]:
    """Pack entries into SendMessageBatch calls: at most 10 and 256 KiB each."""
    out: list[list[_Entry]] = []
    current: list[_Entry] = []
    size = 0
    for index, entry, entry_size in entries:
        if current and (len(current) == MAX_BATCH_ENTRIES or size + entry_size > MAX_REQUEST_BYTES):
            out.append(current)
            current, size = [], 0
        current.append((index, entry))
        size += entry_size
    if current:
        out.append(current)
    return out
