"""The partition keys each entity's blocks can go to in one bucket, as the key-design layer says.

Within a bucket the shard map does not change (every change takes effect at a
bucket boundary), so an entity's blocks in that bucket go to a fixed, small
set of partition keys, ``Layout.partitions_of``:

* one key, when the entity has one partition there (a hybrid entity without
  sub-shards: its base key ``SSSS#bucket``, shared with every entity hashed to
  the same shard; or a random/calculated entity with one suffix). Every block
  lands on it;
* k keys of its own (hybrid sub-shards ``SSSS#bucket#entity#NNN``, or the
  random/calculated suffixes ``entity#n``). Which one a block takes depends on
  its block id's hash (or a random draw), uniformly; the k keys must be exactly
  the partitions of the entity's query plan for the bucket
  (``Layout.plan_entity``).

The count comes from the shard map through ``hotkeys.detector.entity_count_at``
(the detector's own notion of "partitions an entity writes to"). A key is
shared when the layout's partitions are (``LayoutCapabilities``) and the entity
has one there. Nothing here formats a key.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from hotkeys.detector import entity_count_at
from keydesign import Layout, ShardMap

Ints = npt.NDArray[np.int64]


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


def entity_keys(layout: Layout, shard_map: ShardMap, entity: str, bucket_start_ms: int) -> tuple[str, ...]:
    """The partition keys ``entity``'s blocks can go to in the bucket starting at ``bucket_start_ms``.

    ``Layout.partitions_of``; with several, they must be the partitions of the entity's plan for the bucket.
    """
    n = entity_count_at(shard_map, entity, bucket_start_ms, layout.kind)
    pks = tuple(layout.partitions_of(entity, bucket_start_ms, shard_map))
    if len(pks) != n or len(set(pks)) != n:
        raise AssertionError(f"{entity} in bucket {bucket_start_ms}: {n} partitions by the map, {pks}")
    if n > 1:
        plan = layout.plan_entity(entity, bucket_start_ms, bucket_start_ms + layout.bucket.width_ms, shard_map)
        planned = {p.pk for p in plan.partitions}
        if planned != set(pks):
            raise AssertionError(f"{entity} in bucket {bucket_start_ms}: plan {sorted(planned)}, blocks {pks}")
    return pks


def build_key_table(layout: Layout, shard_map: ShardMap, names: Sequence[str], bucket_start_ms: int) -> KeyTable:
    """The keys of every entity (``names``, by index) in the bucket starting at ``bucket_start_ms``."""
    ids: dict[str, int] = {}
    keys: list[str] = []
    shared: list[bool] = []
    first = np.empty(len(names), dtype=np.int64)
    count = np.empty(len(names), dtype=np.int64)
    for index, entity in enumerate(names):
        pks = entity_keys(layout, shard_map, entity, bucket_start_ms)
        if len(pks) == 1:
            key_id = ids.get(pks[0])
            if key_id is None:
                key_id = ids[pks[0]] = len(keys)
                keys.append(pks[0])
                shared.append(layout.can.shared_partitions)
            first[index], count[index] = key_id, 1
            continue
        first[index], count[index] = len(keys), len(pks)
        for pk in pks:
            if pk in ids:
                raise AssertionError(f"{pk} of {entity} is also another entity's key")
            ids[pk] = len(keys)
            keys.append(pk)
            shared.append(False)  # an entity's own partitions (sub-shards, suffixes) are never shared
    return KeyTable(bucket_start_ms, tuple(keys), np.array(shared, dtype=bool), first, count)
