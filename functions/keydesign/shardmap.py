"""The shard map, versioned by time.

The map holds two histories, each a list of ``(effective_from, shards)``
entries sorted by time:

* the *global* shard count N (hybrid: base shards per bucket; random and
  calculated: the default suffix count of every entity), and
* per-entity counts (hybrid: dedicated sub-shards of a hot entity, default 1;
  random and calculated: that entity's own suffix count, replacing N).

Every ``effective_from`` is a bucket boundary, and a change may only be added
for a boundary in the future. Writers cache the map for at most
``cache_ttl``; a change scheduled at or after ``now + cache_ttl`` is seen by
every writer before it takes effect (see :func:`earliest_change_boundary`).
So for any bucket, readers and writers agree on exactly which partitions hold
it: no dual writes, no backfill.

Changes that took effect before the oldest reading anyone may still write or
read are folded away (:meth:`ShardMap.compacted`), so the map holds the changes
within retention and the counts in force, not every change ever made.
"""

from __future__ import annotations

import bisect
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from .errors import ConfigError, InvalidInput
from .model import validate_entity_id
from .periods import Bucket
from .timefmt import format_ts, parse_timestamp

MAX_GLOBAL_SHARDS = 9_999
MAX_ENTITY_SHARDS = 999


@dataclass(frozen=True, slots=True)
class Change:
    """From ``effective_from_ms`` (a bucket boundary) on, the count is ``shards``."""

    effective_from_ms: int
    shards: int


def _count_at(history: tuple[Change, ...], ts_ms: int) -> int | None:
    index = bisect.bisect_right([c.effective_from_ms for c in history], ts_ms) - 1
    return history[index].shards if index >= 0 else None


def earliest_change_boundary(bucket: Bucket, now_ms: int, cache_ttl_ms: int, margin_ms: int = 0) -> int:
    """The first bucket boundary that every writer will have seen a change for.

    A writer that fetched the map just before the change was stored keeps its
    copy for ``cache_ttl_ms``; ``margin_ms`` covers clock skew and in-flight
    batches. The boundary is strictly after ``now_ms``.
    """
    return bucket.next_boundary(now_ms + cache_ttl_ms + margin_ms + 1)


@dataclass(frozen=True, slots=True)
class ShardMap:
    """An immutable, time-versioned shard map. Changes return a new map."""

    bucket: Bucket
    global_history: tuple[Change, ...]
    entity_history: Mapping[str, tuple[Change, ...]] = field(default_factory=lambda: MappingProxyType({}))
    version: int = 0

    @classmethod
    def initial(cls, bucket: Bucket, shards: int) -> ShardMap:
        """A map with ``shards`` global shards since the epoch and no entity entries."""
        _check_count("shards", shards, MAX_GLOBAL_SHARDS)
        return cls(bucket, (Change(0, shards),))

    def global_shards_at(self, ts_ms: int) -> int:
        """The global shard count N in force at ``ts_ms``."""
        count = _count_at(self.global_history, ts_ms)
        if count is None:  # histories always start at the epoch; defensive only
            raise ConfigError("global", f"no global shard count at {format_ts(ts_ms)}")
        return count

    def entity_shards_at(self, entity_id: str, ts_ms: int) -> int | None:
        """The entity's own count at ``ts_ms``, or None when it has none."""
        history = self.entity_history.get(entity_id)
        return None if history is None else _count_at(history, ts_ms)

    def change_points(self, entity_id: str | None, from_ms: int, to_ms: int) -> list[int]:
        """Instants in ``(from_ms, to_ms)`` where the counts for ``entity_id`` change."""
        histories = [self.global_history]
        if entity_id is not None and entity_id in self.entity_history:
            histories.append(self.entity_history[entity_id])
        points = {c.effective_from_ms for h in histories for c in h if from_ms < c.effective_from_ms < to_ms}
        return sorted(points)

    def split_entities_at(self, ts_ms: int) -> Iterator[tuple[str, int]]:
        """Every entity with its own count at ``ts_ms``, with that count, sorted by id."""
        for entity_id in sorted(self.entity_history):
            count = _count_at(self.entity_history[entity_id], ts_ms)
            if count is not None:
                yield entity_id, count

    # -- changes ------------------------------------------------------------

    def with_global(self, shards: int, effective_from_ms: int, *, now_ms: int) -> ShardMap:
        """Schedule global N = ``shards`` from ``effective_from_ms`` (a future boundary)."""
        _check_count("shards", shards, MAX_GLOBAL_SHARDS)
        history = _append(self.global_history, Change(effective_from_ms, shards), self.bucket, now_ms, "global")
        if history is self.global_history:
            return self
        return ShardMap(self.bucket, history, self.entity_history, self.version + 1)

    def with_entity(self, entity_id: str, shards: int, effective_from_ms: int, *, now_ms: int) -> ShardMap:
        """Schedule the entity's own count = ``shards`` from ``effective_from_ms``."""
        try:
            validate_entity_id(entity_id)
        except InvalidInput as exc:
            raise ConfigError("entity_id", exc.reason) from None
        _check_count(f"entities.{entity_id}", shards, MAX_ENTITY_SHARDS)
        old = self.entity_history.get(entity_id, ())
        history = _append(old, Change(effective_from_ms, shards), self.bucket, now_ms, f"entities.{entity_id}")
        if history is old:
            return self
        entities = dict(self.entity_history)
        entities[entity_id] = history
        return ShardMap(self.bucket, self.global_history, MappingProxyType(entities), self.version + 1)

    def compacted(self, horizon_ms: int, *, entity_default: int | None) -> ShardMap:
        """This map with every change in force at ``horizon_ms`` folded into the state it left.

        Each history keeps its changes after ``horizon_ms`` and, of those at or before it,
        only the last (the count in force at the horizon; the global one moves to the
        epoch, where a global history starts). ``entity_default`` is the count an entity
        without an entry has: 1 where entities share partitions (hybrid), None where it
        is the global N. An entity whose count at the horizon is that default (and, for
        None, stays equal to the global N until its next change) loses that entry, and
        one left without entries leaves the map.

        Every count at or after ``horizon_ms`` stays the same, with the default standing
        for a dropped entry, so every plan for a range that starts at or after the horizon
        does too. A map is compacted with a horizon no reading older than it may still be
        written or read at (retention, plus a margin for clocks and cached maps). The
        version is kept (a store that writes the result gives it the next one); ``self``
        comes back when there is nothing to fold.
        """
        global_history = _fold(self.global_history, horizon_ms)
        if global_history[0].effective_from_ms != 0:
            global_history = (Change(0, global_history[0].shards), *global_history[1:])
        entities: dict[str, tuple[Change, ...]] = {}
        for entity_id, history in self.entity_history.items():
            folded = _fold(history, horizon_ms)
            if folded[0].effective_from_ms <= horizon_ms:
                until = folded[1].effective_from_ms if len(folded) > 1 else None
                if _is_default(folded[0].shards, entity_default, global_history, horizon_ms, until):
                    folded = folded[1:]
            if folded:
                entities[entity_id] = folded
        if global_history == self.global_history and entities == dict(self.entity_history):
            return self
        return ShardMap(self.bucket, global_history, MappingProxyType(entities), self.version)

    # -- serialisation -------------------------------------------------------

    def to_dict(self) -> dict[str, object]:
        """A JSON-ready dict; :meth:`from_dict` reads it back."""
        return {
            "version": self.version,
            "bucket": self.bucket.spec,
            "global": [_change_dict(c) for c in self.global_history],
            "entities": {e: [_change_dict(c) for c in h] for e, h in sorted(self.entity_history.items())},
        }

    @classmethod
    def from_dict(cls, data: object) -> ShardMap:
        """Parse and fully validate a serialised map; refuse anything malformed."""
        if not isinstance(data, Mapping):
            raise ConfigError("shard_map", "must be an object")
        # A typo such as "entites" would otherwise silently drop every split.
        unknown = sorted(set(data) - {"version", "bucket", "global", "entities"})
        if unknown:
            raise ConfigError(
                f"shard_map.{unknown[0]}", "is not a shard-map field; expected version, bucket, global, entities"
            )
        version = data.get("version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ConfigError("shard_map.version", "must be a non-negative integer")
        bucket = Bucket.parse(str(data.get("bucket", "")))
        global_history = _parse_history(data.get("global"), bucket, "global", MAX_GLOBAL_SHARDS)
        if global_history[0].effective_from_ms != 0:
            raise ConfigError("global", "the first global entry must be effective from 1970-01-01T00:00:00Z")
        raw_entities = data.get("entities", {})
        if not isinstance(raw_entities, Mapping):
            raise ConfigError("entities", "must be an object of entity id to history")
        entities: dict[str, tuple[Change, ...]] = {}
        for entity_id, raw in raw_entities.items():
            try:
                validate_entity_id(entity_id)
            except ValueError as exc:
                raise ConfigError("entities", str(exc)) from None
            entities[entity_id] = _parse_history(raw, bucket, f"entities.{entity_id}", MAX_ENTITY_SHARDS)
        return cls(bucket, global_history, MappingProxyType(entities), version)


def _fold(history: tuple[Change, ...], horizon_ms: int) -> tuple[Change, ...]:
    """``history`` from the last change at or before ``horizon_ms`` on."""
    index = bisect.bisect_right([c.effective_from_ms for c in history], horizon_ms) - 1
    return history[index:] if index > 0 else history


def _is_default(
    shards: int, default: int | None, global_history: tuple[Change, ...], from_ms: int, until_ms: int | None
) -> bool:
    """Whether an entity's own ``shards`` equals what it would have without them over [from, until)."""
    if default is not None:
        return shards == default
    changes_between = any(
        from_ms < c.effective_from_ms and (until_ms is None or c.effective_from_ms < until_ms) for c in global_history
    )
    return not changes_between and _count_at(global_history, from_ms) == shards


def _change_dict(change: Change) -> dict[str, object]:
    return {"effective_from": format_ts(change.effective_from_ms), "shards": change.shards}


def _check_count(field_name: str, shards: object, maximum: int) -> None:
    if isinstance(shards, bool) or not isinstance(shards, int) or not 1 <= shards <= maximum:
        raise ConfigError(field_name, f"shard count must be a whole number from 1 to {maximum}, got {shards!r}")


def _append(history: tuple[Change, ...], change: Change, bucket: Bucket, now_ms: int, name: str) -> tuple[Change, ...]:
    if not bucket.is_boundary(change.effective_from_ms):
        raise ConfigError(
            name, f"effective_from {format_ts(change.effective_from_ms)} is not a {bucket.spec} bucket boundary"
        )
    if change.effective_from_ms <= now_ms:
        raise ConfigError(name, "a change must take effect in the future; the past is never rewritten")
    current = _count_at(history, change.effective_from_ms)
    if history and change.effective_from_ms < history[-1].effective_from_ms:
        raise ConfigError(name, "a change must not precede a change already scheduled")
    if history and history[-1].effective_from_ms == change.effective_from_ms:
        # Replacing a scheduled change is safe: it is still in the future.
        if history[-1].shards == change.shards:
            return history
        history = history[:-1]
        current = _count_at(history, change.effective_from_ms)
    if current == change.shards:
        return history
    return (*history, change)


def _parse_history(raw: object, bucket: Bucket, name: str, maximum: int) -> tuple[Change, ...]:
    if not isinstance(raw, list) or not raw:
        raise ConfigError(name, "must be a non-empty list of {effective_from, shards}")
    out: list[Change] = []
    for i, entry in enumerate(raw):
        where = f"{name}[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != {"effective_from", "shards"}:
            raise ConfigError(where, "must be an object with exactly effective_from and shards")
        try:
            ts = parse_timestamp(entry["effective_from"], where)
        except ValueError as exc:
            raise ConfigError(where, str(exc)) from None
        if not bucket.is_boundary(ts):
            raise ConfigError(where, f"effective_from is not a {bucket.spec} bucket boundary")
        _check_count(where, entry["shards"], maximum)
        if out and ts <= out[-1].effective_from_ms:
            raise ConfigError(where, "entries must be in strictly increasing effective_from order")
        out.append(Change(ts, entry["shards"]))
    return tuple(out)
