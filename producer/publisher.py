"""PutRecords with retries of exactly the records that failed, and a summary.

A PutRecords call can succeed as a whole and still fail some of its records
(``FailedRecordCount``; each failed entry has an ``ErrorCode``, usually
``ProvisionedThroughputExceededException`` when a shard is over 1 MB/s or
1,000 records/s). Only those records are sent again, after an exponential
backoff with full jitter, up to ``max_attempts`` (``adapters.retry.RetryLoop``);
a call that fails whole with a throttling or server error is retried the same
way, and one that fails for
a reason a retry cannot fix (no such stream, access denied) fails its records
at once. Optional client-side jitter delays every call by a random amount, so
many producers started together do not hit the stream in lock-step.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from botocore.config import Config
from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from adapters.clients import KINESIS_RETRYABLE, endpoint_client, error_code, error_message, http_status
from adapters.retry import Backoff, Clock, Deadline, RetryLoop, Sleep
from keydesign import InvalidInput, Reading

from .packing import BatchPlanner, PackedRecord, ReadingTooLarge, RecordWriter
from .sources import SourceItem


class PutRecordsApi(Protocol):
    """The one Kinesis call the publisher makes (a boto3 Kinesis client satisfies it)."""

    def put_records(self, **kwargs: Any) -> Mapping[str, Any]: ...


def kinesis_client(*, endpoint_url: str | None = None, region: str | None = None) -> Any:
    """A Kinesis client making one attempt per call: the publisher does the retrying."""
    config = Config(connect_timeout=5, read_timeout=30)
    return endpoint_client("kinesis", endpoint_url=endpoint_url, region=region, max_attempts=1, config=config)


@dataclass(slots=True)
class PublishSummary:
    """What a publish did; ``readings_in`` = sent + failed + invalid once it has finished."""

    readings_in: int = 0
    readings_sent: int = 0
    readings_failed: int = 0
    readings_invalid: int = 0
    records_sent: int = 0
    records_retried: int = 0
    records_failed: int = 0
    put_calls: int = 0
    bytes_sent: int = 0
    elapsed_s: float = 0.0
    errors: Counter[str] = field(default_factory=Counter)
    failure: str | None = None
    invalid_examples: list[str] = field(default_factory=list)

    def as_dict(self) -> dict[str, Any]:
        sent, elapsed = self.readings_sent, self.elapsed_s
        return asdict(self) | {
            "elapsed_s": round(elapsed, 3),
            "readings_per_s": round(sent / elapsed, 1) if elapsed else None,
            "readings_per_record": round(sent / self.records_sent, 2) if self.records_sent else None,
            "errors": dict(self.errors),
        }


class Publisher:
    """Sends batches of packed records to one stream (name or ARN)."""

    def __init__(
        self,
        api: PutRecordsApi,
        stream: str,
        *,
        max_attempts: int = 8,
        jitter_ms: int = 0,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._api = api
        self._target = {"StreamARN": stream} if stream.startswith("arn:") else {"StreamName": stream}
        self._jitter_s = max(0, jitter_ms) / 1000
        self._clock = clock
        self._sleep = sleep
        self._rng = rng or random.Random()
        self._retry = RetryLoop(
            Backoff(base_ms=100, max_delay_ms=5_000), sleep=sleep, rng=self._rng, max_attempts=max_attempts
        )
        self.summary = PublishSummary()

    def send(self, batch: list[PackedRecord]) -> list[PackedRecord]:
        """One PutRecords batch (at most 500 records / 5 MiB), retrying only the failed records.

        Returns the records Kinesis never accepted (empty when all were): a caller
        that must not lose a record (a redrive) keeps those and acts on the rest."""
        unsent: list[PackedRecord] = []

        def fail(records: list[PackedRecord], reason: str) -> None:
            self._fail(records, reason)
            unsent.extend(records)

        self._retry.run(
            list(batch),
            lambda pending, attempt: self._put(pending, attempt, fail),
            Deadline.never(self._clock),
            fail,
            unstarted="not sent",
        )
        return unsent

    def _put(
        self, pending: list[PackedRecord], attempt: int, fail: Callable[[list[PackedRecord], str], None]
    ) -> tuple[list[PackedRecord], str]:
        """One PutRecords of ``pending``; returns the records to send again, and why."""
        if attempt > 1:
            self.summary.records_retried += len(pending)
        if self._jitter_s:
            self._sleep(self._rng.uniform(0.0, self._jitter_s))
        self.summary.put_calls += 1
        try:
            response = self._api.put_records(
                **self._target, Records=[{"Data": r.data, "PartitionKey": r.partition_key} for r in pending]
            )
        except ClientError as exc:
            code = error_code(exc) or "Unknown"
            self.summary.errors[code] += 1
            if code in KINESIS_RETRYABLE or http_status(exc) >= 500:
                return pending, code
            fail(pending, f"{code}: {error_message(exc)}")
            return [], ""
        except (BotoConnectionError, HTTPClientError) as exc:
            why = type(exc).__name__
            self.summary.errors[why] += 1
            return pending, why
        retry: list[PackedRecord] = []
        why = ""
        for record, result in zip(pending, response.get("Records", []), strict=True):
            failure = result.get("ErrorCode") if isinstance(result, Mapping) else "MissingResult"
            if failure:
                self.summary.errors[str(failure)] += 1
                retry.append(record)
                why = str(failure)
            else:
                self.summary.records_sent += 1
                self.summary.readings_sent += record.readings
                self.summary.bytes_sent += record.size
        return retry, why

    def _fail(self, records: list[PackedRecord], reason: str) -> None:
        self.summary.records_failed += len(records)
        self.summary.readings_failed += sum(r.readings for r in records)
        self.summary.failure = reason


def publish(
    items: Iterable[SourceItem | tuple[float, dict[str, Any]]],
    publisher: Publisher,
    packer: RecordWriter,
    *,
    validate: bool = True,
    pace: bool = False,
    linger_ms: int = 200,
    progress: Callable[[PublishSummary, bool], None] | None = None,
    clock: Clock = time.monotonic,
    sleep: Sleep = time.sleep,
) -> PublishSummary:
    """Pack and send every reading of ``items``; return the summary.

    ``items`` are :class:`SourceItem` (files) or ``(offset_s, reading)`` pairs
    (the synthetic workload). With ``pace`` a pair is sent no earlier than
    ``offset_s`` after the start, so ``--rate`` is a real rate; what is packed
    is sent every ``linger_ms`` so a slow stream still flows.
    """
    summary = publisher.summary
    planner = BatchPlanner()
    started = clock()
    last_flush = started
    for item in items:
        if isinstance(item, SourceItem):
            reading, error = item.reading, item.error
        else:
            offset, reading = item
            error = None
            if pace:
                wait = started + offset - clock()
                if wait > 0.002:  # a sleep per reading at 2,000/s would cost more than it paces
                    sleep(wait)
        summary.readings_in += 1
        if reading is not None and error is None:
            try:
                if validate:
                    Reading.parse(reading)
                closed = packer.add(reading)
            except (InvalidInput, ReadingTooLarge) as exc:
                error = f"line {item.line}: {exc}" if isinstance(item, SourceItem) else str(exc)
        if reading is None or error is not None:
            summary.readings_invalid += 1
            if len(summary.invalid_examples) < 5:
                summary.invalid_examples.append(error or "unreadable")
            continue
        # Paced, the open records and the PutRecords call being filled go out every linger_ms: a slow
        # stream would otherwise wait for 500 records.
        lingered = pace and clock() - last_flush >= linger_ms / 1000
        if lingered:
            closed.extend(packer.flush())
            last_flush = clock()
        for batch in [*planner.add(closed), *(planner.drain() if lingered else ())]:
            publisher.send(batch)
            if progress:
                summary.elapsed_s = clock() - started
                progress(summary, False)
    for batch in [*planner.add(packer.flush()), *planner.drain()]:
        publisher.send(batch)
    summary.elapsed_s = clock() - started
    if progress:
        progress(summary, True)
    return summary
