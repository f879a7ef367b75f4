"""Hot-key detection: write load per partition key and per entity in time windows, and what to do about it.

Pure Python on top of the key-design layer: no boto3, no clock, no I/O. The
hot-key Lambda feeds it from the DynamoDB stream and adds windows up across
invocations in the control table; the workload simulator keeps its windows in
memory (``simulator.adaptive.LoadTracker``). Both get their decisions from
:func:`decide` and turn them into a shard map with :func:`apply_decisions`.

Load is counted in write units, exactly: a block's sort key carries the units a
put of it is billed (``keydesign.layouts.parse_keys``), and a user delete of it
is billed the same (DynamoDB bills a delete by the size of the item deleted).
TTL deletions cost no write capacity and are not counted. A window's rate is
its write units divided by its length.

The rules (thresholds are per partition key, in WCU/s):

* A partition key is *hot* when its rate is above ``split_threshold_wcu``.
* An entity is *hot* when its rate over its partition count (its own count,
  else 1 in the hybrid layout or the global N in the others) is above the
  threshold. It is split to ``shards_for(rate, budget)`` partitions, where
  the budget is ``min(threshold, target_utilisation x 1,000)``. A budget below
  the threshold leaves room for the hash's uneven spread, so fresh
  sub-shards do not land straight back over the threshold.
* A hybrid base key that is still hot once its hot entities are taken out is
  hot because many entities share it: a larger global N is recommended.
* An entity with its own count scales down only when each of the last
  ``scale_down_windows`` windows (contiguous, all closed) would have fitted
  in fewer partitions at ``scale_down_fraction`` of the budget, and its count
  did not change during them. The stricter budget is the hysteresis: a load
  between the two levels changes nothing, so the count cannot flap.
* Every change takes effect at ``change_from_ms``, which the caller computes
  with ``keydesign.earliest_change_boundary`` (the first bucket boundary every
  writer will have seen), or at a change already scheduled later. Nothing is
  ever scheduled in the past, so nothing is ever rewritten.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from keydesign import CAPABILITIES, ConfigError, ShardMap, shards_for
from keydesign.capacity import PARTITION_WCU
from keydesign.layouts import LayoutKind
from keydesign.shardmap import MAX_ENTITY_SHARDS, MAX_GLOBAL_SHARDS, Change

#: The stream's event names; anything else is not a write.
EVENT_NAMES = frozenset({"INSERT", "MODIFY", "REMOVE"})
#: Upper bound of top_k: metric dimensions per window stay few.
MAX_TOP_K = 10
#: Busiest keys and entities one batch adds to the shared counters (at least 1,000 / threshold).
COUNTERS_PER_WINDOW = 25


@dataclass(frozen=True, slots=True, kw_only=True)
class Observation:
    """One write seen on the stream: ``write_units`` is what it was billed.

    ``shared_key`` is True for a partition key many entities share (a hybrid
    base key ``SSSS#bucket``); an entity's own keys are not shared.
    """

    partition_key: str
    entity: str
    write_units: int
    approx_time_ms: int
    event_name: str
    shared_key: bool = False


@dataclass(frozen=True, slots=True)
class DetectorConfig:
    """Windows and thresholds. Invalid values raise ``ConfigError`` naming the field."""

    window_ms: int = 60_000
    split_threshold_wcu: float = 500.0
    target_utilisation: float = 0.4
    scale_down_windows: int = 10
    scale_down_fraction: float = 0.8
    top_k: int = 5
    counters_per_window: int = COUNTERS_PER_WINDOW

    def __post_init__(self) -> None:
        if self.window_ms < 1_000 or self.window_ms % 1_000:
            # ApproximateCreationDateTime has whole-second resolution.
            raise ConfigError("window", f"must be a whole number of seconds, at least 1 s; got {self.window_ms} ms")
        if not 0 < self.split_threshold_wcu <= PARTITION_WCU:
            raise ConfigError(
                "split_threshold_wcu",
                f"must be above 0 and at most {PARTITION_WCU} (a key's limit); got {self.split_threshold_wcu}",
            )
        if not 0 < self.target_utilisation <= 1:
            raise ConfigError("target_utilisation", f"must be in (0, 1]; got {self.target_utilisation}")
        if self.scale_down_windows < 1:
            raise ConfigError("scale_down_windows", f"must be at least 1; got {self.scale_down_windows}")
        if not 0 < self.scale_down_fraction < 1:
            raise ConfigError("scale_down_fraction", f"must be in (0, 1); got {self.scale_down_fraction}")
        if not 1 <= self.top_k <= MAX_TOP_K:
            raise ConfigError("top_k", f"must be 1 to {MAX_TOP_K}; got {self.top_k}")
        # A key over the threshold carries at least threshold/1,000 of its
        # partition's writes (a partition takes 1,000 WCU/s), so it is among the
        # top ceil(1,000 / threshold) of any batch read from that partition.
        floor = math.ceil(PARTITION_WCU / self.split_threshold_wcu)
        if self.counters_per_window < floor:
            raise ConfigError(
                "counters_per_window",
                f"must be at least {floor} (1,000 / threshold) so that no key over the threshold "
                f"can be left out of a batch's counters; got {self.counters_per_window}",
            )

    @property
    def budget_wcu(self) -> float:
        """WCU/s a partition key is sized for when an entity is split."""
        return min(self.split_threshold_wcu, self.target_utilisation * PARTITION_WCU)

    def shards_needed(self, wcu_per_s: float) -> int:
        """Partitions that carry ``wcu_per_s`` at or under the budget each."""
        return shards_for(wcu_per_s, self.budget_wcu / PARTITION_WCU)

    def shards_to_keep(self, wcu_per_s: float) -> int:
        """Partitions a scale-down keeps: each at or under ``scale_down_fraction`` of the budget."""
        return shards_for(wcu_per_s, self.scale_down_fraction * self.budget_wcu / PARTITION_WCU)

    def window_start(self, ts_ms: int) -> int:
        return ts_ms - ts_ms % self.window_ms


# -- load in one window --------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load:
    """Write units, writes and user deletes (deletes are writes too)."""

    wcu: int = 0
    writes: int = 0
    deletes: int = 0


@dataclass(frozen=True, slots=True)
class WindowLoad:
    """The load of one window ``[start_ms, start_ms + width_ms)``, per partition key and per entity.

    ``entity_keys`` holds the partition keys each entity wrote to;
    ``shared_keys`` the keys many entities share (hybrid base keys).
    """

    start_ms: int
    width_ms: int
    keys: Mapping[str, Load]
    entities: Mapping[str, Load]
    entity_keys: Mapping[str, frozenset[str]]
    shared_keys: frozenset[str]

    @classmethod
    def empty(cls, start_ms: int, width_ms: int) -> WindowLoad:
        return cls(start_ms, width_ms, MappingProxyType({}), MappingProxyType({}), MappingProxyType({}), frozenset())

    @property
    def end_ms(self) -> int:
        return self.start_ms + self.width_ms

    def rate(self, load: Load) -> float:
        """WCU/s of ``load`` over this window."""
        return load.wcu * 1000 / self.width_ms

    def key_rate(self, key: str) -> float:
        return self.rate(self.keys.get(key, Load()))

    def entity_rate(self, entity: str) -> float:
        return self.rate(self.entities.get(entity, Load()))

    def top_keys(self, n: int) -> list[tuple[str, float]]:
        """The ``n`` busiest partition keys with their WCU/s, busiest first (ties by name)."""
        return self._top(self.keys, n)

    def top_entities(self, n: int) -> list[tuple[str, float]]:
        return self._top(self.entities, n)

    def _top(self, loads: Mapping[str, Load], n: int) -> list[tuple[str, float]]:
        ranked = sorted(loads.items(), key=lambda kv: (-kv[1].wcu, kv[0]))[:n]
        return [(name, self.rate(load)) for name, load in ranked]

    def select(self, limit: int, always: Iterable[str] = ()) -> tuple[WindowLoad, int]:
        """The part worth storing: the ``limit`` busiest keys and entities, plus
        every entity in ``always`` that wrote here (split entities: their quiet windows
        decide a scale-down, so none of their load may go uncounted). Returns it with the
        number of keys and entities left out."""
        entities = {e for e, _ in self.top_entities(limit)} | (set(always) & self.entities.keys())
        keys = {k for k, _ in self.top_keys(limit)}
        dropped = len(self.entities) - len(entities) + len(self.keys) - len(keys)
        kept = WindowLoad(
            self.start_ms,
            self.width_ms,
            MappingProxyType({k: self.keys[k] for k in sorted(keys)}),
            MappingProxyType({e: self.entities[e] for e in sorted(entities)}),
            MappingProxyType({e: self.entity_keys.get(e, frozenset()) for e in sorted(entities)}),
            frozenset(self.shared_keys & keys),
        )
        return kept, dropped


class WindowTally:
    """Builds a :class:`WindowLoad` one write, or one stored run's counts, at a time."""

    def __init__(self, start_ms: int, width_ms: int) -> None:
        self.start_ms = start_ms
        self.width_ms = width_ms
        self._keys: dict[str, list[int]] = {}
        self._entities: dict[str, list[int]] = {}
        self._entity_keys: dict[str, set[str]] = {}
        self._shared: set[str] = set()

    def add(
        self, partition_key: str, entity: str, wcu: int, *, writes: int = 1, deletes: int = 0, shared_key: bool = False
    ) -> None:
        self.add_key(partition_key, (wcu, writes, deletes), shared=shared_key)
        self.add_entity(entity, (wcu, writes, deletes), (partition_key,))

    def add_key(self, key: str, counts: Sequence[int], *, shared: bool) -> None:
        """Add ``counts`` (write units, writes, deletes) to ``key``; ``shared``: many entities write to it."""
        _add(self._keys.setdefault(key, [0, 0, 0]), counts)
        if shared:
            self._shared.add(key)

    def add_entity(self, entity: str, counts: Sequence[int], keys: Iterable[str]) -> None:
        """Add ``counts`` to ``entity``, which wrote to the partition keys ``keys``."""
        _add(self._entities.setdefault(entity, [0, 0, 0]), counts)
        self._entity_keys.setdefault(entity, set()).update(keys)

    def count(self, obs: Observation) -> None:
        """Add one observed write (a TTL deletion is the caller's to leave out)."""
        deletes = 1 if obs.event_name == "REMOVE" else 0
        self.add(obs.partition_key, obs.entity, obs.write_units, deletes=deletes, shared_key=obs.shared_key)

    def load(self) -> WindowLoad:
        return WindowLoad(
            self.start_ms,
            self.width_ms,
            MappingProxyType({k: Load(*v) for k, v in self._keys.items()}),
            MappingProxyType({e: Load(*v) for e, v in self._entities.items()}),
            MappingProxyType({e: frozenset(v) for e, v in self._entity_keys.items()}),
            frozenset(self._shared),
        )


def _add(total: list[int], counts: Sequence[int]) -> None:
    for i, count in enumerate(counts):
        total[i] += count


def tally(observations: Iterable[Observation], config: DetectorConfig) -> dict[int, WindowTally]:
    """Observations grouped into window tallies by write time (TTL deletions never become one)."""
    windows: dict[int, WindowTally] = {}
    for obs in observations:
        start = config.window_start(obs.approx_time_ms)
        window = windows.get(start)
        if window is None:
            window = windows[start] = WindowTally(start, config.window_ms)
        window.count(obs)
    return windows


# -- decisions ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class HotKey:
    """A partition key over the threshold in a window.

    ``entity`` is the hot entity on it, if one is; ``crowded`` is True when the
    key is over the threshold even without its hot entities (many entities share it).
    """

    key: str
    wcu_per_s: float
    entity: str | None
    crowded: bool


@dataclass(frozen=True, slots=True)
class EntityChange:
    """An entity's own partition count goes from ``from_shards`` to ``to_shards`` at ``effective_from_ms``."""

    entity: str
    from_shards: int
    to_shards: int
    effective_from_ms: int
    wcu_per_s: float


@dataclass(frozen=True, slots=True)
class GlobalChange:
    """Global N goes from ``from_shards`` to ``to_shards``: ``key`` carries ``wcu_per_s`` of many entities."""

    from_shards: int
    to_shards: int
    effective_from_ms: int
    key: str
    wcu_per_s: float


@dataclass(frozen=True, slots=True)
class Decisions:
    """What one closed window calls for."""

    window_start_ms: int
    window_end_ms: int
    hot_keys: tuple[HotKey, ...] = ()
    hot_entities: tuple[tuple[str, float], ...] = ()
    splits: tuple[EntityChange, ...] = ()
    scale_downs: tuple[EntityChange, ...] = ()
    global_change: GlobalChange | None = None
    at_limit: tuple[str, ...] = ()
    top_keys: tuple[tuple[str, float], ...] = ()
    top_entities: tuple[tuple[str, float], ...] = ()

    @property
    def has_changes(self) -> bool:
        return bool(self.splits or self.scale_downs or self.global_change)


def entity_count_at(shard_map: ShardMap, entity: str, ts_ms: int, layout_kind: LayoutKind) -> int:
    """Partitions ``entity`` writes to at ``ts_ms``."""
    own = shard_map.entity_shards_at(entity, ts_ms)
    if own is not None:
        return own
    return 1 if CAPABILITIES[layout_kind].shared_partitions else shard_map.global_shards_at(ts_ms)


def entity_target(shard_map: ShardMap, entity: str, layout_kind: LayoutKind) -> int:
    """Partitions ``entity`` will write to once every scheduled change is in force."""
    history = shard_map.entity_history.get(entity)
    if history:
        return history[-1].shards
    return 1 if CAPABILITIES[layout_kind].shared_partitions else shard_map.global_history[-1].shards


def _effective(history: Sequence[Change] | None, change_from_ms: int) -> int:
    # A change already scheduled later than change_from must not be preceded
    # (ShardMap refuses it): join it at its boundary instead.
    return max(change_from_ms, history[-1].effective_from_ms) if history else change_from_ms


def _contiguous(load: WindowLoad, history: Sequence[WindowLoad], count: int) -> list[WindowLoad] | None:
    """The ``count`` windows ending with ``load``, oldest first, if history has them all."""
    by_start = {w.start_ms: w for w in history if w.width_ms == load.width_ms}
    span = [load]
    for i in range(1, count):
        previous = by_start.get(load.start_ms - i * load.width_ms)
        if previous is None:
            return None
        span.append(previous)
    return span[::-1]


def decide(
    load: WindowLoad,
    shard_map: ShardMap,
    *,
    layout_kind: LayoutKind,
    config: DetectorConfig,
    change_from_ms: int,
    history: Sequence[WindowLoad] = (),
) -> Decisions:
    """Decide on one closed window.

    ``history`` holds earlier closed windows (only the entities with their own
    count are needed); a scale-down needs the ``scale_down_windows - 1``
    windows just before ``load``, all present. ``change_from_ms`` is the
    earliest boundary a change may take effect at.
    """
    hot_entities, splits, at_limit = _hot_entities(load, shard_map, layout_kind, config, change_from_ms)
    hot_set = {e for e, _ in hot_entities}
    hot_keys, crowd = _hot_keys(load, hot_set, config.split_threshold_wcu)
    global_change: GlobalChange | None = None
    if crowd is not None and CAPABILITIES[layout_kind].shared_partitions:
        n_now = shard_map.global_shards_at(load.start_ms)
        n_target = shard_map.global_history[-1].shards
        needed = min(MAX_GLOBAL_SHARDS, math.ceil(n_now * crowd[1] / config.budget_wcu - 1e-9))
        if needed > n_target:
            effective = _effective(shard_map.global_history, change_from_ms)
            global_change = GlobalChange(n_target, needed, effective, crowd[0], crowd[1])
    busy = hot_set | {s.entity for s in splits}
    # A window without one counted write (an idle table, or every stream shard's records
    # still in flight) says nothing about quiet: it never starts a scale-down.
    scale_downs = (
        _scale_downs(
            load,
            history,
            shard_map,
            layout_kind=layout_kind,
            config=config,
            change_from_ms=change_from_ms,
            busy=busy,
        )
        if load.keys
        else []
    )
    return Decisions(
        window_start_ms=load.start_ms,
        window_end_ms=load.end_ms,
        hot_keys=tuple(hot_keys),
        hot_entities=tuple(hot_entities),
        splits=tuple(splits),
        scale_downs=tuple(scale_downs),
        global_change=global_change,
        at_limit=tuple(at_limit),
        top_keys=tuple(load.top_keys(config.top_k)),
        top_entities=tuple(load.top_entities(config.top_k)),
    )


def _hot_entities(
    load: WindowLoad, shard_map: ShardMap, layout_kind: LayoutKind, config: DetectorConfig, change_from_ms: int
) -> tuple[list[tuple[str, float]], list[EntityChange], list[str]]:
    hot: list[tuple[str, float]] = []
    splits: list[EntityChange] = []
    at_limit: list[str] = []
    for entity in sorted(load.entities):
        rate = load.entity_rate(entity)
        now_count = entity_count_at(shard_map, entity, load.start_ms, layout_kind)
        target = entity_target(shard_map, entity, layout_kind)
        # A scale-down already scheduled counts too: a load that would be hot
        # on fewer partitions cancels it by raising the count again.
        if rate / min(now_count, target) <= config.split_threshold_wcu:
            continue
        hot.append((entity, rate))
        needed = config.shards_needed(rate)
        if needed > MAX_ENTITY_SHARDS:
            at_limit.append(entity)
            needed = MAX_ENTITY_SHARDS
        if needed > target:
            effective = _effective(shard_map.entity_history.get(entity), change_from_ms)
            splits.append(EntityChange(entity, target, needed, effective, rate))
    return hot, splits, at_limit


def _hot_keys(
    load: WindowLoad, hot_entities: set[str], threshold: float
) -> tuple[list[HotKey], tuple[str, float] | None]:
    """The keys over the threshold with their causes, and the most crowded shared key (with the
    load left on it once its hot entities are taken out)."""
    writers: dict[str, list[str]] = {}
    for entity, keys in load.entity_keys.items():
        for key in keys:
            writers.setdefault(key, []).append(entity)

    def share(entity: str) -> float:
        # An entity writes to one key per window unless it has sub-shards.
        return load.entity_rate(entity) / max(1, len(load.entity_keys.get(entity, ())))

    hot_keys: list[HotKey] = []
    crowd: tuple[str, float] | None = None
    for key in sorted(load.keys):
        rate = load.key_rate(key)
        if rate <= threshold:
            continue
        on_key = sorted(writers.get(key, ()), key=lambda e: (-share(e), e))
        hot_here = [e for e in on_key if e in hot_entities]
        shared = key in load.shared_keys
        crowded = False
        if shared:
            rest = rate - sum(share(e) for e in hot_here)
            crowded = rest > threshold
            if crowded and (crowd is None or rest > crowd[1]):
                crowd = (key, rest)
        cause = hot_here[0] if hot_here else (on_key[0] if on_key and not shared else None)
        hot_keys.append(HotKey(key, rate, cause, crowded))
    return hot_keys, crowd


def _scale_downs(
    load: WindowLoad,
    history: Sequence[WindowLoad],
    shard_map: ShardMap,
    *,
    layout_kind: LayoutKind,
    config: DetectorConfig,
    change_from_ms: int,
    busy: set[str],
) -> list[EntityChange]:
    span = _contiguous(load, history, config.scale_down_windows)
    if span is None:
        return []
    floor = 1 if CAPABILITIES[layout_kind].shared_partitions else shard_map.global_history[-1].shards
    changes: list[EntityChange] = []
    for entity, entity_history in sorted(shard_map.entity_history.items()):
        if entity in busy:
            continue
        target = entity_history[-1].shards
        # The count must have been in force, unchanged, through the whole span.
        if target <= floor or entity_history[-1].effective_from_ms > span[0].start_ms:
            continue
        peak = max(w.entity_rate(entity) for w in span)
        keep = max(floor, config.shards_to_keep(peak))
        if keep < target:
            changes.append(EntityChange(entity, target, keep, _effective(entity_history, change_from_ms), peak))
    return changes


def apply_decisions(
    shard_map: ShardMap,
    decisions: Decisions,
    *,
    layout_kind: LayoutKind,
    now_ms: int,
    change_from_ms: int,
    entity_changes: bool = True,
    global_changes: bool = False,
) -> ShardMap:
    """The map with ``decisions`` applied, re-judged against ``shard_map`` (which may be newer
    than the one they were decided on). A pure function of its inputs, so it can be re-run
    after a lost optimistic-concurrency race:

    * a split only ever raises a count (two detectors racing end at the larger);
    * a scale-down applies only if the count is still the one it was decided on;
    * a global change only ever raises N, and only when ``global_changes`` is on.

    Changes take effect at the latest of the decision's boundary, ``change_from_ms``
    (recomputed now) and any change already scheduled. Returns ``shard_map``
    itself when nothing changes.
    """
    result = shard_map

    def with_entity(change: EntityChange) -> ShardMap:
        effective = max(change.effective_from_ms, _effective(result.entity_history.get(change.entity), change_from_ms))
        return result.with_entity(change.entity, change.to_shards, effective, now_ms=now_ms)

    if entity_changes:
        for split in decisions.splits:
            if split.to_shards > entity_target(result, split.entity, layout_kind):
                result = with_entity(split)
        for down in decisions.scale_downs:
            if entity_target(result, down.entity, layout_kind) == down.from_shards > down.to_shards:
                result = with_entity(down)
    change = decisions.global_change
    if global_changes and change is not None and change.to_shards > result.global_history[-1].shards:
        effective = max(change.effective_from_ms, _effective(result.global_history, change_from_ms))
        result = result.with_global(change.to_shards, effective, now_ms=now_ms)
    return result
