"""The rollup settings refuse granularities compaction cannot total hour by hour (with the write tier)."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from rollup.settings import RollupSettings

ENV = {"SHARDS": "4", "TABLE_PREFIX": "readings", "CONTROL_TABLE": "control", "WRITE_TIER_GROUPS": "4"}


def test_granularities_must_divide_an_hour_or_be_whole_hours_with_the_write_tier() -> None:
    assert RollupSettings.from_env({**ENV, "ROLLUPS": "1m,15m,2h,1d"}).granularities is not None
    with pytest.raises(SettingsError) as refused:
        RollupSettings.from_env({**ENV, "ROLLUPS": "1m,90m,3h"})
    assert "ROLLUPS" in str(refused.value) and "90m neither divides an hour" in str(refused.value)
    # without the write tier nothing is compacted, so nothing needs it
    without = {k: v for k, v in ENV.items() if k != "WRITE_TIER_GROUPS"}
    assert RollupSettings.from_env({**without, "ROLLUPS": "1m,90m,3h"}).granularities is not None
