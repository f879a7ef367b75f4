"""Settings of the hot-key Lambda, parsed from the environment at cold start.

On top of :class:`adapters.settings.CommonSettings` (LAYOUT, SHARDS, BUCKET,
TABLE_PREFIX, TABLE_PERIOD, RETENTION, CONTROL_TABLE, SHARD_MAP_CACHE_TTL);
``CONTROL_TABLE`` is required here. Durations are ``90s``, ``15m``, ``2h``, ``1d``.

============================  ==============================================================  =========
variable                      meaning                                                         default
============================  ==============================================================  =========
``HOT_SPLIT_THRESHOLD_WCU``   WCU/s on one partition key that makes it hot (1..1000)          500
``HOT_TARGET_UTILISATION``    a split sizes each key for this share of 1,000 WCU/s (0..1]     0.4
``HOT_WINDOW``                window the load is measured over; divides the bucket            60s
``HOT_WINDOW_GRACE``          wait after a window ends before judging it (stream lag)         30s
``HOT_SCALE_DOWN_WINDOWS``    quiet windows in a row before an entity scales down             10
``HOT_SCALE_DOWN_FRACTION``   "quiet": fits fewer keys at this share of the budget (0..1)     0.8
``HOT_TOP_K``                 keys and entities published as metric dimensions (1..10)        5
``HOT_COUNTERS_PER_WINDOW``   busiest keys and entities one batch adds to shared counters     25
``HOT_COUNTER_SHARDS``        partition keys the counters of one window are spread over       8
``HOT_COUNTER_RETENTION``     counters and claims expire (attribute expires_at) after         1d
``HOT_CONCURRENCY``           counter writes in flight at once (1..32)                        8
``HOT_CLOSE_LEASE``           a window-close claim can be taken over after                    2m
``HOT_CHANGE_MARGIN``         extra wait beyond SHARD_MAP_CACHE_TTL before a change applies   MAX_FUTURE + 60s
``HOT_AUTO_APPLY_ENTITY``     apply entity splits and scale-downs (else only recommend)       true
``HOT_AUTO_APPLY_GLOBAL``     apply a larger global N (else only recommend)                   false
``HOT_ALERT_TOPIC_ARN``       SNS topic for hot-key notifications; empty = none               empty
``HOT_ALERT_COOLDOWN``        one notification per hot key per                                1h
``HOT_ASSUMED_ITEM_BYTES``    item size floor for a KEYS_ONLY stream (0 = use SizeBytes)      0
``MAX_FUTURE``                the ingest function's setting; the margin must cover it         5m
============================  ==============================================================  =========

``HOT_CHANGE_MARGIN`` must be at least ``MAX_FUTURE``: ingest keys a reading by
its *event* time, which may lie up to ``MAX_FUTURE`` ahead of the clock, so a
writer holding the old map may key readings that far past the moment its copy
expires. A boundary closer than that could receive a reading keyed with the old
map, and readers (using the new one) would not find it.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass

from adapters.settings import CommonSettings, SettingsError, duration_ms, integer, required
from hotkeys.detector import MAX_TOP_K, DetectorConfig
from keydesign import ConfigError
from keydesign.items import MAX_ITEM_BYTES

_FIELD_VARIABLES = {
    "window": "HOT_WINDOW",
    "split_threshold_wcu": "HOT_SPLIT_THRESHOLD_WCU",
    "target_utilisation": "HOT_TARGET_UTILISATION",
    "scale_down_windows": "HOT_SCALE_DOWN_WINDOWS",
    "scale_down_fraction": "HOT_SCALE_DOWN_FRACTION",
    "top_k": "HOT_TOP_K",
    "counters_per_window": "HOT_COUNTERS_PER_WINDOW",
    "assumed_item_bytes": "HOT_ASSUMED_ITEM_BYTES",
}
_TRUE = frozenset({"true", "1", "yes", "on"})
_FALSE = frozenset({"false", "0", "no", "off"})


@dataclass(frozen=True, slots=True)
class HotKeySettings:
    common: CommonSettings
    control_table: str
    detector: DetectorConfig
    window_grace_ms: int
    change_margin_ms: int
    counter_shards: int
    counter_retention_ms: int
    concurrency: int
    close_lease_ms: int
    auto_apply_entity: bool
    auto_apply_global: bool
    alert_topic_arn: str | None
    alert_cooldown_ms: int

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> HotKeySettings:
        env = os.environ if env is None else env
        common = CommonSettings.from_env(env)
        control_table = required(env, "CONTROL_TABLE")
        window_ms = duration_ms(env, "HOT_WINDOW", "60s")
        try:
            detector = DetectorConfig(
                window_ms=window_ms,
                split_threshold_wcu=integer(env, "HOT_SPLIT_THRESHOLD_WCU", 500, 1, 1_000),
                target_utilisation=fraction(env, "HOT_TARGET_UTILISATION", 0.4, allow_one=True),
                scale_down_windows=integer(env, "HOT_SCALE_DOWN_WINDOWS", 10, 1, 1_000),
                scale_down_fraction=fraction(env, "HOT_SCALE_DOWN_FRACTION", 0.8, allow_one=False),
                top_k=integer(env, "HOT_TOP_K", 5, 1, MAX_TOP_K),
                counters_per_window=integer(env, "HOT_COUNTERS_PER_WINDOW", 25, 1, 1_000),
                assumed_item_bytes=integer(env, "HOT_ASSUMED_ITEM_BYTES", 0, 0, MAX_ITEM_BYTES),
            )
        except ConfigError as exc:
            raise SettingsError(_FIELD_VARIABLES.get(exc.field, exc.field), exc.reason) from None
        bucket = common.layout.bucket
        if bucket.width_ms % window_ms:
            raise SettingsError(
                "HOT_WINDOW", f"{window_ms // 1000}s must divide the {bucket.spec} bucket, so no window spans two"
            )
        grace = duration_ms(env, "HOT_WINDOW_GRACE", "30s")
        max_future = duration_ms(env, "MAX_FUTURE", "5m")
        margin_default = f"{max_future // 1000 + 60}s"
        margin = duration_ms(env, "HOT_CHANGE_MARGIN", margin_default)
        if margin < max_future:
            raise SettingsError(
                "HOT_CHANGE_MARGIN",
                f"{margin // 1000}s is less than MAX_FUTURE ({max_future // 1000}s): a writer with the old map "
                "may key a reading that far ahead, past the boundary",
            )
        retention = duration_ms(env, "HOT_COUNTER_RETENTION", "1d")
        needed = window_ms * (detector.scale_down_windows + 2) + grace
        if retention < needed:
            raise SettingsError(
                "HOT_COUNTER_RETENTION",
                f"must cover HOT_SCALE_DOWN_WINDOWS + 2 windows plus the grace ({math.ceil(needed / 1000)}s)",
            )
        topic = env.get("HOT_ALERT_TOPIC_ARN", "").strip() or None
        if topic is not None and not topic.startswith("arn:"):
            raise SettingsError("HOT_ALERT_TOPIC_ARN", f"{topic[:80]!r} is not an SNS topic ARN")
        return cls(
            common=common,
            control_table=control_table,
            detector=detector,
            window_grace_ms=grace,
            change_margin_ms=margin,
            counter_shards=integer(env, "HOT_COUNTER_SHARDS", 8, 1, 100),
            counter_retention_ms=retention,
            concurrency=integer(env, "HOT_CONCURRENCY", 8, 1, 32),
            close_lease_ms=duration_ms(env, "HOT_CLOSE_LEASE", "2m"),
            auto_apply_entity=boolean(env, "HOT_AUTO_APPLY_ENTITY", True),
            auto_apply_global=boolean(env, "HOT_AUTO_APPLY_GLOBAL", False),
            alert_topic_arn=topic,
            alert_cooldown_ms=duration_ms(env, "HOT_ALERT_COOLDOWN", "1h"),
        )


def fraction(env: Mapping[str, str], name: str, default: float, *, allow_one: bool) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise SettingsError(name, f"{raw!r} is not a number") from None
    upper_ok = value <= 1 if allow_one else value < 1
    if not (math.isfinite(value) and value > 0 and upper_ok):
        raise SettingsError(name, f"{raw} must lie in (0, 1{']' if allow_one else ')'}")
    return value


def boolean(env: Mapping[str, str], name: str, default: bool) -> bool:
    raw = env.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise SettingsError(name, f"{raw!r} is not true or false")
