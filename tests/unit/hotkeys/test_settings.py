"""Cold-start settings of the hot-key function: what the detector is built with, and every bad variable named."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from hotkeys.settings import HotKeySettings

VALID = {"TABLE_PREFIX": "readings", "SHARDS": "100", "CONTROL_TABLE": "control"}


@pytest.mark.parametrize(("threshold", "counters"), [(500, 25), (40, 25), (39, 26), (10, 100), (1, 1_000)])
def test_a_batch_adds_enough_counters_that_no_key_over_the_threshold_is_left_out(threshold: int, counters: int) -> None:
    # A key over the threshold carries at least threshold/1,000 of a stream shard's writes: it is among
    # the top ceil(1,000 / threshold) of any batch, so the detector keeps at least that many (and 25).
    detector = HotKeySettings.from_env({**VALID, "HOT_SPLIT_THRESHOLD_WCU": str(threshold)}).detector
    assert (detector.split_threshold_wcu, detector.counters_per_window) == (threshold, counters)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"CONTROL_TABLE": ""}, "CONTROL_TABLE"),
        ({"SHARDS": ""}, "SHARDS"),
        ({"HOT_SPLIT_THRESHOLD_WCU": "1000"}, "HOT_SPLIT_THRESHOLD_WCU"),
        ({"HOT_SPLIT_THRESHOLD_WCU": "lots"}, "HOT_SPLIT_THRESHOLD_WCU"),
        ({"BUCKET": "1m", "HOT_WINDOW": "7s"}, "HOT_WINDOW"),  # 7 s does not divide a minute
        ({"HOT_WINDOW": "1 minute"}, "HOT_WINDOW"),
        ({"HOT_WINDOW": "1500ms"}, "HOT_WINDOW"),
        ({"HOT_WINDOW": "2h"}, "HOT_WINDOW"),
        ({"HOT_WINDOW_GRACE": "soon"}, "HOT_WINDOW_GRACE"),
        ({"HOT_SCALE_DOWN_WINDOWS": "0"}, "HOT_SCALE_DOWN_WINDOWS"),
        ({"HOT_WINDOW": "1h", "HOT_SCALE_DOWN_WINDOWS": "23"}, "HOT_SCALE_DOWN_WINDOWS"),  # outlasts the counters
        ({"HOT_CHANGE_MARGIN": "1m"}, "HOT_CHANGE_MARGIN"),
        ({"HOT_AUTO_APPLY_ENTITY": "maybe"}, "HOT_AUTO_APPLY_ENTITY"),
        ({"HOT_AUTO_APPLY_GLOBAL": "2"}, "HOT_AUTO_APPLY_GLOBAL"),
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
