"""Faults on demand, for what moto never fails: local-mode tooling, kept out of the Lambda asset.

moto never throttles, never returns ``UnprocessedItems`` and never fails part
of a ``PutRecords`` or ``SendMessageBatch``. The wrappers here sit between a
caller and a real (or moto-backed, or fake) client and make it do so, exactly
as the services do on the wire:

* **throttle**: the call raises the ``ClientError`` the service raises
  (``ProvisionedThroughputExceededException`` by default) and nothing of it
  is applied;
* **partial**: part of the call's items are held back and never reach the
  inner client; the response reports them (``UnprocessedItems``, a failed
  ``PutRecords`` entry, a ``Failed`` SQS entry) and the rest really happens;
* **latency**: every call first sleeps.

A :class:`FaultPlan` says when: the first N calls, then a rate. Tests use it
to script a scenario; every wrapper counts what it did, so a test can assert
that the fault really happened. The local runtime wraps the in-process ingest
function's DynamoDB client with one, from ``--faults``
(``"throttle=2,partial=3,fraction=0.5,rate=0.05,invoke_errors=0.1"``, parsed by
:class:`LocalFaults`), and also fails ``invoke_errors`` of the invocations
after the handler ran, so the event source mapping retries and bisects and
redelivery has to be harmless.
"""

from __future__ import annotations

import math
import random
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any

from botocore.exceptions import ClientError

from adapters.retry import Sleep


@dataclass(frozen=True, slots=True)
class FaultPlan:
    """When to fail. Calls are numbered from 1 per wrapper.

    ``throttle_first`` calls raise ``throttle_code``; after them each call
    raises with probability ``throttle_rate``. Of the calls that get through,
    the first ``partial_first`` hold back ``partial_fraction`` of their items
    (at least one); after them each does so with probability ``partial_rate``.
    """

    throttle_first: int = 0
    throttle_rate: float = 0.0
    throttle_code: str = "ProvisionedThroughputExceededException"
    partial_first: int = 0
    partial_rate: float = 0.0
    partial_fraction: float = 0.5
    latency_ms: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        for name in ("throttle_rate", "partial_rate", "partial_fraction"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"fault plan {name} must lie in 0..1, got {value}")
        if self.throttle_first < 0 or self.partial_first < 0 or self.latency_ms < 0:
            raise ValueError("fault plan counts and latency must not be negative")

    _ALIASES = {  # noqa: RUF012 - a class constant, read only
        "throttle": "throttle_first",
        "partial": "partial_first",
        "rate": "throttle_rate",
        "partial_rate": "partial_rate",
        "fraction": "partial_fraction",
        "code": "throttle_code",
        "latency": "latency_ms",
        "seed": "seed",
    }

    @classmethod
    def parse(cls, spec: str) -> FaultPlan:
        """Parse ``key=value,...`` (keys: throttle, rate, code, partial, partial_rate,
        fraction, latency, seed, or the field names). Empty means no faults."""
        values: dict[str, Any] = {}
        types = {f.name: f.type for f in fields(cls)}
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, raw = part.partition("=")
            name = cls._ALIASES.get(key.strip(), key.strip())
            if not sep or name not in types:
                raise ValueError(f"fault spec {part!r}: expected key=value with a key of {', '.join(cls._ALIASES)}")
            kind = str(types[name])
            try:
                if "float" in kind:
                    values[name] = float(raw)
                elif "int" in kind:
                    values[name] = int(raw)
                else:
                    values[name] = raw.strip()
            except ValueError:
                number = "a whole number" if "int" in kind else "a number"
                raise ValueError(f"fault spec {part!r}: {raw!r} is not {number}") from None
        return cls(**values)


@dataclass(slots=True)
class FaultCounters:
    calls: int = 0
    throttled: int = 0
    partial_calls: int = 0
    held_back: int = 0


def service_error(code: str, operation: str, message: str = "", status: int = 400) -> ClientError:
    """A ``ClientError`` shaped like the one botocore raises for ``code``."""
    return ClientError(
        {
            "Error": {"Code": code, "Message": message or f"injected {code}"},
            "ResponseMetadata": {"HTTPStatusCode": status, "RequestId": "injected-fault"},
        },
        operation,
    )


class _Injector:
    def __init__(self, inner: Any, plan: FaultPlan, sleep: Sleep = time.sleep) -> None:
        self.inner = inner
        self.plan = plan
        self.counters = FaultCounters()
        self._sleep = sleep
        self._rng = random.Random(plan.seed)
        self._lock = threading.Lock()
        self._passed = 0

    def __getattr__(self, name: str) -> Any:
        # Everything not faulted goes straight to the wrapped client.
        return getattr(self.inner, name)

    def _begin(self, operation: str) -> bool:
        """Count the call, maybe sleep or throttle; True when items should be held back."""
        plan = self.plan
        if plan.latency_ms:
            self._sleep(plan.latency_ms / 1000)
        with self._lock:
            self.counters.calls += 1
            if self.counters.calls <= plan.throttle_first or (
                plan.throttle_rate and self._rng.random() < plan.throttle_rate
            ):
                self.counters.throttled += 1
                raise service_error(plan.throttle_code, operation, "Rate exceeded (injected)")
            self._passed += 1
            return self._passed <= plan.partial_first or (
                plan.partial_rate > 0 and self._rng.random() < plan.partial_rate
            )

    def _hold_back(self, count: int) -> set[int]:
        """Positions (of ``count`` items) to hold back this call."""
        if count == 0:
            return set()
        keep = max(1, math.ceil(count * self.plan.partial_fraction))
        with self._lock:
            held = set(self._rng.sample(range(count), min(keep, count)))
            self.counters.partial_calls += 1
            self.counters.held_back += len(held)
        return held


class FaultInjectingDynamoDB(_Injector):
    """Wraps a DynamoDB client: ``batch_write_item`` throttles or leaves items unprocessed."""

    def batch_write_item(self, **kwargs: Any) -> Mapping[str, Any]:
        partial = self._begin("BatchWriteItem")
        request: Mapping[str, Sequence[Mapping[str, Any]]] = kwargs["RequestItems"]
        if not partial:
            return dict(self.inner.batch_write_item(**kwargs))
        flat = [(table, req) for table, reqs in request.items() for req in reqs]
        held = self._hold_back(len(flat))
        send: dict[str, list[Mapping[str, Any]]] = {}
        back: dict[str, list[Mapping[str, Any]]] = {}
        for position, (table, req) in enumerate(flat):
            (back if position in held else send).setdefault(table, []).append(req)
        response: dict[str, Any] = {"UnprocessedItems": {}}
        if send:
            response = dict(self.inner.batch_write_item(**{**kwargs, "RequestItems": send}))
        unprocessed = {t: list(r) for t, r in (response.get("UnprocessedItems") or {}).items()}
        for table, reqs in back.items():
            unprocessed.setdefault(table, []).extend(reqs)
        response["UnprocessedItems"] = unprocessed
        return response


class FaultInjectingKinesis(_Injector):
    """Wraps a Kinesis client: ``put_records`` throttles or fails some records."""

    def put_records(self, **kwargs: Any) -> Mapping[str, Any]:
        partial = self._begin("PutRecords")
        records: Sequence[Mapping[str, Any]] = kwargs["Records"]
        if not partial:
            return dict(self.inner.put_records(**kwargs))
        held = self._hold_back(len(records))
        send = [r for i, r in enumerate(records) if i not in held]
        inner_results: list[Mapping[str, Any]] = []
        failed = 0
        if send:
            inner = self.inner.put_records(**{**kwargs, "Records": send})
            inner_results = list(inner.get("Records", []))
            failed = int(inner.get("FailedRecordCount", 0))
        refused = {
            "ErrorCode": "ProvisionedThroughputExceededException",
            "ErrorMessage": "Rate exceeded for shard (injected)",
        }
        passed = iter(inner_results)
        results = [dict(refused) if i in held else next(passed) for i in range(len(records))]
        return {"FailedRecordCount": failed + len(held), "Records": results}


class FaultInjectingSQS(_Injector):
    """Wraps an SQS client: ``send_message_batch`` throttles or fails some entries."""

    def send_message_batch(self, **kwargs: Any) -> Mapping[str, Any]:
        partial = self._begin("SendMessageBatch")
        entries: Sequence[Mapping[str, Any]] = kwargs["Entries"]
        if not partial:
            return dict(self.inner.send_message_batch(**kwargs))
        held = self._hold_back(len(entries))
        send = [e for i, e in enumerate(entries) if i not in held]
        response: dict[str, Any] = {"Successful": [], "Failed": []}
        if send:
            response = dict(self.inner.send_message_batch(**{**kwargs, "Entries": send}))
        refused = {"SenderFault": False, "Code": "InternalError", "Message": "injected failure"}
        response["Failed"] = [*response.get("Failed", []), *({"Id": entries[i]["Id"], **refused} for i in sorted(held))]
        response.setdefault("Successful", [])
        return response


_INVOKE_KEYS = ("invoke_errors", "errors")


@dataclass(frozen=True, slots=True)
class LocalFaults:
    writes: FaultPlan | None = None
    invocation_error_fraction: float = 0.0
    seed: int | None = None

    @classmethod
    def parse(cls, spec: str) -> LocalFaults:
        """Parse a ``key=value,...`` spec; raise ValueError naming the part that is wrong."""
        fraction, rest = 0.0, []
        for part in filter(None, (p.strip() for p in spec.split(","))):
            key, sep, raw = part.partition("=")
            if key.strip() not in _INVOKE_KEYS or not sep:
                rest.append(part)
                continue
            try:
                fraction = float(raw)
            except ValueError:
                raise ValueError(f"fault spec {part!r}: {raw!r} is not a number") from None
            if not 0.0 <= fraction <= 1.0:
                raise ValueError(f"fault spec {part!r}: the fraction of invocations must lie in 0..1")
        plan = FaultPlan.parse(",".join(rest))
        writes = None if plan == FaultPlan(seed=plan.seed) else plan  # only a seed: no write faults
        return cls(writes=writes, invocation_error_fraction=fraction, seed=plan.seed)

    @property
    def active(self) -> bool:
        return self.writes is not None or self.invocation_error_fraction > 0

    def describe(self) -> str:
        parts = []
        if self.writes is not None:
            w = self.writes
            if w.throttle_first or w.throttle_rate:
                parts.append(f"BatchWriteItem throttled: first {w.throttle_first} call(s), then {w.throttle_rate:.0%}")
            if w.partial_first or w.partial_rate:
                parts.append(
                    f"UnprocessedItems ({w.partial_fraction:.0%} of a call): first {w.partial_first} call(s), "
                    f"then {w.partial_rate:.0%}"
                )
            if w.latency_ms:
                parts.append(f"{w.latency_ms:g} ms added to every BatchWriteItem")
        if self.invocation_error_fraction:
            parts.append(f"{self.invocation_error_fraction:.0%} of invocations fail")
        return "; ".join(parts) or "none"
