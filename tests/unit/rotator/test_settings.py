"""Rotator settings: the planner, and a clear error naming the variable for every bad value."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from rotator.settings import CapacitySettings, RotatorSettings

BASE = {"SHARDS": "8", "TABLE_PREFIX": "readings", "TABLE_PERIOD": "day"}


def test_the_stack_alone_sizes_new_tables_when_nothing_is_said() -> None:
    # Neither a capacity nor a peak: on-demand tables with no warm throughput requested
    assert RotatorSettings.from_env(BASE).capacity == CapacitySettings("PAY_PER_REQUEST", None, 100, None)


def test_the_planner_sizes_a_provisioned_table_from_the_peak() -> None:
    # 6,000 writes/s of 500-byte items = 6,000 WCU; at 75% utilisation that is 8,000 provisioned.
    settings = RotatorSettings.from_env(
        {**BASE, "BILLING_MODE": "PROVISIONED", "PEAK_WRITES_PER_S": "6000", "TARGET_UTILISATION_PERCENT": "75"}
    )
    assert settings.capacity.write_capacity == 8000
    # Items of 1.5 KB cost 2 WCU each.
    settings = RotatorSettings.from_env(
        {**BASE, "BILLING_MODE": "PROVISIONED", "PEAK_WRITES_PER_S": "1000", "ITEM_BYTES": "1500"}
    )
    assert settings.capacity.write_capacity == 2858  # ceil(2000 / 0.70)


def test_an_explicit_write_capacity_wins_over_the_planner() -> None:
    settings = RotatorSettings.from_env(
        {**BASE, "BILLING_MODE": "PROVISIONED", "PEAK_WRITES_PER_S": "6000", "WRITE_CAPACITY": "500"}
    )
    assert settings.capacity.write_capacity == 500


def test_on_demand_warm_throughput_comes_from_the_planner_or_the_variable() -> None:
    planned = RotatorSettings.from_env({**BASE, "PEAK_WRITES_PER_S": "50000"})
    assert planned.capacity.warm_writes_per_s == 71_429  # ceil(50,000 / 0.70)
    explicit = RotatorSettings.from_env({**BASE, "PEAK_WRITES_PER_S": "50000", "WARM_WRITES_PER_S": "60000"})
    assert explicit.capacity.warm_writes_per_s == 60_000


def test_warm_throughput_a_new_table_already_has_is_not_requested() -> None:
    settings = RotatorSettings.from_env({**BASE, "WARM_WRITES_PER_S": "4000"})
    assert settings.capacity.warm_writes_per_s is None
    assert any("not requested" in note for note in settings.notes)


def test_a_write_capacity_above_the_default_quota_is_noted() -> None:
    settings = RotatorSettings.from_env({**BASE, "BILLING_MODE": "PROVISIONED", "WRITE_CAPACITY": "50000"})
    assert any("quota" in note for note in settings.notes)


def test_an_export_bucket_forces_point_in_time_recovery_on() -> None:
    off = {**BASE, "POINT_IN_TIME_RECOVERY": "false"}
    assert not RotatorSettings.from_env(off).pitr_enabled
    settings = RotatorSettings.from_env({**off, "EXPORT_BUCKET": "readings-archive", "EXPORT_PREFIX": "/x/y/"})
    assert settings.pitr_enabled
    assert settings.export_prefix_for("readings-2026-11-22") == "x/y/readings-2026-11-22"


@pytest.mark.parametrize(
    ("overrides", "variable", "fragment"),
    [
        ({"TABLE_PERIOD": ""}, "TABLE_PERIOD", "required by the rotator"),
        ({"TABLE_PERIOD": "year"}, "TABLE_PERIOD", "not one of"),
        ({"TABLE_PREFIX": ""}, "TABLE_PREFIX", "is required"),
        ({"PREBUILD_PERIODS": "0"}, "PREBUILD_PERIODS", "at least 1"),
        ({"GRACE": "soon"}, "GRACE", "not a duration"),
        ({"GRACE": "7d", "RETENTION": "7d"}, "GRACE", "shorter than retention"),
        ({"GRACE": "6d", "DIAL_DOWN_DELAY": "1d", "RETENTION": "7d"}, "GRACE", "shorter than retention"),
        ({"DIAL_DOWN_DELAY": "-1m"}, "DIAL_DOWN_DELAY", "not a duration"),
        ({"BILLING_MODE": "ON_DEMAND"}, "BILLING_MODE", "'PAY_PER_REQUEST' or 'PROVISIONED'"),
        ({"BILLING_MODE": "PROVISIONED"}, "WRITE_CAPACITY", "is required with billing_mode PROVISIONED"),
        ({"BILLING_MODE": "PROVISIONED", "WRITE_CAPACITY": "0"}, "WRITE_CAPACITY", "at least 1"),
        ({"BILLING_MODE": "PROVISIONED", "WRITE_CAPACITY": "many"}, "WRITE_CAPACITY", "whole number"),
        ({"MAX_AGE": "31d"}, "MAX_AGE", "longer than retention"),
        ({"CONTRIBUTOR_INSIGHTS": "all"}, "CONTRIBUTOR_INSIGHTS", "'throttled_keys'"),
        ({"INFREQUENT_ACCESS_STORAGE_PERCENT": "-1"}, "INFREQUENT_ACCESS_STORAGE_PERCENT", "at least 0"),
        ({"PEAK_WRITES_PER_S": "0"}, "PEAK_WRITES_PER_S", "at least 1"),
        ({"PEAK_WRITES_PER_S": "10", "TARGET_UTILISATION_PERCENT": "101"}, "TARGET_UTILISATION_PERCENT", "at most"),
        ({"WARM_WRITES_PER_S": "x"}, "WARM_WRITES_PER_S", "whole number"),
        ({"POINT_IN_TIME_RECOVERY": "yes"}, "POINT_IN_TIME_RECOVERY", "not true or false"),
        ({"DRY_RUN": "maybe"}, "DRY_RUN", "not true or false"),
        ({"HOTKEYS_BATCH_SIZE": "many"}, "HOTKEYS_BATCH_SIZE", "whole number"),
        ({"MAX_DELETES_PER_RUN": "-1"}, "MAX_DELETES_PER_RUN", "at least 0"),
    ],
)
def test_a_bad_value_names_its_variable(overrides: dict[str, str], variable: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        RotatorSettings.from_env({**BASE, **overrides})
    assert caught.value.variable == variable
    assert fragment in str(caught.value)
