"""An event source mapping for Kinesis and DynamoDB streams, with Lambda's failure semantics.

One poller thread per shard reads records in order and invokes the function
with batches, one batch at a time per shard (parallelization factor 1), as
Lambda does:

* **Batching.** Up to ``batch_size`` records and at most 6 MB of event, the
  records already there or, with a batching window, those that arrive within
  it.
* **Partial batch responses** (``ReportBatchItemFailures``). A response whose
  ``batchItemFailures`` name sequence numbers checkpoints before the lowest
  one; the batch is retried from that record. An empty or missing list is a
  success; an entry without a valid ``itemIdentifier`` of this batch makes
  the whole batch a failure.
* **Bisect on function error.** When the invocation fails (the handler
  raised, timed out, or an injected fault), the batch is split in two and
  each half retried on its own, first half first.
* **Retry cap** (``max_retries``; -1 is unlimited). Every retry of a record
  counts, including the retries of the halves a bisection made (the halves
  inherit the attempts of the batch they came from).
* **Maximum record age** (``max_record_age_s``; -1 is unlimited). A record
  older than this is not (re)delivered.
* **On-failure destination.** Records given up on (retries exhausted, too
  old) are skipped so the shard moves on, and a record like Lambda's goes to
  the destination: the condition, the invoke count, and the shard id,
  sequence range, arrival times and size of the skipped batch (not the data).

:meth:`EventSourceMapping.wait_until_caught_up` waits until every shard has
been read to its end *after* the call began and nothing is buffered or being
invoked: the condition "everything published before now has been handled".
With ``flush=True`` a batching window open meanwhile is delivered at once
instead of at its end: a replay compresses time (the rotator's replay settles
ingest at each hour it crosses, :mod:`.scheduler`), and a window of real
seconds is then hours of the replayed clock.
"""

from __future__ import annotations

import logging
import random
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal, Protocol

from botocore.exceptions import BotoCoreError, ClientError

from infra.config import Context
from local_runtime.functions import FunctionError
from local_runtime.stream_sources import SourceRecord, StartingPosition, StreamSource

_log = logging.getLogger(__name__)

#: Lambda's limit on an invocation's payload, which bounds a stream batch.
MAX_PAYLOAD_BYTES = 6 * 1024 * 1024
RETRY_ATTEMPTS_EXHAUSTED = "RetryAttemptsExhausted"
RECORD_AGE_EXCEEDED = "RecordAgeExceeded"
_COMPLETE_FAILURE = -1


class Invocable(Protocol):
    """What the mapping invokes: a :class:`local_runtime.functions.LocalFunction`, or a fake."""

    @property
    def name(self) -> str: ...

    def invoke(self, event: Any) -> Any:
        """Return the handler's response, or raise :class:`FunctionError`."""


#: Where a skipped batch's record goes (locally: an SQS queue, the JSON record the message body).
FailureDestination = Callable[[Mapping[str, Any]], None]


class _Stopped(Exception):  # noqa: N818 - internal control flow, not an error
    pass


@dataclass(frozen=True, slots=True)
class MappingConfig:
    """The event source mapping's settings (names as in CreateEventSourceMapping)."""

    batch_size: int = 100
    batching_window_s: float = 0.0
    max_retries: int = -1
    max_record_age_s: int = -1
    bisect_on_error: bool = True
    report_batch_item_failures: bool = True
    starting_position: StartingPosition = StartingPosition.TRIM_HORIZON
    max_payload_bytes: int = MAX_PAYLOAD_BYTES
    #: How long an idle shard waits before reading again (Lambda: about 1 s for Kinesis, 0.25 s for DynamoDB).
    poll_interval_s: float = 0.25
    #: Backoff before a retry: doubles from ``retry_base_s`` up to ``retry_max_s``, full jitter.
    retry_base_s: float = 0.05
    retry_max_s: float = 2.0
    #: How often the shard list is read again (to pick up new shards).
    shard_refresh_s: float = 10.0

    def __post_init__(self) -> None:
        if not 1 <= self.batch_size <= 10_000:
            raise ValueError(f"batch_size must lie in 1..10000, got {self.batch_size}")
        if self.max_retries < -1 or self.max_record_age_s < -1:
            raise ValueError("max_retries and max_record_age_s are -1 (no limit) or more")
        if self.batching_window_s < 0 or self.poll_interval_s <= 0:
            raise ValueError("batching_window_s must be >= 0 and poll_interval_s > 0")

    @classmethod
    def for_stream(cls, config: Context, function: Literal["ingest", "hotkeys"], **overrides: Any) -> MappingConfig:
        """The ingest function's mapping, or the hot-key function's on a readings table's stream,
        from the keys the stack deploys it with (``<function>_batch_size`` and so on; bisect, partial
        batch responses and the trim horizon are the defaults above, as in ``infra/ingestion.py`` and
        ``infra/hot_keys.py``)."""
        return cls(
            batch_size=getattr(config, f"{function}_batch_size"),
            batching_window_s=float(getattr(config, f"{function}_batching_window_s")),
            max_retries=getattr(config, f"{function}_max_retries"),
            max_record_age_s=getattr(config, f"{function}_max_record_age_s"),
            **overrides,
        )

    @classmethod
    def from_request(cls, request: Mapping[str, Any], **overrides: Any) -> MappingConfig:
        """The settings of a CreateEventSourceMapping request (what the rotator sends)."""
        return cls(
            batch_size=int(request.get("BatchSize", 100)),
            batching_window_s=float(request.get("MaximumBatchingWindowInSeconds", 0)),
            max_retries=int(request.get("MaximumRetryAttempts", -1)),
            max_record_age_s=int(request.get("MaximumRecordAgeInSeconds", -1)),
            bisect_on_error=bool(request.get("BisectBatchOnFunctionError", False)),
            report_batch_item_failures="ReportBatchItemFailures" in request.get("FunctionResponseTypes", []),
            starting_position=StartingPosition(str(request.get("StartingPosition", "TRIM_HORIZON"))),
            **overrides,
        )


@dataclass(slots=True)
class MappingStats:
    invocations: int = 0
    function_errors: int = 0
    partial_failures: int = 0
    complete_failures: int = 0
    bisections: int = 0
    retries: int = 0
    records_received: int = 0
    records_succeeded: int = 0
    records_skipped: int = 0
    skipped_by_condition: dict[str, int] = field(default_factory=dict)
    destination_errors: int = 0
    read_errors: int = 0
    max_behind_ms: int = 0


def _iso(epoch_s: float) -> str:
    return datetime.fromtimestamp(epoch_s, UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass(kw_only=True)
class BatchRunner:
    """Delivers one batch of one shard until every record succeeded or was skipped.

    Pure of threads and I/O except through what it is given (function,
    destination, clocks, wait), so the semantics are unit-tested directly.
    ``wait(seconds)`` returns True when the mapping is stopping.
    """

    source: StreamSource
    function: Invocable
    function_arn: str
    config: MappingConfig
    destination: FailureDestination | None
    stats: MappingStats
    stats_lock: threading.Lock
    wait: Callable[[float], bool]
    wall_clock: Callable[[], float] = time.time
    _rng: random.Random = field(default_factory=random.Random, init=False)

    def run(self, shard_id: str, records: Sequence[SourceRecord]) -> None:
        """Return once the batch is settled; raise :class:`_Stopped` if the mapping stops first."""
        with self.stats_lock:
            self.stats.records_received += len(records)
        pending: deque[tuple[list[SourceRecord], int]] = deque([(list(records), 0)])
        while pending:
            batch, attempts = pending.popleft()
            batch = self._drop_expired(shard_id, batch, attempts)
            if not batch:
                continue
            error: FunctionError | None = None
            response: Any = None
            try:
                response = self.function.invoke({"Records": [r.event_record for r in batch]})
            except FunctionError as exc:
                error = exc
            attempts += 1
            failed_at = _COMPLETE_FAILURE if error is not None else self._first_failure(batch, response)
            with self.stats_lock:
                self.stats.invocations += 1
                if error is not None:
                    self.stats.function_errors += 1
                elif failed_at == _COMPLETE_FAILURE:
                    self.stats.complete_failures += 1
                elif failed_at is not None:
                    self.stats.partial_failures += 1
                self.stats.records_succeeded += len(batch) if failed_at is None else max(failed_at, 0)
            if failed_at is None:
                continue
            if error is not None:
                _log.warning("shard %s: %s", shard_id, error)
            remaining = batch if failed_at == _COMPLETE_FAILURE else batch[failed_at:]
            if self.config.max_retries != -1 and attempts > self.config.max_retries:
                self._skip(shard_id, remaining, RETRY_ATTEMPTS_EXHAUSTED, attempts, function_error=error is not None)
                continue
            if self.wait(self._backoff_s(attempts)):
                raise _Stopped
            with self.stats_lock:
                self.stats.retries += 1
                bisect = error is not None and self.config.bisect_on_error and len(remaining) > 1
                self.stats.bisections += bisect
            if bisect:
                middle = len(remaining) // 2
                pending.appendleft((remaining[middle:], attempts))
                pending.appendleft((remaining[:middle], attempts))
            else:
                pending.appendleft((remaining, attempts))

    def _first_failure(self, batch: Sequence[SourceRecord], response: Any) -> int | None:
        """None for success, the position of the lowest failed record, or ``_COMPLETE_FAILURE``."""
        if not self.config.report_batch_item_failures or not isinstance(response, Mapping):
            return None
        failures = response.get("batchItemFailures")
        if failures is None:
            return None
        if not isinstance(failures, list):
            return _COMPLETE_FAILURE
        if not failures:
            return None
        positions: dict[str, int] = {}
        for i, r in enumerate(batch):  # the first of equal numbers: a retry resumes no later than it
            positions.setdefault(r.sequence_number, i)
        ids: list[Any] = [f.get("itemIdentifier") if isinstance(f, Mapping) else None for f in failures]
        if not all(isinstance(i, str) and i in positions for i in ids):
            return _COMPLETE_FAILURE
        return min(positions[i] for i in ids)

    def _drop_expired(self, shard_id: str, batch: list[SourceRecord], attempts: int) -> list[SourceRecord]:
        if self.config.max_record_age_s == -1:
            return batch
        oldest_allowed = self.wall_clock() - self.config.max_record_age_s
        if expired := [r for r in batch if r.arrival_s < oldest_allowed]:
            self._skip(shard_id, expired, RECORD_AGE_EXCEEDED, attempts, function_error=False)
        return [r for r in batch if r.arrival_s >= oldest_allowed]

    def _skip(
        self, shard_id: str, records: Sequence[SourceRecord], condition: str, attempts: int, *, function_error: bool
    ) -> None:
        """Count and log the skip, and send the destination the record Lambda sends for a skipped batch."""
        first, last = records[0], records[-1]
        with self.stats_lock:
            self.stats.records_skipped += len(records)
            skipped = self.stats.skipped_by_condition
            skipped[condition] = skipped.get(condition, 0) + len(records)
        _log.warning(
            "%s: shard %s: skipping %d record(s) %s..%s (%s)",
            self.function.name,
            shard_id,
            len(records),
            first.sequence_number,
            last.sequence_number,
            condition,
        )
        if self.destination is None:
            return
        message: dict[str, Any] = {
            "requestContext": {
                "requestId": str(uuid.uuid4()),
                "functionArn": self.function_arn,
                "condition": condition,
                "approximateInvokeCount": attempts,
            },
            "version": "1.0",
            "timestamp": _iso(self.wall_clock()),
            self.source.batch_info_key: {
                "shardId": shard_id,
                "startSequenceNumber": first.sequence_number,
                "endSequenceNumber": last.sequence_number,
                "approximateArrivalOfFirstRecord": _iso(first.arrival_s),
                "approximateArrivalOfLastRecord": _iso(last.arrival_s),
                "batchSize": len(records),
                "streamArn": self.source.arn,
            },
        }
        if attempts:
            response: dict[str, Any] = {"statusCode": 200, "executedVersion": "$LATEST"}
            if function_error:
                response["functionError"] = "Unhandled"
            message["responseContext"] = response
        try:
            self.destination(message)
        except (ClientError, BotoCoreError) as exc:
            with self.stats_lock:
                self.stats.destination_errors += 1
            _log.error("%s: on-failure destination refused a record: %s", self.function.name, exc)

    def _backoff_s(self, attempts: int) -> float:
        ceiling = min(self.config.retry_max_s, self.config.retry_base_s * 2 ** (attempts - 1))
        return self._rng.uniform(0.0, ceiling)


class EventSourceMapping:
    """Polls every shard of ``source`` and invokes ``function`` (see the module docstring)."""

    def __init__(
        self,
        *,
        name: str,
        source: StreamSource,
        function: Invocable,
        function_arn: str,
        config: MappingConfig,
        destination: FailureDestination | None = None,
    ) -> None:
        self.name = name
        self.source = source
        self.config = config
        self.stats = MappingStats()
        self._stats_lock = threading.Lock()
        self._stop = threading.Event()
        self._changed = threading.Condition()
        #: Callers of ``wait_until_caught_up(flush=True)`` waiting now: batching windows are cut short meanwhile.
        self._flushing = 0
        self._shards: dict[str, _ShardPoller] = {}
        self._threads: list[threading.Thread] = []
        # One for every shard: a runner keeps no state between batches.
        self._runner = BatchRunner(
            source=source,
            function=function,
            function_arn=function_arn,
            config=config,
            destination=destination,
            stats=self.stats,
            stats_lock=self._stats_lock,
            wait=self._stop.wait,
        )

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> None:
        self._discover()
        refresher = threading.Thread(target=self._refresh_shards, name=f"{self.name}-shards", daemon=True)
        refresher.start()
        self._threads.append(refresher)

    def stop(self, timeout_s: float = 30.0) -> None:
        """Stop polling; an invocation under way finishes first (a thread cannot be interrupted)."""
        self._stop.set()
        with self._changed:
            self._changed.notify_all()
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
        if alive := [t.name for t in self._threads if t.is_alive()]:
            _log.warning("%s: threads still running after %.0f s: %s", self.name, timeout_s, ", ".join(alive))

    def snapshot(self) -> dict[str, Any]:
        with self._stats_lock:
            stats = asdict(self.stats)
        with self._changed:
            stats["shards"] = len(self._shards)
        return stats

    # -- waiting -------------------------------------------------------------

    def wait_until_caught_up(self, timeout_s: float, *, flush: bool = False) -> bool:
        """True once every shard has been read to its end by a read begun after this call, with
        nothing buffered or in flight; False on timeout (or when the mapping stopped). With ``flush``,
        what a batching window holds is delivered without waiting for the window's end."""
        with self._changed:
            marks = {shard: state.reads_started for shard, state in self._shards.items()}
            self._flushing += flush

            def done() -> bool:
                return all(
                    state.closed or state.caught_up_at_read > marks.get(shard, 0)
                    for shard, state in self._shards.items()
                )

            try:
                self._changed.wait_for(lambda: done() or self._stop.is_set(), timeout_s)
                return done()
            finally:
                self._flushing -= flush

    # -- shards --------------------------------------------------------------

    def _discover(self) -> None:
        for shard_id in self.source.shard_ids():
            with self._changed:
                if shard_id in self._shards:
                    continue
                poller = self._shards[shard_id] = _ShardPoller(self, shard_id)
            thread = threading.Thread(
                target=self._poll_shard, args=(poller,), name=f"{self.name}-{shard_id}", daemon=True
            )
            self._threads.append(thread)
            thread.start()

    def _refresh_shards(self) -> None:
        while not self._stop.wait(self.config.shard_refresh_s):
            try:
                self._discover()
            except (ClientError, BotoCoreError) as exc:
                _log.warning("%s: listing shards failed: %s", self.name, exc)

    def _poll_shard(self, poller: _ShardPoller) -> None:
        try:
            poller.run()
        except _Stopped:
            pass
        except Exception:
            _log.exception("%s: the poller of shard %s failed", self.name, poller.shard)
            raise
        finally:
            with self._changed:
                poller.closed = True
                self._changed.notify_all()


class _ShardPoller:
    """The loop of one shard: read, batch, deliver, checkpoint."""

    def __init__(self, mapping: EventSourceMapping, shard_id: str) -> None:
        self._mapping = mapping
        self.shard = shard_id
        self._config = mapping.config
        # Read by EventSourceMapping.wait_until_caught_up, under the mapping's condition like every change.
        self.reads_started = 0
        self.caught_up_at_read = 0
        self.closed = False
        self._buffer: deque[SourceRecord] = deque()
        self._buffered_bytes = 0
        self._buffered_since: float | None = None
        self._iterator: str | None = None
        self._last_sequence: str | None = None  # the last record read (delivered or buffered)
        self._read_failures = 0

    def run(self) -> None:
        mapping, config = self._mapping, self._config
        source = mapping.source
        closed = False
        while not mapping._stop.is_set():
            exhausted = closed
            read_id = 0
            if not closed and len(self._buffer) < config.batch_size and self._buffered_bytes < config.max_payload_bytes:
                with mapping._changed:
                    self.reads_started += 1
                    read_id = self.reads_started
                try:
                    if self._iterator is None:
                        self._iterator = source.iterator(self.shard, config.starting_position, self._last_sequence)
                    result = source.read(self.shard, self._iterator, config.batch_size - len(self._buffer))
                except (ClientError, BotoCoreError) as exc:
                    # An expired or invalid iterator, or a service error: start again after the last record read.
                    self._iterator = None
                    self._read_failures += 1
                    with mapping._stats_lock:
                        mapping.stats.read_errors += 1
                    _log.warning("%s: reading shard %s failed: %s", mapping.name, self.shard, exc)
                    if mapping._stop.wait(min(5.0, 0.1 * 2 ** min(self._read_failures, 6))):
                        return
                    continue
                self._read_failures = 0
                self._iterator = result.next_iterator
                closed = result.next_iterator is None
                if result.behind_ms is not None:
                    with mapping._stats_lock:
                        mapping.stats.max_behind_ms = max(mapping.stats.max_behind_ms, result.behind_ms)
                if result.records:
                    self._take(result.records)
                exhausted = not result.records or closed
            if self._ready(exhausted):
                self._deliver()
                continue
            if not self._buffer:
                if exhausted:
                    with mapping._changed:
                        self.caught_up_at_read = max(self.caught_up_at_read, read_id)
                        self.closed = closed
                        mapping._changed.notify_all()
                    if closed:
                        return
                    mapping._stop.wait(config.poll_interval_s)
                continue
            if exhausted:  # a batching window is open: wait for more records or for its end
                assert self._buffered_since is not None  # noqa: S101
                left = self._buffered_since + config.batching_window_s - time.monotonic()
                mapping._stop.wait(max(0.0, min(config.poll_interval_s, left)))

    def _take(self, records: Sequence[SourceRecord]) -> None:
        if not self._buffer:
            self._buffered_since = time.monotonic()
        self._buffer.extend(records)
        self._buffered_bytes += sum(r.size for r in records)
        self._last_sequence = records[-1].sequence_number

    def _ready(self, exhausted: bool) -> bool:
        if not self._buffer:
            return False
        config = self._config
        if len(self._buffer) >= config.batch_size or self._buffered_bytes >= config.max_payload_bytes:
            return True
        if not exhausted:
            return False  # more records are there to read first
        assert self._buffered_since is not None  # noqa: S101
        return self._mapping._flushing > 0 or time.monotonic() - self._buffered_since >= config.batching_window_s

    def _deliver(self) -> None:
        batch: list[SourceRecord] = []
        size = 0
        while self._buffer and len(batch) < self._config.batch_size:
            record = self._buffer[0]
            if batch and size + record.size > self._config.max_payload_bytes:
                break
            batch.append(self._buffer.popleft())
            size += record.size
        self._mapping._runner.run(self.shard, batch)
        # The batch is settled: the checkpoint moves past it.
        self._buffered_bytes -= size
        self._buffered_since = time.monotonic() if self._buffer else None
