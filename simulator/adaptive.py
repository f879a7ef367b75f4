"""The adaptive layout: the hot-key detector's own logic, driven window by window by the simulated writes.

The hot-key Lambda reads writes off the DynamoDB stream, adds them up per
window, judges each window ``HOT_WINDOW_GRACE`` after it ends, and changes the
shard map from the first bucket boundary every writer will have seen
(``earliest_change_boundary``: now + ``SHARD_MAP_CACHE_TTL`` +
``HOT_CHANGE_MARGIN``). Here the same steps run in simulated time with
``hotkeys.detector``: :class:`LoadTracker` holds the windows in memory,
:func:`~hotkeys.detector.decide` judges them and :func:`~hotkeys.detector.apply_decisions`
turns the decisions into the next map. Writers in the simulation key with that map; since a change only takes
effect after every writer's cache has expired, every writer holds the same
map for every instant it keys, as in production.

One difference in form, none in figures: the tracker is given one
observation per (window, partition key, entity) standing for all of that
entity's blocks written to the key in the window, with their total write
units (what each block's sort key says). The detector judges write units per
window only, so its windows, rates and decisions are those it would reach from
one observation per block; the window's ``writes`` tally (which no decision
reads) counts observations instead of blocks.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, field
from typing import Literal

from hotkeys.detector import (
    DetectorConfig,
    Observation,
    WindowLoad,
    WindowTally,
    apply_decisions,
    decide,
    entity_target,
)
from keydesign import ConfigError, Layout, ShardMap, earliest_change_boundary

ChangeKind = Literal["split", "scale_down", "global"]


@dataclass(frozen=True, slots=True)
class ClosedWindow:
    """A closed window and the contiguous closed windows before it (oldest first)."""

    load: WindowLoad
    history: tuple[WindowLoad, ...]


class LoadTracker:
    """Windows kept in memory: observe writes, close windows as time passes.

    The Lambda cannot use this (its windows are spread over many concurrent
    invocations and live in the control table); the simulator, one process, can,
    and gets the same windows the Lambda would.
    """

    def __init__(self, config: DetectorConfig) -> None:
        self._config = config
        self._open: dict[int, WindowTally] = {}
        self._history: deque[WindowLoad] = deque(maxlen=max(1, config.scale_down_windows - 1))
        self._closed_until: int | None = None
        self.late = 0

    def observe(self, obs: Observation) -> bool:
        """Count one write; False when it is not counted (its window is closed)."""
        start = self._config.window_start(obs.approx_time_ms)
        if self._closed_until is not None and start < self._closed_until:
            self.late += 1
            return False
        window = self._open.get(start)
        if window is None:
            window = self._open[start] = WindowTally(start, self._config.window_ms)
        window.count(obs)
        return True

    def close_until(self, now_ms: int, grace_ms: int = 0) -> list[ClosedWindow]:
        """Close every window that ended at or before ``now_ms - grace_ms``, quiet ones included."""
        if self._closed_until is not None:
            start = self._closed_until
        elif self._open:
            start = min(self._open)
        else:
            return []
        width = self._config.window_ms
        closed: list[ClosedWindow] = []
        while start + width <= now_ms - grace_ms:
            window = self._open.pop(start, None)
            load = window.load() if window is not None else WindowLoad.empty(start, width)
            closed.append(ClosedWindow(load, tuple(self._history)))
            self._history.append(load)
            start += width
        self._closed_until = start
        return closed


@dataclass(frozen=True, slots=True)
class AdaptiveSettings:
    """The hot-key function's settings that shape its reaction (defaults: the function's defaults)."""

    detector: DetectorConfig = field(default_factory=DetectorConfig)
    grace_ms: int = 30_000
    cache_ttl_ms: int = 60_000
    margin_ms: int = 360_000
    auto_global: bool = False

    def validate(self, layout: Layout) -> None:
        """Raise :class:`ConfigError` naming the setting that cannot work with ``layout``."""
        window = self.detector.window_ms
        if layout.bucket.width_ms % window:
            raise ConfigError("window", f"{window // 1000}s must divide the {layout.bucket.spec} bucket")
        if self.grace_ms < 0 or self.grace_ms % 1000:
            raise ConfigError("grace", "must be whole seconds, 0 or more")
        if self.cache_ttl_ms < 0 or self.margin_ms < 0:
            raise ConfigError("cache_ttl" if self.cache_ttl_ms < 0 else "margin", "must not be negative")

    def to_dict(self) -> dict[str, object]:
        d = self.detector
        return {
            "window_s": d.window_ms // 1000,
            "grace_s": self.grace_ms // 1000,
            "split_threshold_wcu": d.split_threshold_wcu,
            "target_utilisation": d.target_utilisation,
            "budget_wcu": d.budget_wcu,
            "scale_down_windows": d.scale_down_windows,
            "scale_down_fraction": d.scale_down_fraction,
            "cache_ttl_s": self.cache_ttl_ms // 1000,
            "margin_s": self.margin_ms // 1000,
            "auto_apply_global": self.auto_global,
        }


@dataclass(frozen=True, slots=True)
class MapChange:
    """A change the detector called for: applied to the map, or only recommended (global N, auto-apply off)."""

    kind: ChangeKind
    decided_at_ms: int
    window_start_ms: int
    entity: str | None
    key: str | None
    from_shards: int
    to_shards: int
    effective_from_ms: int
    wcu_per_s: float
    applied: bool

    def to_dict(self) -> dict[str, object]:
        return {
            "kind": self.kind,
            "decided_at_ms": self.decided_at_ms,
            "window_start_ms": self.window_start_ms,
            "entity": self.entity,
            "key": self.key,
            "from": self.from_shards,
            "to": self.to_shards,
            "effective_from_ms": self.effective_from_ms,
            "wcu_per_s": round(self.wcu_per_s, 1),
            "applied": self.applied,
        }


class DetectorDriver:
    """Feeds one layout's simulated writes to the detector and keeps the shard map it produces."""

    def __init__(self, layout: Layout, shard_map: ShardMap, settings: AdaptiveSettings) -> None:
        self._layout = layout
        self._settings = settings
        self._tracker = LoadTracker(settings.detector)
        self.shard_map = shard_map
        self.changes: list[MapChange] = []

    def observe(self, time_ms: int, partition_key: str, entity: str, units: int, *, shared: bool) -> None:
        """Blocks of ``entity`` costing ``units`` write units put to ``partition_key`` in the window of ``time_ms``."""
        obs = Observation(
            partition_key=partition_key,
            entity=entity,
            write_units=units,
            approx_time_ms=time_ms,
            event_name="INSERT",
            shared_key=shared,
        )
        if not self._tracker.observe(obs):
            raise AssertionError(f"an observation at {time_ms} arrived after its window was judged")

    def advance(self, now_ms: int) -> None:
        """Judge every window that ended ``grace`` before ``now_ms``, as the hot-key Lambda would, and apply."""
        settings = self._settings
        kind = self._layout.kind
        for closed in self._tracker.close_until(now_ms, settings.grace_ms):
            change_from = earliest_change_boundary(
                self._layout.bucket, now_ms, settings.cache_ttl_ms, settings.margin_ms
            )
            decisions = decide(
                closed.load,
                self.shard_map,
                layout_kind=kind,
                config=settings.detector,
                change_from_ms=change_from,
                history=closed.history,
            )
            before = self.shard_map
            after = apply_decisions(
                before,
                decisions,
                layout_kind=kind,
                now_ms=now_ms,
                change_from_ms=change_from,
                entity_changes=True,
                global_changes=settings.auto_global,
            )
            for change in (*decisions.splits, *decisions.scale_downs):
                applied = after is not before and entity_target(after, change.entity, kind) == change.to_shards
                history = after.entity_history.get(change.entity, ())
                effective = history[-1].effective_from_ms if applied and history else change.effective_from_ms
                self.changes.append(
                    MapChange(
                        "split" if change.to_shards > change.from_shards else "scale_down",
                        now_ms,
                        closed.load.start_ms,
                        change.entity,
                        None,
                        change.from_shards,
                        change.to_shards,
                        effective,
                        change.wcu_per_s,
                        applied,
                    )
                )
            wanted = decisions.global_change
            if wanted is not None and not self._recommended(wanted.to_shards):
                applied = after.global_history[-1].shards == wanted.to_shards and settings.auto_global
                effective = after.global_history[-1].effective_from_ms if applied else wanted.effective_from_ms
                self.changes.append(
                    MapChange(
                        "global",
                        now_ms,
                        closed.load.start_ms,
                        None,
                        wanted.key,
                        wanted.from_shards,
                        wanted.to_shards,
                        effective,
                        wanted.wcu_per_s,
                        applied,
                    )
                )
            self.shard_map = after

    def _recommended(self, to_shards: int) -> bool:
        # The detector recommends a larger N every window the crowd lasts: record it when it grows.
        return any(c.kind == "global" and c.to_shards >= to_shards for c in self.changes)

    def first_effective_ms(self) -> int | None:
        """When the first applied change took effect (or will)."""
        applied = [c.effective_from_ms for c in self.changes if c.applied]
        return min(applied) if applied else None
