"""Settings of the hot-key Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``CONTROL_TABLE`` is
required here. docs/configuration.md lists every variable (from the model).

``HOT_CHANGE_MARGIN`` must be at least ``MAX_FUTURE``: ingest keys a reading by
its *event* time, which may lie up to ``MAX_FUTURE`` ahead of the clock, so a
writer holding the old map may key readings that far past the moment its copy
expires. A boundary closer than that could receive a reading keyed with the old
map, and readers (using the new one) would not find it.
"""

from __future__ import annotations

import math
from functools import cached_property
from typing import Self

from pydantic import model_validator

from adapters.settings import CommonSettings, DurationMs, Flag, env
from hotkeys.detector import MAX_TOP_K, DetectorConfig
from keydesign import ConfigError


class HotKeySettings(CommonSettings):
    control_table: str = env("CONTROL_TABLE")
    """Shard-map table; unset: the static map of SHARDS (required by hot keys)."""
    window_ms: DurationMs = env("HOT_WINDOW", "60s")
    """Window the load is measured over; divides the bucket."""
    split_threshold_wcu: int = env("HOT_SPLIT_THRESHOLD_WCU", 500, ge=1, le=1_000)
    """WCU/s on one partition key that makes it hot."""
    target_utilisation: float = env("HOT_TARGET_UTILISATION", 0.4, gt=0, le=1)
    """A split sizes each key for this share of 1,000 WCU/s (0..1]."""
    scale_down_windows: int = env("HOT_SCALE_DOWN_WINDOWS", 10, ge=1, le=1_000)
    """Quiet windows in a row before an entity scales down."""
    scale_down_fraction: float = env("HOT_SCALE_DOWN_FRACTION", 0.8, gt=0, lt=1)
    """'quiet': fits fewer keys at this share of the budget."""
    top_k: int = env("HOT_TOP_K", 5, ge=1, le=MAX_TOP_K)
    """Keys and entities published as metric dimensions."""
    counters_per_window: int = env("HOT_COUNTERS_PER_WINDOW", 25, ge=1, le=1_000)
    """Busiest keys and entities one batch adds to shared counters."""
    window_grace_ms: DurationMs = env("HOT_WINDOW_GRACE", "30s")
    """Wait after a window ends before judging it (stream lag)."""
    change_margin: DurationMs | None = env("HOT_CHANGE_MARGIN", None)
    """Extra wait beyond SHARD_MAP_CACHE_TTL before a change applies; unset: MAX_FUTURE + 60s."""
    counter_shards: int = env("HOT_COUNTER_SHARDS", 8, ge=1, le=100)
    """Partition keys the counters of one window are spread over."""
    counter_retention_ms: DurationMs = env("HOT_COUNTER_RETENTION", "1d")
    """Counters and claims expire (attribute expires_at) after."""
    concurrency: int = env("HOT_CONCURRENCY", 8, ge=1, le=32)
    """Counter writes in flight at once."""
    close_lease_ms: DurationMs = env("HOT_CLOSE_LEASE", "2m")
    """A window-close claim can be taken over after."""
    auto_apply_entity: Flag = env("HOT_AUTO_APPLY_ENTITY", True)
    """Apply entity splits and scale-downs (else only recommend)."""
    auto_apply_global: Flag = env("HOT_AUTO_APPLY_GLOBAL", False)
    """Apply a larger global N (else only recommend)."""
    alert_topic_arn: str | None = env("HOT_ALERT_TOPIC_ARN", None)
    """SNS topic for hot-key notifications; unset: none."""
    alert_cooldown_ms: DurationMs = env("HOT_ALERT_COOLDOWN", "1h")
    """One notification per hot key per."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        try:
            self.detector  # noqa: B018 - built here so a bad combination fails at cold start
        except ConfigError as exc:
            raise self.invalid(
                exc.field if exc.field in type(self).model_fields else f"{exc.field}_ms", exc.reason
            ) from None
        window_ms = self.window_ms
        bucket = self.layout.bucket
        self.check(
            bucket.width_ms % window_ms == 0,
            "window_ms",
            f"{window_ms // 1000}s must divide the {bucket.spec} bucket, so no window spans two",
        )
        self.check(
            self.change_margin_ms >= self.max_future_ms,
            "change_margin",
            f"{self.change_margin_ms // 1000}s is less than MAX_FUTURE ({self.max_future_ms // 1000}s): a writer "
            "with the old map may key a reading that far ahead, past the boundary",
        )
        needed = window_ms * (self.scale_down_windows + 2) + self.window_grace_ms
        self.check(
            self.counter_retention_ms >= needed,
            "counter_retention_ms",
            f"must cover HOT_SCALE_DOWN_WINDOWS + 2 windows plus the grace ({math.ceil(needed / 1000)}s)",
        )
        topic = self.alert_topic_arn
        self.check(
            topic is None or topic.startswith("arn:"),
            "alert_topic_arn",
            f"{str(topic)[:80]!r} is not an SNS topic ARN",
        )
        return self

    @cached_property
    def detector(self) -> DetectorConfig:
        return self.view(DetectorConfig)

    @property
    def change_margin_ms(self) -> int:
        return self.max_future_ms + 60_000 if self.change_margin is None else self.change_margin
