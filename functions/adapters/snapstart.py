"""What a copy restored from a SnapStart snapshot must not reuse from init, and the hooks that mend it.

With SnapStart (the query function, docs/decisions.md) Lambda runs init once, when
a version is published, snapshots the process, and starts later execution
environments from that snapshot: hours or days later, many copies of it. Whatever
init made is then shared by every copy and is as old as the snapshot. What must not be:

* random generators: every copy would draw the same numbers (the random layout's
  suffixes, retry jitter, botocore's own retry jitter through the ``random`` module);
* caches whose age is read on a clock (the shard map, the cursor keys, occupancy):
  a restored copy's clock says nothing of the time spent in the snapshot
  (``time.monotonic`` may not even have moved), so such a cache is dropped whole;
* pooled connections: sockets of the machine the snapshot was taken on;
* credentials: resolved from the environment init had, not the restored one.

Owners register what they hold when they make it: a generator comes from
:func:`generator`, a cache calls :func:`forget_on_restore`. Both are held weakly,
so an object nobody uses any more is not kept alive for a restore. The handler of
a SnapStart function calls :func:`register_runtime_hooks` as its init's last step,
with the request it serves before the snapshot (``prime``): what Python, botocore
and Powertools build on first use is then built into the snapshot, and what that
request read is forgotten by every restored copy.

``snapshot_restore_py`` (the runtime hooks) exists only in Lambda's Python
runtime; elsewhere (tests, local mode) nothing is registered and nothing runs.
"""

from __future__ import annotations

import random
import threading
import time
import weakref
from collections.abc import Callable
from typing import Generic, Protocol, TypeVar

from adapters import clients
from adapters.observability import logger


class Forgetful(Protocol):
    def forget(self) -> None:
        """Drop what is held, so the next use loads it again as after a cold start."""


_generators: weakref.WeakSet[random.Random] = weakref.WeakSet()
_caches: weakref.WeakSet[Forgetful] = weakref.WeakSet()


def generator() -> random.Random:
    """A generator seeded from the OS, and seeded again after every restore."""
    made = random.Random()
    _generators.add(made)
    return made


def forget_on_restore(cache: Forgetful) -> None:
    """Have ``cache.forget()`` called after every restore."""
    _caches.add(cache)


T = TypeVar("T")


class Cached(Generic[T]):
    """What ``loader`` reads, read again at most once per ``ttl_ms``; thread-safe. A copy restored from
    a SnapStart snapshot reads it again (the time spent in the snapshot is on no clock of its own)."""

    def __init__(
        self,
        loader: Callable[[], T],
        ttl_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._loader = loader
        self._ttl_s = ttl_ms / 1000
        self._clock = clock
        self._lock = threading.Lock()
        self._value: T | None = None
        self._loaded_at = float("-inf")
        forget_on_restore(self)

    def forget(self) -> None:
        with self._lock:
            self._value, self._loaded_at = None, float("-inf")

    def current(self) -> T:
        value = self._value
        if value is not None and self._clock() - self._loaded_at < self._ttl_s:
            return value
        with self._lock:
            if self._value is not None and self._clock() - self._loaded_at < self._ttl_s:
                return self._value
            fetched_at = self._clock()
            self._value = self._loader()
            self._loaded_at = fetched_at
            return self._value

    def reload(self, loader: Callable[[], T]) -> T:
        """What ``loader`` reads now (uncached), kept as the cached value from now."""
        fetched_at = self._clock()
        value = loader()
        with self._lock:
            self._value, self._loaded_at = value, fetched_at
        return value


def before_snapshot(prime: Callable[[], None] | None = None) -> None:
    """Runs once, at publish, after init: ``prime``, then every pooled connection closed (the snapshot
    keeps none). A priming that fails is logged and the snapshot is taken all the same: a restored
    copy then builds on its first request what priming would have built."""
    if prime is not None:
        try:
            prime()
        except Exception:
            logger.warning("priming before the snapshot failed", exc_info=True)
    clients.close_connections()


def after_restore() -> None:
    """Runs in every restored copy before its first request."""
    random.seed()  # the module's generator: botocore's retry jitter, and every caller given no generator
    for made in list(_generators):
        made.seed()
    clients.close_connections()  # whatever a later before-snapshot hook may have opened
    clients.renew_credentials()
    for cache in list(_caches):
        cache.forget()


def register_runtime_hooks(*, prime: Callable[[], None] | None = None) -> bool:
    """Register :func:`before_snapshot` (with ``prime``) and :func:`after_restore` with Lambda's runtime;
    False where there is no such runtime (the module exists only in Lambda's Python runtime)."""
    try:
        from snapshot_restore_py import (  # type: ignore[import-not-found]  # noqa: PLC0415
            register_after_restore,
            register_before_snapshot,
        )
    except ImportError:
        return False
    register_before_snapshot(before_snapshot, prime)
    register_after_restore(after_restore)
    return True
