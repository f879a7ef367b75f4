"""Settings of the hot-key Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings`; ``CONTROL_TABLE`` is
required here. docs/configuration.md lists every variable (from the model).
The window, its grace, the change margin and the scale-down windows are
local-only (the demo compresses time with them); the detector's other
parameters are :class:`~hotkeys.detector.DetectorConfig`'s defaults, and the
counters' and claims' are constants of :mod:`hotkeys.control_table` and :mod:`hotkeys.logic`.

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
from hotkeys.control_table import COUNTER_RETENTION_MS
from hotkeys.detector import COUNTERS_PER_WINDOW, DetectorConfig
from keydesign import ConfigError
from keydesign.capacity import PARTITION_WCU


class HotKeySettings(CommonSettings):
    control_table: str = env("CONTROL_TABLE")
    """Shard-map table; unset: the static map of SHARDS (required by hot keys)."""
    # A split decided at or past a key's 1,000 WCU/s is too late.
    split_threshold_wcu: int = env("HOT_SPLIT_THRESHOLD_WCU", 500, ge=1, le=PARTITION_WCU - 1)
    """WCU/s on one partition key that makes it hot."""
    auto_apply_entity: Flag = env("HOT_AUTO_APPLY_ENTITY", True)
    """Apply entity splits and scale-downs (else only recommend)."""
    auto_apply_global: Flag = env("HOT_AUTO_APPLY_GLOBAL", False)
    """Apply a larger global N (else only recommend)."""
    alert_topic_arn: str | None = env("HOT_ALERT_TOPIC_ARN", None)
    """SNS topic for hot-key notifications; unset: none."""
    window_ms: DurationMs = env("HOT_WINDOW", "60s")
    """Window the load is measured over; divides the bucket."""
    window_grace_ms: DurationMs = env("HOT_WINDOW_GRACE", "30s")
    """Wait after a window ends before judging it (stream lag)."""
    change_margin: DurationMs | None = env("HOT_CHANGE_MARGIN", None)
    """Extra wait beyond SHARD_MAP_CACHE_TTL before a change applies; unset: MAX_FUTURE + 60s."""
    scale_down_windows: int = env("HOT_SCALE_DOWN_WINDOWS", 10, ge=1)
    """Quiet windows in a row before an entity scales down."""

    @model_validator(mode="after")
    def _rules(self) -> Self:
        try:  # built (and kept) here, so the detector's own rules fail at cold start
            _ = self.detector
        except ConfigError as exc:
            raise self.invalid(exc.field if exc.field in type(self).model_fields else "window_ms", exc.reason) from None
        window_ms, bucket = self.window_ms, self.layout.bucket
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
            needed <= COUNTER_RETENTION_MS,
            "scale_down_windows",
            f"{self.scale_down_windows} windows and the grace ({math.ceil(needed / 1000)}s) outlast the counters (1d)",
        )
        return self

    @cached_property
    def detector(self) -> DetectorConfig:
        # A key over the threshold carries at least threshold/1,000 of its stream shard's writes, so it is
        # among a batch's top 1,000/threshold: a batch adds at least that many counters.
        return DetectorConfig(
            window_ms=self.window_ms,
            split_threshold_wcu=self.split_threshold_wcu,
            scale_down_windows=self.scale_down_windows,
            counters_per_window=max(COUNTERS_PER_WINDOW, math.ceil(PARTITION_WCU / self.split_threshold_wcu)),
        )

    @property
    def change_margin_ms(self) -> int:
        return self.max_future_ms + 60_000 if self.change_margin is None else self.change_margin
