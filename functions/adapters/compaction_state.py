"""Where readers get the compaction watermark: the state item in the control table, read through a cache.

Compaction (the write tier's, :mod:`keydesign.writetier`) keeps its state in the control
table (:func:`keydesign.writetier.state_key`); its ``through`` is the end of the last hour
whose group items are compacted. Plans read an hour ending by it from its compacted blocks,
a later hour from its group items (``Layout.plan_entity``/``plan_range``), under every G the
state says may hold it (``CompactionState.earlier_for``).

A stale watermark is safe, so it is cached (for ``SHARD_MAP_CACHE_TTL``) and read
eventually consistent: the watermark only moves forward, so a stale copy is an older one,
and an older watermark sends reads of the hours it missed to their group items, which
outlive compaction by :data:`keydesign.writetier.KEEP_MS` (days, against a cache of a
minute). Each reading is still read once, newest copy winning: a group item's readings and
their compacted copies dedupe like any two blocks (``keydesign.writetier``, "Compacted
versions"). A watermark that cannot be read is an error (the request fails and is retried),
never a guess: a guess newer than the truth would read hours from compacted blocks not yet
written. The rollup function plans each slot with the state as stored (``consistent``): it
decides which hours compaction has done.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from adapters.snapstart import Cached
from keydesign.writetier import CompactionState, state_key


class CompactionWatermark(Protocol):
    def state(self) -> CompactionState:
        """The compaction state: ``through``, the end (epoch ms) of the last hour compacted (0 when none
        is), and the group counts whose items the hours after it may hold (``earlier_for``)."""
        ...


class PlanningWatermark(CompactionWatermark, Protocol):
    def consistent(self) -> CompactionState:
        """The compaction state as stored now (a strongly consistent read, not the cached copy): the
        rollup function plans a slot with it (``rollup.logic``)."""
        ...


class _Never:
    """The watermark of a deployment where nothing is compacted (no write tier or no control table):
    every hour of the write tier is read from its group items."""

    def state(self) -> CompactionState:
        return EMPTY_STATE

    def consistent(self) -> CompactionState:
        return EMPTY_STATE


def state_through(watermark: PlanningWatermark, through_ms: int) -> CompactionState:
    """``watermark``'s state, read again as stored now (``consistent``) when the copy it holds ends before
    ``through_ms``: that copy may have been cached before compaction passed the hours a caller plans up to
    there as compacted (and which G's it compacted each into cluster blocks under)."""
    state = watermark.state()
    return state if state.through >= through_ms else watermark.consistent()


EMPTY_STATE = CompactionState()
NOTHING_COMPACTED: PlanningWatermark = _Never()


class _Dynamo(Protocol):
    def get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


class CachedWatermark:
    """Reads the state item of ``table_prefix`` from ``control_table`` at most once per ``ttl_ms``;
    thread-safe. A copy restored from a SnapStart snapshot reads it again."""

    def __init__(
        self,
        dynamodb: _Dynamo,
        control_table: str,
        table_prefix: str,
        ttl_ms: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._db = dynamodb
        self._table = control_table
        self._key = {name: {"S": value} for name, value in state_key(table_prefix).items()}
        self._cache = Cached(self._read, ttl_ms, clock)

    def state(self) -> CompactionState:
        return self._cache.current()

    def consistent(self) -> CompactionState:
        """The state as stored now (strongly consistent, uncached); the cache keeps it too."""
        return self._cache.reload(lambda: self._read(consistent=True))

    def _read(self, *, consistent: bool = False) -> CompactionState:
        item = self._db.get_item(TableName=self._table, Key=self._key, ConsistentRead=consistent).get("Item")
        return CompactionState.from_item(None if item is None else plain(item))


def plain(item: Mapping[str, Any]) -> dict[str, object]:
    """A stored state item's fields as :meth:`CompactionState.from_item` reads them: a number (N) or a
    string (S) as its text; any other type as it is, which the parser refuses by name."""
    return {name: value.get("N", value.get("S", value)) for name, value in item.items()}
