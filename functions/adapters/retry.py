"""Retry timing shared by every writer: exponential backoff with full jitter, and a deadline.

Full jitter (sleep a uniform random time in ``[0, min(cap, base * 2**attempt)]``)
is the variant AWS recommends for contended resources: it spreads retries of
many concurrent writers instead of having them collide again in lock-step.

A :class:`Deadline` turns a Lambda's remaining time into a point on a clock
that workers compare against before every call and every sleep: a retry that
would start too late to finish is not started, its items are handed back to
the caller instead (who reports them for redelivery). :class:`RetryLoop` is the
one loop every caller that retries what is left runs: the batch writer, the
rejects publisher, the producer, the query client, and the BatchGetItem reads
of the hot-key control table and the rollup store (each with its own backoff,
attempts and sleep, which tests inject); :func:`batch_get` is those reads' loop.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

from adapters.snapstart import generator

Clock = Callable[[], float]
Sleep = Callable[[float], None]
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Backoff:
    """Exponential backoff with full jitter, in milliseconds."""

    base_ms: int = 50
    max_delay_ms: int = 5_000

    def ceiling_s(self, attempt: int) -> float:
        """Upper bound of the delay before retry number ``attempt`` (1 = first retry)."""
        exponent = min(max(attempt - 1, 0), 30)
        return min(self.max_delay_ms, self.base_ms * (1 << exponent)) / 1000

    def delay_s(self, attempt: int, rng: random.Random | None = None) -> float:
        """A delay drawn uniformly from ``[0, ceiling_s(attempt)]``."""
        return (rng or random).uniform(0.0, self.ceiling_s(attempt))


@dataclass(frozen=True, slots=True)
class Deadline:
    """A point on ``clock`` after which no new call or sleep starts."""

    at: float
    clock: Clock = field(default=time.monotonic, compare=False)

    @classmethod
    def after_ms(cls, budget_ms: float, clock: Clock = time.monotonic) -> Deadline:
        return cls(clock() + max(budget_ms, 0.0) / 1000, clock)

    @classmethod
    def never(cls, clock: Clock = time.monotonic) -> Deadline:
        return cls(float("inf"), clock)

    def expired(self) -> bool:
        return self.clock() >= self.at

    def allows_sleep(self, seconds: float) -> bool:
        """True when sleeping ``seconds`` still leaves time before the deadline."""
        return self.clock() + seconds < self.at


class RetryLoop:
    """Call, back off with full jitter, call again with what is left: until nothing
    is left, the deadline would pass, or ``max_attempts`` calls were made.
    Thread-safe: one per writer, shared by its worker threads."""

    def __init__(
        self,
        backoff: Backoff,
        *,
        sleep: Sleep = time.sleep,
        rng: random.Random | None = None,
        max_attempts: int | None = None,
    ) -> None:
        self._backoff = backoff
        self._sleep = sleep
        self._rng = rng or generator()
        self._max_attempts = max_attempts

    def run(
        self,
        pending: list[T],
        call: Callable[[list[T], int], tuple[list[T], str]],
        deadline: Deadline,
        give_up: Callable[[list[T], str], None],
        *,
        unstarted: str,
    ) -> int:
        """``call(pending, attempt)`` (attempts from 1) returns the items to retry and why.
        Items left when time or attempts run out go to ``give_up`` with the reason
        (``unstarted`` says what the first call would have done). Returns how many
        items were retried."""
        retried = attempt = 0
        why = ""
        while pending:
            if self._max_attempts is not None and attempt >= self._max_attempts:
                give_up(pending, f"{why}; gave up after {attempt} attempts")
                break
            if attempt == 0 and deadline.expired():
                give_up(pending, f"{unstarted} because the invocation's time budget ran out")
                break
            if attempt > 0:
                delay = self._backoff.delay_s(attempt, self._rng)  # Random's generator is thread-safe (in C)
                if not deadline.allows_sleep(delay):
                    give_up(pending, f"{why}; not retried because the invocation's time budget ran out")
                    break
                self._sleep(delay)
                retried += len(pending)
            attempt += 1
            pending, why = call(pending, attempt)
        return retried


#: BatchGetItem's key limit per call.
MAX_GET_KEYS = 100


def batch_get(
    dynamodb: Any,
    table: str,
    keys: Sequence[Mapping[str, Any]],
    *,
    retry: RetryLoop,
    give_up: Callable[[list[Any], str], None],
    on_response: Callable[[Mapping[str, Any]], None],
    consistent: bool,
    **call: Any,
) -> None:
    """Read ``keys`` of ``table`` with BatchGetItem, :data:`MAX_GET_KEYS` a call, each response to
    ``on_response``; the keys a call hands back unprocessed are asked again on ``retry``'s backoff, and
    those still unprocessed when its attempts run out go to ``give_up``. ``call``: more of the call's
    parameters (``ReturnConsumedCapacity``)."""

    def read(pending: list[Any], _attempt: int) -> tuple[list[Any], str]:
        response = dynamodb.batch_get_item(
            RequestItems={table: {"Keys": pending, "ConsistentRead": consistent}}, **call
        )
        on_response(response)
        return list((response.get("UnprocessedKeys") or {}).get(table, {}).get("Keys", [])), "unprocessed"

    for first in range(0, len(keys), MAX_GET_KEYS):
        retry.run(list(keys[first : first + MAX_GET_KEYS]), read, Deadline.never(), give_up, unstarted="not read")
