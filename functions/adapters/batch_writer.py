"""BatchWriteItem done properly: chunks of 25, several in flight, retries, attribution.

What boto3's own ``batch_writer`` does not do, and this does:

* every item is followed to an outcome: *written*, *unwritten* (transient:
  throttled, unprocessed or out of time; the caller has it redelivered) or
  *rejected* (DynamoDB refused the item itself; retrying cannot help);
* ``UnprocessedItems`` and throttling (``ProvisionedThroughputExceededException``,
  ``ThrottlingException``, ``RequestLimitExceeded``, 5xx, dropped connections)
  are retried with exponential backoff and full jitter, never past a
  :class:`~adapters.retry.Deadline`;
* a ``ValidationException`` on a call of many items is narrowed down by
  writing them one by one, so one bad item is rejected and its 24 neighbours
  are still written;
* chunks run on a bounded thread pool, so a batch of 10,000 readings does not
  wait for 400 calls in a row.

Data access is behind :class:`BatchWriteApi`, the one method of the boto3
DynamoDB client this module calls: the real client satisfies it, tests pass a
fake, and :mod:`local_runtime.faults` wraps either one to inject throttling and
unprocessed items (which moto never produces).

Items are given in DynamoDB's low-level form (``{"S": ...}``, ``{"B": bytes}``);
build them with :func:`serialize_item`. We use the low-level client and our own
serializer instead of the resource layer's ``TypeSerializer``: the item shape is
known (strings, numbers, bytes, maps of them), floats become numbers through ``repr`` (the
shortest text that round-trips, the same digits the producer sent), and a
number DynamoDB would refuse (more than 38 significant digits) is caught here
as a per-item :class:`UnstorableValue` instead of failing a whole call.
"""

from __future__ import annotations

import base64
import json
import random
import time
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from decimal import Context, Decimal
from typing import Any, Protocol

from botocore.exceptions import ClientError, HTTPClientError
from botocore.exceptions import ConnectionError as BotoConnectionError

from adapters.clients import DYNAMODB_RETRYABLE, DYNAMODB_THROTTLING, error_code, error_message, http_status
from adapters.observability import logger
from adapters.retry import Backoff, Clock, Deadline, RetryLoop, Sleep

MAX_BATCH_ITEMS = 25
MAX_NUMBER_DIGITS = 38
# normalize() rounds to the context's precision (28 by default), which would hide
# a 41-digit number; DynamoDB's range needs at most 126 digits plus the exponent.
_EXACT = Context(prec=200, Emax=999_999, Emin=-999_999)


AttributeValue = dict[str, Any]
LowLevelItem = dict[str, AttributeValue]


class BatchWriteApi(Protocol):
    """The one DynamoDB call the writer makes (a boto3 DynamoDB client satisfies it)."""

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


class UnstorableValue(ValueError):  # noqa: N818 - reads as the condition
    """A value DynamoDB cannot store; ``path`` names the attribute (``m.temp``)."""

    def __init__(self, path: str, reason: str) -> None:
        self.path = path
        self.reason = reason
        super().__init__(f"{path}: {reason}")


# -- serialisation -------------------------------------------------------------


def serialize_item(item: Mapping[str, object]) -> LowLevelItem:
    """The low-level DynamoDB form of a plain-Python item."""
    return _map(item)


def _join(parent: str, child: str) -> str:
    if not child:
        return parent
    return f"{parent}{child}" if child.startswith("[") else f"{parent}.{child}"


def _map(value: Mapping[Any, object]) -> dict[str, AttributeValue]:
    out: dict[str, AttributeValue] = {}
    for key, inner in value.items():
        try:
            out[str(key)] = _value(inner)
        except UnstorableValue as exc:  # the path is built only on the (rare) way out
            raise UnstorableValue(_join(str(key), exc.path), exc.reason) from None
    return out


def _value(value: object) -> AttributeValue:
    # Exact type checks first: this runs for every attribute of every item.
    kind = type(value)
    if kind is str:
        return {"S": value}
    if kind is float or kind is int or kind is Decimal:
        return {"N": number_text(value)}  # type: ignore[arg-type]
    if kind is dict:
        return {"M": _map(value)}  # type: ignore[arg-type]
    if kind is bytes:  # a block's payload: boto3 takes raw bytes for B (base64 on the wire)
        return {"B": value}
    if isinstance(value, bool):
        return {"BOOL": value}
    if isinstance(value, str):
        return {"S": str(value)}
    if isinstance(value, int | float | Decimal):
        return {"N": number_text(value)}
    if value is None:
        return {"NULL": True}
    if isinstance(value, Mapping):
        return {"M": _map(value)}
    if isinstance(value, set | frozenset) and value and all(type(v) is str for v in value):
        return {"SS": sorted(value)}  # a cluster block's flagged entities (``keydesign.writetier.ROLLUP_OWNED``)
    if isinstance(value, list | tuple):
        out: list[AttributeValue] = []
        for i, inner in enumerate(value):
            try:
                out.append(_value(inner))
            except UnstorableValue as exc:
                raise UnstorableValue(_join(f"[{i}]", exc.path), exc.reason) from None
        return {"L": out}
    raise UnstorableValue("", f"has type {kind.__name__}, which this writer does not store")


def number_text(value: int | float | Decimal) -> str:
    """A number as DynamoDB's ``N`` text, refusing what DynamoDB would refuse (more than 38 significant
    digits, a magnitude outside 1E-130 to 9.99...E+125). Plain float text, and ints of up to 38 digits,
    are within both and are not checked."""
    if isinstance(value, float):
        text = repr(value)
        if "e" not in text and "n" not in text:  # plain digits: the common case, no Decimal needed
            return text
        return _decimal_text(Decimal(text))
    if isinstance(value, int):
        text = str(value)
        if len(text) <= MAX_NUMBER_DIGITS:
            return text
        return _decimal_text(Decimal(value))
    return _decimal_text(value)


def _decimal_text(value: Decimal) -> str:
    if not value.is_finite():
        raise UnstorableValue("", "is not a finite number")
    normal = value.normalize(_EXACT)
    if len(normal.as_tuple().digits) > MAX_NUMBER_DIGITS:
        raise UnstorableValue("", f"has more than the {MAX_NUMBER_DIGITS} significant digits DynamoDB stores")
    # Within 38 digits, a magnitude from 1E-130 to 9.99...E+125 is one whose leading digit is at 10**-130..10**125.
    if normal and not -130 <= normal.adjusted() <= 125:
        raise UnstorableValue("", f"{normal} is outside DynamoDB's number range (1E-130 to 9.99E+125 in magnitude)")
    return str(normal)


# -- the writer ----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class PendingWrite:
    """One item to put, in low-level form, with its table and key."""

    table: str
    pk: str
    sk: str
    item: LowLevelItem


@dataclass(slots=True)
class WriteReport:
    """What became of every item of one :meth:`BatchWriter.write`, by index.

    Every index is in exactly one of ``written``, ``unwritten`` (transient;
    redeliver) and ``rejected`` (DynamoDB refused the item; do not retry).
    """

    written: set[int] = field(default_factory=set)
    unwritten: dict[int, str] = field(default_factory=dict)
    rejected: dict[int, str] = field(default_factory=dict)
    calls: int = 0
    items_retried: int = 0
    throttled_calls: int = 0
    consumed_wcu: float = 0.0
    latencies_ms: list[float] = field(default_factory=list)

    def merge(self, other: WriteReport, positions: Sequence[int] | None = None) -> None:
        """Add ``other``'s outcomes; with ``positions``, its index i is this report's ``positions[i]``."""
        at = positions.__getitem__ if positions is not None else int
        self.written.update(at(i) for i in other.written)
        self.unwritten.update((at(i), why) for i, why in other.unwritten.items())
        self.rejected.update((at(i), why) for i, why in other.rejected.items())
        self.calls += other.calls
        self.items_retried += other.items_retried
        self.throttled_calls += other.throttled_calls
        self.consumed_wcu += other.consumed_wcu
        self.latencies_ms.extend(other.latencies_ms)


def plan_chunks(writes: Sequence[PendingWrite]) -> list[list[int]]:
    """Indices of ``writes`` in chunks of at most :data:`MAX_BATCH_ITEMS`, each chunk of one table.

    BatchWriteItem could carry several tables in one call, but then a table
    that is missing (a per-period table not created yet, or dropped) or
    throttled fails its neighbours' items too. One table per call costs at
    most one extra call per table and keeps failures where they belong.
    """
    by_table: dict[str, list[int]] = {}
    for index, write in enumerate(writes):
        by_table.setdefault(write.table, []).append(index)
    return [
        indices[start : start + MAX_BATCH_ITEMS]
        for _, indices in sorted(by_table.items())
        for start in range(0, len(indices), MAX_BATCH_ITEMS)
    ]


class BatchWriter:
    """Writes items with BatchWriteItem; thread-safe; one instance per container."""

    def __init__(
        self,
        api: BatchWriteApi,
        *,
        concurrency: int = 8,
        clock: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
    ) -> None:
        self._api = api
        self._clock = clock
        self._retry = RetryLoop(Backoff(), sleep=sleep, rng=rng)
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="batch-write")

    def close(self) -> None:
        self._pool.shutdown(wait=True)

    def write(self, writes: Sequence[PendingWrite], deadline: Deadline) -> WriteReport:
        report = WriteReport()
        for chunk in self.submit(writes, deadline):
            report.merge(chunk.result())
        return report

    def submit(self, writes: Sequence[PendingWrite], deadline: Deadline) -> list[Future[WriteReport]]:
        """Start writing ``writes``, a chunk's report a future (its indices are ``writes``'); keys must be
        unique (collapse duplicates first)."""
        keys = {(w.table, w.pk, w.sk) for w in writes}
        if len(keys) != len(writes):
            raise ValueError("duplicate keys in one write: collapse them before writing (BatchWriteItem refuses them)")
        return [self._pool.submit(self._write_chunk, writes, chunk, deadline) for chunk in plan_chunks(writes)]

    # -- one chunk -------------------------------------------------------------

    def _write_chunk(self, writes: Sequence[PendingWrite], chunk: list[int], deadline: Deadline) -> WriteReport:
        report = WriteReport()
        report.items_retried += self._retry.run(
            list(chunk),
            lambda pending, attempt: self._call(writes, pending, attempt, deadline, report),
            deadline,
            lambda pending, why: _give_up(report, pending, why),
            unstarted="not attempted",
        )
        return report

    def _call(
        self, writes: Sequence[PendingWrite], pending: list[int], attempt: int, deadline: Deadline, report: WriteReport
    ) -> tuple[list[int], str]:
        """One BatchWriteItem of ``pending``; returns the items left to retry, and why."""
        started = self._clock()
        try:
            response = self._api.batch_write_item(
                RequestItems=_request_items(writes, pending), ReturnConsumedCapacity="TOTAL"
            )
        except ClientError as exc:
            report.calls += 1
            report.latencies_ms.append((self._clock() - started) * 1000)
            code = error_code(exc) or "Unknown"
            message = error_message(exc)
            if code in DYNAMODB_RETRYABLE or http_status(exc) >= 500:
                report.throttled_calls += code in DYNAMODB_THROTTLING
                return pending, f"{code} on attempt {attempt}"
            if code == "ValidationException" and len(pending) == 1:
                report.rejected[pending[0]] = f"DynamoDB refused the item: {message or code}"
            elif code == "ValidationException":
                # One bad item fails the whole call: write them one by one to find it.
                for index in pending:
                    report.merge(self._write_chunk(writes, [index], deadline))
            else:
                _give_up(report, pending, f"{code}: {message}" if message else code)
            return [], ""
        except (BotoConnectionError, HTTPClientError) as exc:
            report.calls += 1
            return pending, f"{type(exc).__name__} on attempt {attempt}"
        except Exception as exc:  # an unknown failure must not lose the items: hand them back
            logger.exception("BatchWriteItem failed unexpectedly; the items will be redelivered")
            _give_up(report, pending, f"unexpected {type(exc).__name__}: {exc}")
            return [], ""
        report.calls += 1
        report.latencies_ms.append((self._clock() - started) * 1000)
        report.consumed_wcu += _consumed(response)
        left = _unprocessed(response, writes, pending)
        report.written.update(i for i in pending if i not in left)
        return [i for i in pending if i in left], f"{len(left)} UnprocessedItems on attempt {attempt}"


def send_prebuilt_json(api: object) -> None:
    """Have a boto3 DynamoDB client send BatchWriteItem's parameters as they are, as JSON.

    The items are already in DynamoDB's wire form (:func:`serialize_item`), yet botocore's
    serializer walks every attribute against the service model: about a third of the call's CPU,
    which the writer threads take from the one that is validating readings. ``json.dumps`` writes
    the same body (the JSON protocol is the parameters themselves, a Binary value as base64 text,
    as botocore writes it) at a tenth of that: botocore is handed each table with no items to
    walk, and the body is put back before the request is signed. A parameter ``json`` cannot
    write leaves the call to botocore's serializer. Only for a client created with
    ``parameter_validation`` off (ingest's write client): its validation would check the
    stand-in. Anything that is not a boto3 client is left alone.
    """
    events = getattr(getattr(api, "meta", None), "events", None)
    if events is None:
        return
    # Last: a handler that checks the parameters (botocore's Stubber) sees them whole.
    events.register_last("before-parameter-build.dynamodb.BatchWriteItem", _stash_body, unique_id="batch-writer-stash")
    events.register("before-call.dynamodb.BatchWriteItem", _restore_body, unique_id="batch-writer-restore")


def _stash_body(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    try:
        body = json.dumps(params, separators=(",", ":"), default=_base64).encode()
    except (TypeError, ValueError):
        return
    context["batch_writer_body"] = body
    params["RequestItems"] = dict.fromkeys(params["RequestItems"], ())  # the tables stay, for endpoint rules


def _base64(value: object) -> str:
    """The JSON protocol's form of a blob (``B``, and each member of ``BS``): base64 text."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise TypeError(f"{type(value).__name__} is not JSON")


def _restore_body(params: dict[str, Any], context: dict[str, Any], **_: Any) -> None:
    body = context.pop("batch_writer_body", None)
    if body is not None:
        params["body"] = body


def _give_up(report: WriteReport, indices: Iterable[int], reason: str) -> None:
    for index in indices:
        report.unwritten[index] = reason


def _request_items(writes: Sequence[PendingWrite], indices: Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    request: dict[str, list[dict[str, Any]]] = {}
    for index in indices:
        write = writes[index]
        request.setdefault(write.table, []).append({"PutRequest": {"Item": write.item}})
    return request


def _consumed(response: Mapping[str, Any]) -> float:
    total = 0.0
    for entry in response.get("ConsumedCapacity") or ():
        units = entry.get("CapacityUnits") if isinstance(entry, Mapping) else None
        if isinstance(units, int | float):
            total += float(units)
    return total


def _unprocessed(response: Mapping[str, Any], writes: Sequence[PendingWrite], pending: Sequence[int]) -> set[int]:
    """Indices (among ``pending``) that DynamoDB handed back unprocessed."""
    raw = response.get("UnprocessedItems") or {}
    if not raw:
        return set()
    by_key = {(writes[i].table, writes[i].pk, writes[i].sk): i for i in pending}
    left: set[int] = set()
    for table, requests in raw.items():
        for request in requests:
            item = request.get("PutRequest", {}).get("Item", {})
            index = by_key.get((table, item.get("pk", {}).get("S"), item.get("sk", {}).get("S")))
            if index is not None:
                left.add(index)
    return left
