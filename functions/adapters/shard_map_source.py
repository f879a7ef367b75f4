"""Where handlers get the shard map: a static one, or a store read through a cache.

Writers must never use a copy older than ``cache_ttl``: the shard-map store
only schedules changes at boundaries at least that far in the future (see
``keydesign.earliest_change_boundary``), and that is what makes a split safe.
So when the copy has expired and the refresh fails, the error propagates (the
batch is retried later) instead of writing with a map that may be stale.

One failure is not an error here: a stored map that is malformed. A retry would
meet it again, so the store's ``load`` answers with the last good map it holds
(alarmed; see ``adapters.shard_map_store``), and that is what is cached, for
one ``cache_ttl`` before the next try.
"""

from __future__ import annotations

from typing import Protocol

from adapters.snapstart import Cached
from keydesign import ShardMap


class ShardMapSource(Protocol):
    def current(self) -> ShardMap: ...


class StaticShardMap:
    """A fixed map (from configuration): for deployments without a control table."""

    def __init__(self, shard_map: ShardMap) -> None:
        self._map = shard_map

    def current(self) -> ShardMap:
        return self._map


class CachedShardMap(Cached[ShardMap]):
    """Reads the map with ``loader`` at most once per ``ttl_ms``; thread-safe. A copy restored from a
    SnapStart snapshot reads it again (the time spent in the snapshot is on no clock of its own)."""
