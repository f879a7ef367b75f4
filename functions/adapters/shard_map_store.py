"""The shard-map store: the versioned shard map in the control table, read and changed safely.

One item holds the whole map (its complete history, which is what readers need
to find any past bucket)::

    pk = "shardmap", sk = "current"
    map         S   JSON of ShardMap.to_dict()
    version     N   the map's version; the optimistic-concurrency token
    updated_at  S   when it was last written (RFC 3339)
    reason      S   why (for the humans reading the table)

**Reading** (:meth:`ShardMapStore.load`) is a strongly consistent GetItem,
then full validation: JSON, ``ShardMap.from_dict``, the ``version`` attribute
equal to the map's, the bucket equal to the configured one. Anything off
raises :class:`MalformedShardMap` naming the table and the fault: a caller
keeps no half-parsed map, and nothing is ever written over a bad entry.

**Bootstrap**: an absent item is created from the configured initial map
(``SHARDS``, ``BUCKET``) with ``attribute_not_exists``, so concurrent cold
starts agree on one. From then on the stored map is the truth and ``SHARDS``
is ignored: changing it later cannot move old data out of readers' sight.

**Changing** (:meth:`ShardMapStore.apply`): read, compute the new map with a
pure function of the map read, check it only adds changes in the future (the
past is never rewritten, whatever the function did), then PutItem on the
condition that the version is still the one read. A
``ConditionalCheckFailedException`` means another writer got there first: read
again and re-apply, with jittered backoff, up to ``max_attempts`` times. Two
detectors racing therefore leave one map containing both of their changes,
each judged against the other's.

Callers: the hot-key Lambda (load and apply); every Lambda reads through
:func:`shard_map_source`, the one place a function's shard-map source is built.
"""

from __future__ import annotations

import json
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Protocol

from botocore.exceptions import ClientError

from adapters.clients import client
from adapters.observability import logger
from adapters.settings import CommonSettings, SettingsError
from adapters.shard_map_source import CachedShardMap, ShardMapSource, StaticShardMap
from keydesign import ConfigError, ShardMap, format_ts
from keydesign.shardmap import Change

SHARD_MAP_KEY: Mapping[str, Mapping[str, str]] = {"pk": {"S": "shardmap"}, "sk": {"S": "current"}}
#: Refuse to write a map close to DynamoDB's 400 KB item limit (thousands of changes).
MAX_MAP_BYTES = 350_000
_CONDITION_FAILED = "ConditionalCheckFailedException"


class ShardMapStoreError(Exception):
    """The shard map cannot be read or changed."""


class MalformedShardMap(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """The stored entry is not a valid shard map; nothing is applied and nothing is written over it."""

    def __init__(self, table: str, reason: str) -> None:
        self.table = table
        self.reason = reason
        super().__init__(f"shard map in table {table} (pk=shardmap, sk=current) is refused: {reason}")


class ShardMapConflict(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """Other writers kept changing the map: no write landed in ``attempts`` tries."""


class PastRewrite(ShardMapStoreError):  # noqa: N818 - reads as the condition
    """A change would alter the map at or before now; refused before anything is written."""


class ShardMapItemApi(Protocol):
    """The two DynamoDB client methods the store calls (the real client, a fake or a fault injector)."""

    def get_item(self, **kwargs: Any) -> Mapping[str, Any]: ...

    def put_item(self, **kwargs: Any) -> Mapping[str, Any]: ...


@dataclass(frozen=True, slots=True)
class Applied:
    """The outcome of :meth:`ShardMapStore.apply`."""

    shard_map: ShardMap
    previous: ShardMap
    changed: bool
    attempts: int


class ShardMapStore:
    """The shard map in the control table. Thread-safe (it holds no mutable state)."""

    def __init__(
        self,
        dynamodb: ShardMapItemApi,
        table: str,
        initial: ShardMap,
        *,
        clock_ms: Callable[[], int] = lambda: int(time.time() * 1000),
        sleep: Callable[[float], None] = time.sleep,
        max_attempts: int = 8,
        backoff_ms: int = 50,
        rng: random.Random | None = None,
    ) -> None:
        if max_attempts < 1:
            raise ValueError("max_attempts must be at least 1")
        self._db = dynamodb
        self._table = table
        self._initial = initial
        self._clock_ms = clock_ms
        self._sleep = sleep
        self._max_attempts = max_attempts
        self._backoff_ms = backoff_ms
        self._rng = rng or random.Random()

    @classmethod
    def from_settings(cls, common: CommonSettings, dynamodb: ShardMapItemApi | None = None) -> ShardMapStore:
        """The store of ``CONTROL_TABLE``, bootstrapping with ``SHARDS`` and ``BUCKET``."""
        if common.control_table is None:
            raise SettingsError("CONTROL_TABLE", "is required to read the shard map from its store")
        initial = ShardMap.initial(common.layout.bucket, common.shards)
        return cls(dynamodb if dynamodb is not None else client("dynamodb"), common.control_table, initial)

    @property
    def table(self) -> str:
        return self._table

    # -- reading -------------------------------------------------------------------------

    def peek(self) -> ShardMap | None:
        """The stored map, or None when there is none yet. Never writes."""
        response = self._db.get_item(TableName=self._table, Key=dict(SHARD_MAP_KEY), ConsistentRead=True)
        item = response.get("Item")
        return None if item is None else self._parse(item)

    def load(self, *, bootstrap: bool = True) -> ShardMap:
        """The stored map. When there is none yet: the initial map, stored first
        (``bootstrap``), or just returned (read-only callers; no PutItem needed)."""
        found = self.peek()
        if found is not None:
            return found
        if not bootstrap:
            return self._initial
        try:
            self._put(self._initial, expected=None, reason="bootstrap from SHARDS and BUCKET")
            logger.info("shard map bootstrapped", table=self._table, shards=self._initial.global_history[0].shards)
            return self._initial
        except ClientError as exc:
            if _code(exc) != _CONDITION_FAILED:
                raise
        # Another cold start stored it between our read and our write: theirs is the map.
        found = self.peek()
        if found is None:
            raise ShardMapStoreError(f"shard map in table {self._table} vanished while being bootstrapped")
        return found

    # -- changing ---------------------------------------------------------------------------

    def apply(self, change: Callable[[ShardMap], ShardMap], *, reason: str) -> Applied:
        """Apply ``change`` (a pure function of the map it is given) with optimistic concurrency.

        Raises :class:`MalformedShardMap` when the stored entry is invalid,
        :class:`PastRewrite` when ``change`` alters the past, and
        :class:`ShardMapConflict` when no write landed in ``max_attempts`` tries.
        """
        for attempt in range(1, self._max_attempts + 1):
            stored = self.peek()
            current = stored if stored is not None else self._initial
            now_ms = self._clock_ms()
            proposed = change(current)
            if proposed is current or _same(proposed, current):
                return Applied(current, current, changed=False, attempts=attempt)
            check_future_only(current, proposed, now_ms)
            new = replace(proposed, version=current.version + 1)
            try:
                self._put(new, expected=None if stored is None else current.version, reason=reason)
            except ClientError as exc:
                if _code(exc) != _CONDITION_FAILED:
                    raise
                logger.info("shard map changed under us; re-reading", table=self._table, attempt=attempt)
                if attempt < self._max_attempts:
                    ceiling = self._backoff_ms * (1 << min(attempt - 1, 6)) / 1000
                    self._sleep(self._rng.uniform(0, ceiling))
                continue
            return Applied(new, current, changed=True, attempts=attempt)
        raise ShardMapConflict(
            f"shard map in table {self._table}: {self._max_attempts} attempts lost the race to other writers"
        )

    # -- internals -------------------------------------------------------------------------

    def _put(self, shard_map: ShardMap, *, expected: int | None, reason: str) -> None:
        body = json.dumps(shard_map.to_dict(), separators=(",", ":"), sort_keys=True)
        if len(body) > MAX_MAP_BYTES:
            raise ShardMapStoreError(
                f"shard map version {shard_map.version} is {len(body):,} bytes, over the {MAX_MAP_BYTES:,} "
                "this store writes (DynamoDB items stop at 400 KB)"
            )
        # Validate what we are about to write exactly as a reader will parse it.
        ShardMap.from_dict(json.loads(body))
        item = {
            **SHARD_MAP_KEY,
            "map": {"S": body},
            "version": {"N": str(shard_map.version)},
            "updated_at": {"S": format_ts(self._clock_ms())},
            "reason": {"S": reason[:1000] or "unspecified"},
        }
        if expected is None:
            self._db.put_item(TableName=self._table, Item=item, ConditionExpression="attribute_not_exists(pk)")
        else:
            self._db.put_item(
                TableName=self._table,
                Item=item,
                ConditionExpression="#v = :expected",
                ExpressionAttributeNames={"#v": "version"},
                ExpressionAttributeValues={":expected": {"N": str(expected)}},
            )

    def _parse(self, item: Mapping[str, Any]) -> ShardMap:
        raw_map = item.get("map")
        raw_version = item.get("version")
        if not isinstance(raw_map, Mapping) or not isinstance(raw_map.get("S"), str):
            raise MalformedShardMap(self._table, "attribute 'map' must be a string holding the map's JSON")
        if not isinstance(raw_version, Mapping) or not isinstance(raw_version.get("N"), str):
            raise MalformedShardMap(self._table, "attribute 'version' must be a number")
        try:
            version = int(raw_version["N"])
        except ValueError:
            raise MalformedShardMap(self._table, f"version {raw_version['N']!r} is not a whole number") from None
        try:
            data = json.loads(raw_map["S"])
        except ValueError as exc:
            raise MalformedShardMap(self._table, f"attribute 'map' is not JSON ({exc})") from None
        try:
            shard_map = ShardMap.from_dict(data)
        except ConfigError as exc:
            raise MalformedShardMap(self._table, str(exc)) from None
        if shard_map.version != version:
            raise MalformedShardMap(
                self._table, f"attribute version {version} does not match the map's own version {shard_map.version}"
            )
        if shard_map.bucket != self._initial.bucket:
            raise MalformedShardMap(
                self._table,
                f"the stored map uses {shard_map.bucket.spec} buckets but BUCKET is {self._initial.bucket.spec}; "
                "keys built with one cannot be found with the other",
            )
        return shard_map


def check_future_only(old: ShardMap, new: ShardMap, now_ms: int) -> None:
    """Raise :class:`PastRewrite` unless ``new`` equals ``old`` up to ``now_ms`` and only
    differs after it: every history keeps its entries at or before now, unchanged, and
    no entity disappears."""
    if new.bucket != old.bucket:
        raise PastRewrite(f"the bucket may not change ({old.bucket.spec} -> {new.bucket.spec})")
    _check_history("global", old.global_history, new.global_history, now_ms)
    for entity, history in old.entity_history.items():
        _check_history(f"entities.{entity}", history, new.entity_history.get(entity, ()), now_ms)
    for entity, history in new.entity_history.items():
        if entity not in old.entity_history:
            _check_history(f"entities.{entity}", (), history, now_ms)


def _check_history(name: str, old: Sequence[Change], new: Sequence[Change], now_ms: int) -> None:
    past_old = [c for c in old if c.effective_from_ms <= now_ms]
    past_new = [c for c in new if c.effective_from_ms <= now_ms]
    if past_old != past_new:
        raise PastRewrite(f"{name}: the change would alter the map at or before {format_ts(now_ms)}")


def _same(a: ShardMap, b: ShardMap) -> bool:
    return a.global_history == b.global_history and dict(a.entity_history) == dict(b.entity_history)


def _code(exc: ClientError) -> str:
    return str(exc.response.get("Error", {}).get("Code", ""))


def shard_map_source(
    common: CommonSettings,
    *,
    bootstrap: bool,
    store: ShardMapStore | None = None,
    clock: Callable[[], float] = time.monotonic,
) -> ShardMapSource:
    """The shard map a function writes or plans with: the store in ``CONTROL_TABLE``
    read through a cache no older than ``SHARD_MAP_CACHE_TTL``, or, without a
    control table, the static initial map (``SHARDS``).

    Writers ``bootstrap``: when the table holds no map yet they store the
    initial one, so the first writer and the first detector agree on it. A
    reader never writes: until a writer stores a map, it plans with the
    initial one, which is what the writer would store. A failed refresh after
    the cache expires raises (the batch or request fails): writing with a map
    that may be stale could put a split entity where readers do not look.
    """
    if common.control_table is None:
        return StaticShardMap(ShardMap.initial(common.layout.bucket, common.shards))
    source = store if store is not None else ShardMapStore.from_settings(common)
    return CachedShardMap(lambda: source.load(bootstrap=bootstrap), common.shard_map_cache_ttl_ms, clock=clock)
