"""The partition keys each entity can write to in one bucket, as the key-design layer says.

Within a bucket the shard map does not change (every change takes effect at a
bucket boundary), so an entity's writes in that bucket go to a fixed, small
set of partition keys:

* one key, when the entity has one partition there (a hybrid entity without
  sub-shards: its base key ``SSSS#bucket``, shared with every entity hashed to
  the same shard; or a random/calculated entity with one suffix). Every write
  lands on it, so it is exactly the key ``Layout.key_for`` gives a
  representative reading of the entity in the bucket;
* k keys of its own (hybrid sub-shards ``SSSS#bucket#entity#NNN``, or the
  random/calculated suffixes ``entity#n``). Which one a write takes depends on
  its event id's hash (or a random draw), uniformly; the k keys are exactly
  the partitions of the entity's query plan for the bucket
  (``Layout.plan_entity``), and the representative reading's ``key_for`` key
  must be one of them.

The count comes from the shard map through ``hotkeys.detector.entity_count_at``
(the detector's own notion of "partitions an entity writes to"), and whether
a key is shared from ``keydesign.layouts.parse_keys`` (how the hot-key Lambda
reads it off a stream record). Nothing here formats a key.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hotkeys.detector import entity_count_at
from keydesign import Layout, Reading, ShardMap
from keydesign.layouts import parse_keys

Ints = npt.NDArray[np.int64]

#: The event id of the representative reading of an entity in a bucket.
PROBE_EVENT_ID = "simulator-probe"


class KeyDesignMismatchError(AssertionError):
    """``key_for`` and ``plan_entity`` disagree about an entity's keys: a bug in one of them."""


@dataclass(frozen=True, slots=True)
class KeyTable:
    """Every partition key written in one bucket, and which of them each entity writes to.

    Entity ``e`` writes to keys ``first[e] .. first[e] + count[e] - 1``. Keys of
    entities with ``count > 1`` are theirs alone; a key of an entity with
    ``count == 1`` may be shared (``shared[key]``).
    """

    bucket_start_ms: int
    names: tuple[str, ...]
    shared: npt.NDArray[np.bool_]
    first: Ints
    count: Ints

    @property
    def keys(self) -> int:
        return len(self.names)

    def entity_keys(self, entity: int) -> tuple[str, ...]:
        start = int(self.first[entity])
        return self.names[start : start + int(self.count[entity])]

    def multi_key_groups(self) -> dict[int, Ints]:
        """Entities with more than one key, grouped by their key count."""
        multi = np.flatnonzero(self.count > 1)
        return {int(n): multi[self.count[multi] == n] for n in np.unique(self.count[multi])}

    def single_key_entities(self) -> Ints:
        return np.flatnonzero(self.count == 1)


class Probes:
    """One representative reading per (entity, bucket), parsed like any reading, shared by every layout."""

    def __init__(self, names: Sequence[str]) -> None:
        self._names = names
        self._by_bucket: dict[int, list[Reading]] = {}

    def reading(self, entity: int, bucket_start_ms: int) -> Reading:
        """One entity's representative reading (reads need a few, not every entity's)."""
        cached = self._by_bucket.get(bucket_start_ms)
        return cached[entity] if cached is not None else _probe(self._names[entity], bucket_start_ms)

    def readings(self, bucket_start_ms: int) -> list[Reading]:
        """Every entity's representative reading in the bucket, in entity order."""
        cached = self._by_bucket.get(bucket_start_ms)
        if cached is None:
            cached = [_probe(name, bucket_start_ms) for name in self._names]
            if len(self._by_bucket) >= 3:  # the layouts move through the run's buckets together
                del self._by_bucket[min(self._by_bucket)]
            self._by_bucket[bucket_start_ms] = cached
        return cached


def _probe(entity_id: str, bucket_start_ms: int) -> Reading:
    return Reading.parse(
        {"entity_id": entity_id, "event_id": PROBE_EVENT_ID, "timestamp": bucket_start_ms, "measures": {"v": 0}}
    )


def entity_keys(
    layout: Layout, shard_map: ShardMap, reading: Reading, bucket_start_ms: int, rng: random.Random | None = None
) -> tuple[str, ...]:
    """The partition keys ``reading``'s entity can write to in the bucket starting at ``bucket_start_ms``.

    ``reading`` is the entity's representative reading at the bucket's start.
    One key: the one ``key_for`` gives it. Several: the partitions of the
    entity's plan for the bucket, which must include ``key_for``'s.
    """
    entity = reading.entity_id
    n = entity_count_at(shard_map, entity, bucket_start_ms, layout.kind)
    probe = layout.key_for(reading, shard_map, rng or random.Random(0))
    if n == 1:
        return (probe.pk,)
    plan = layout.plan_entity(entity, bucket_start_ms, bucket_start_ms + layout.bucket.width_ms, shard_map)
    pks = tuple(p.pk for p in plan.partitions)
    if len(pks) != n or len(set(pks)) != n or probe.pk not in pks:
        raise KeyDesignMismatchError(
            f"{entity} in bucket {bucket_start_ms}: {n} partitions by the map, plan {pks}, key_for {probe.pk}"
        )
    return pks


def build_key_table(layout: Layout, shard_map: ShardMap, probes: Probes, bucket_start_ms: int) -> KeyTable:
    """The keys of every entity in the bucket starting at ``bucket_start_ms`` under ``shard_map``."""
    readings = probes.readings(bucket_start_ms)
    rng = random.Random(0)  # the random layout's draw; with one suffix there is nothing to draw
    ids: dict[str, int] = {}
    names: list[str] = []
    shared: list[bool] = []
    first = np.empty(len(readings), dtype=np.int64)
    count = np.empty(len(readings), dtype=np.int64)
    for index, reading in enumerate(readings):
        pks = entity_keys(layout, shard_map, reading, bucket_start_ms, rng)
        if len(pks) == 1:
            key_id = ids.get(pks[0])
            if key_id is None:
                key_id = ids[pks[0]] = len(names)
                names.append(pks[0])
                parts = parse_keys(pks[0], layout.key_for(reading, shard_map, rng).sk, layout.kind)
                shared.append(parts is not None and parts.shared)
            first[index], count[index] = key_id, 1
            continue
        first[index], count[index] = len(names), len(pks)
        for pk in pks:
            if pk in ids:
                raise KeyDesignMismatchError(f"{pk} of {reading.entity_id} is also another entity's key")
            ids[pk] = len(names)
            names.append(pk)
            shared.append(False)  # an entity's own partitions (sub-shards, suffixes) are never shared
    return KeyTable(bucket_start_ms, tuple(names), np.array(shared, dtype=bool), first, count)
