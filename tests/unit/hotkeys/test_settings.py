"""Cold-start settings of the hot-key function: defaults, and every bad variable named."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from hotkeys.settings import HotKeySettings

VALID = {"TABLE_PREFIX": "readings", "SHARDS": "100", "CONTROL_TABLE": "control"}


def test_defaults() -> None:
    settings = HotKeySettings.from_env(VALID)
    detector = settings.detector
    assert settings.control_table == "control"
    assert detector.window_ms == 60_000
    assert detector.split_threshold_wcu == 500
    assert detector.target_utilisation == 0.4
    assert detector.budget_wcu == 400
    assert (detector.scale_down_windows, detector.scale_down_fraction) == (10, 0.8)
    assert (detector.top_k, detector.counters_per_window) == (5, 25)
    assert settings.window_grace_ms == 30_000
    assert settings.change_margin_ms == 360_000  # MAX_FUTURE (5m) + 60s
    assert (settings.counter_shards, settings.concurrency) == (8, 8)
    assert settings.counter_retention_ms == 86_400_000
    assert settings.close_lease_ms == 120_000
    assert (settings.auto_apply_entity, settings.auto_apply_global) == (True, False)
    assert settings.alert_topic_arn is None
    assert settings.alert_cooldown_ms == 3_600_000


def test_every_setting_is_read() -> None:
    env = {
        **VALID,
        "BUCKET": "15m",
        "MAX_FUTURE": "2m",
        "HOT_SPLIT_THRESHOLD_WCU": "600",
        "HOT_TARGET_UTILISATION": "0.5",
        "HOT_WINDOW": "30s",
        "HOT_WINDOW_GRACE": "10s",
        "HOT_SCALE_DOWN_WINDOWS": "4",
        "HOT_SCALE_DOWN_FRACTION": "0.7",
        "HOT_TOP_K": "3",
        "HOT_COUNTERS_PER_WINDOW": "10",
        "HOT_COUNTER_SHARDS": "16",
        "HOT_COUNTER_RETENTION": "6h",
        "HOT_CONCURRENCY": "4",
        "HOT_CLOSE_LEASE": "1m",
        "HOT_AUTO_APPLY_ENTITY": "false",
        "HOT_AUTO_APPLY_GLOBAL": "TRUE",
        "HOT_ALERT_TOPIC_ARN": "arn:aws:sns:eu-west-1:123456789012:hot-keys",
        "HOT_ALERT_COOLDOWN": "15m",
    }
    s = HotKeySettings.from_env(env)
    d = s.detector
    assert (d.split_threshold_wcu, d.target_utilisation, d.window_ms) == (600, 0.5, 30_000)
    assert (d.scale_down_windows, d.scale_down_fraction, d.top_k) == (4, 0.7, 3)
    assert d.counters_per_window == 10
    assert s.window_grace_ms == 10_000
    assert s.change_margin_ms == 180_000  # MAX_FUTURE 2m + 60s
    assert (s.counter_shards, s.counter_retention_ms, s.concurrency) == (16, 6 * 3_600_000, 4)
    assert s.close_lease_ms == 60_000
    assert (s.auto_apply_entity, s.auto_apply_global) == (False, True)
    assert s.alert_topic_arn == "arn:aws:sns:eu-west-1:123456789012:hot-keys"
    assert s.alert_cooldown_ms == 900_000


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"CONTROL_TABLE": ""}, "CONTROL_TABLE"),
        ({"SHARDS": ""}, "SHARDS"),
        ({"HOT_SPLIT_THRESHOLD_WCU": "1001"}, "HOT_SPLIT_THRESHOLD_WCU"),
        ({"HOT_SPLIT_THRESHOLD_WCU": "lots"}, "HOT_SPLIT_THRESHOLD_WCU"),
        ({"HOT_TARGET_UTILISATION": "0"}, "HOT_TARGET_UTILISATION"),
        ({"HOT_TARGET_UTILISATION": "nan"}, "HOT_TARGET_UTILISATION"),
        ({"HOT_TARGET_UTILISATION": "half"}, "HOT_TARGET_UTILISATION"),
        ({"BUCKET": "1m", "HOT_WINDOW": "7s"}, "HOT_WINDOW"),  # 7 s does not divide a minute
        ({"HOT_WINDOW": "1 minute"}, "HOT_WINDOW"),
        ({"HOT_WINDOW": "2h"}, "HOT_WINDOW"),
        ({"HOT_WINDOW_GRACE": "soon"}, "HOT_WINDOW_GRACE"),
        ({"HOT_SCALE_DOWN_WINDOWS": "0"}, "HOT_SCALE_DOWN_WINDOWS"),
        ({"HOT_SCALE_DOWN_FRACTION": "1"}, "HOT_SCALE_DOWN_FRACTION"),
        ({"HOT_TOP_K": "50"}, "HOT_TOP_K"),
        ({"HOT_COUNTERS_PER_WINDOW": "1"}, "HOT_COUNTERS_PER_WINDOW"),
        ({"HOT_COUNTER_SHARDS": "0"}, "HOT_COUNTER_SHARDS"),
        ({"HOT_COUNTER_RETENTION": "5m"}, "HOT_COUNTER_RETENTION"),
        ({"HOT_CONCURRENCY": "64"}, "HOT_CONCURRENCY"),
        ({"HOT_CLOSE_LEASE": "forever"}, "HOT_CLOSE_LEASE"),
        ({"HOT_CHANGE_MARGIN": "1m"}, "HOT_CHANGE_MARGIN"),
        ({"HOT_AUTO_APPLY_ENTITY": "maybe"}, "HOT_AUTO_APPLY_ENTITY"),
        ({"HOT_AUTO_APPLY_GLOBAL": "2"}, "HOT_AUTO_APPLY_GLOBAL"),
        ({"HOT_ALERT_TOPIC_ARN": "hot-keys"}, "HOT_ALERT_TOPIC_ARN"),
        ({"HOT_ALERT_COOLDOWN": "-1h"}, "HOT_ALERT_COOLDOWN"),
    ],
)
def test_a_bad_variable_is_named(overrides: dict[str, str], variable: str) -> None:
    env = {**VALID, **overrides}
    with pytest.raises(SettingsError) as raised:
        HotKeySettings.from_env(env)
    assert raised.value.variable == variable
    assert variable in str(raised.value)


def test_the_margin_must_cover_how_far_ahead_ingest_accepts_event_times() -> None:
    with pytest.raises(SettingsError, match="MAX_FUTURE"):
        HotKeySettings.from_env({**VALID, "MAX_FUTURE": "10m", "HOT_CHANGE_MARGIN": "5m"})
    assert HotKeySettings.from_env({**VALID, "MAX_FUTURE": "10m"}).change_margin_ms == 660_000


@pytest.mark.parametrize("word", ["yes", "on", "1", "no", "off", "0"])
def test_a_flag_is_true_or_false_and_nothing_else(word: str) -> None:
    # One boolean syntax for every function and for cdk.json (docs/decisions.md).
    with pytest.raises(SettingsError) as raised:
        HotKeySettings.from_env({**VALID, "HOT_AUTO_APPLY_GLOBAL": word})
    assert raised.value.variable == "HOT_AUTO_APPLY_GLOBAL"
    assert "not true or false" in str(raised.value)
