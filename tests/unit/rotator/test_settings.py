"""Rotator settings: defaults, the planner, and a clear error naming the variable for every bad value."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from rotator.settings import RotatorSettings

FUNCTION = "arn:aws:lambda:eu-west-1:123456789012:function:hotkeys"
TOPIC = "arn:aws:sns:eu-west-1:123456789012:alarms"
BASE = {"SHARDS": "8", "TABLE_PREFIX": "readings", "TABLE_PERIOD": "day"}


def test_defaults() -> None:
    settings = RotatorSettings.from_env(BASE)
    assert settings.period.name == "day"
    assert (settings.prebuild_periods, settings.grace_ms, settings.dial_down_delay_ms) == (2, 7_200_000, 900_000)
    capacity = settings.capacity
    assert capacity.billing_mode == "PAY_PER_REQUEST"
    assert (capacity.write_capacity, capacity.warm_writes_per_s) == (None, None)
    assert capacity.read_capacity == 100
    # MAX_AGE unset is 3 days, as ingest reads it (the same field of the shared settings)
    assert (settings.max_age, settings.max_age_ms) == (None, 3 * 86_400_000)
    # No Contributor Insights and no table-class changes unless the stack asks for them
    assert (settings.contributor_insights, settings.infrequent_access_storage_percent) == ("off", None)
    assert settings.point_in_time_recovery and settings.deletion_protection
    assert settings.table_tags == {}
    assert (settings.export, settings.mapping) == (None, None)
    assert settings.alarms is not None and settings.alarms.topic_arn is None
    assert (settings.alarms.threshold, settings.alarms.evaluation_minutes, settings.alarms.datapoints) == (1, 5, 3)
    assert (settings.max_deletes_per_run, settings.dry_run, settings.allow_now_override) == (2, False, False)
    assert settings.deadline_margin_ms == 10_000


def test_values_are_read() -> None:
    settings = RotatorSettings.from_env(
        {
            **BASE,
            "PREBUILD_PERIODS": "5",
            "GRACE": "30m",
            "DIAL_DOWN_DELAY": "5m",
            "BILLING_MODE": "provisioned",
            "WRITE_CAPACITY": "3000",
            "READ_CAPACITY": "50",
            "MAX_AGE": "3d",
            "CONTRIBUTOR_INSIGHTS": "accessed_and_throttled_keys",
            "INFREQUENT_ACCESS_STORAGE_PERCENT": "0",
            "POINT_IN_TIME_RECOVERY": "false",
            "DELETION_PROTECTION": "FALSE",
            "TABLE_TAGS": '{"team": "iot", "cost-centre": "42"}',
            "HOTKEYS_FUNCTION_ARN": FUNCTION,
            "HOTKEYS_BATCH_SIZE": "500",
            "HOTKEYS_TUMBLING_WINDOW_S": "60",
            "HOTKEYS_ON_FAILURE_ARN": "arn:aws:sqs:eu-west-1:123456789012:hotkeys-dlq",
            "ALARM_TOPIC_ARN": TOPIC,
            "MAX_DELETES_PER_RUN": "0",
            "DRY_RUN": "true",
        }
    )
    assert (settings.prebuild_periods, settings.grace_ms, settings.dial_down_delay_ms) == (5, 1_800_000, 300_000)
    assert settings.capacity.billing_mode == "PROVISIONED"
    assert (settings.capacity.write_capacity, settings.capacity.read_capacity) == (3000, 50)
    assert settings.max_age_ms == 3 * 86_400_000
    assert (settings.contributor_insights, settings.infrequent_access_storage_percent) == (
        "accessed_and_throttled_keys",
        0,
    )
    assert not settings.point_in_time_recovery and not settings.deletion_protection
    assert settings.table_tags == {"team": "iot", "cost-centre": "42"}
    assert settings.mapping is not None
    assert (settings.mapping.function_arn, settings.mapping.batch_size) == (FUNCTION, 500)
    assert (settings.mapping.max_retries, settings.mapping.max_record_age_s) == (5, 3600)
    assert settings.mapping.tumbling_window_s == 60
    assert settings.mapping.on_failure_arn == "arn:aws:sqs:eu-west-1:123456789012:hotkeys-dlq"
    assert settings.alarms is not None and settings.alarms.topic_arn == TOPIC
    assert (settings.max_deletes_per_run, settings.dry_run) == (0, True)


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
    settings = RotatorSettings.from_env(
        {**BASE, "EXPORT_BUCKET": "readings-archive", "POINT_IN_TIME_RECOVERY": "false", "EXPORT_PREFIX": "/x/y/"}
    )
    assert settings.point_in_time_recovery
    assert settings.export is not None
    assert settings.export.prefix_for("readings-2026-11-22") == "x/y/readings-2026-11-22"


def test_alarms_can_be_turned_off() -> None:
    assert RotatorSettings.from_env({**BASE, "ALARMS": "false"}).alarms is None


@pytest.mark.parametrize(
    ("overrides", "variable", "fragment"),
    [
        ({"TABLE_PERIOD": ""}, "TABLE_PERIOD", "required by the rotator"),
        ({"TABLE_PERIOD": "year"}, "TABLE_PERIOD", "not one of"),
        ({"TABLE_PREFIX": ""}, "TABLE_PREFIX", "is required"),
        ({"PREBUILD_PERIODS": "0"}, "PREBUILD_PERIODS", "outside 1..366"),
        ({"GRACE": "soon"}, "GRACE", "not a duration"),
        ({"GRACE": "7d", "RETENTION": "7d"}, "GRACE", "shorter than RETENTION"),
        ({"GRACE": "6d", "DIAL_DOWN_DELAY": "1d", "RETENTION": "7d"}, "GRACE", "shorter than RETENTION"),
        ({"DIAL_DOWN_DELAY": "-1m"}, "DIAL_DOWN_DELAY", "not a duration"),
        ({"BILLING_MODE": "ON_DEMAND"}, "BILLING_MODE", "PAY_PER_REQUEST or PROVISIONED"),
        ({"BILLING_MODE": "PROVISIONED"}, "WRITE_CAPACITY", "is required with BILLING_MODE=PROVISIONED"),
        ({"BILLING_MODE": "PROVISIONED", "WRITE_CAPACITY": "0"}, "WRITE_CAPACITY", "outside"),
        ({"BILLING_MODE": "PROVISIONED", "WRITE_CAPACITY": "many"}, "WRITE_CAPACITY", "not a whole number"),
        ({"MAX_AGE": "31d"}, "MAX_AGE", "must not exceed RETENTION"),
        ({"MAX_AGE": "old"}, "MAX_AGE", "not a duration"),
        ({"CONTRIBUTOR_INSIGHTS": "all"}, "CONTRIBUTOR_INSIGHTS", "not 'throttled_keys'"),
        ({"INFREQUENT_ACCESS_STORAGE_PERCENT": "-1"}, "INFREQUENT_ACCESS_STORAGE_PERCENT", "outside"),
        ({"PEAK_WRITES_PER_S": "0"}, "PEAK_WRITES_PER_S", "outside"),
        ({"PEAK_WRITES_PER_S": "10", "ITEM_BYTES": "500000"}, "ITEM_BYTES", "outside"),
        ({"PEAK_WRITES_PER_S": "10", "TARGET_UTILISATION_PERCENT": "101"}, "TARGET_UTILISATION_PERCENT", "outside"),
        ({"WARM_WRITES_PER_S": "x"}, "WARM_WRITES_PER_S", "not a whole number"),
        ({"READ_CAPACITY": "0"}, "READ_CAPACITY", "outside"),
        ({"POINT_IN_TIME_RECOVERY": "yes"}, "POINT_IN_TIME_RECOVERY", "not true or false"),
        ({"DELETION_PROTECTION": "1"}, "DELETION_PROTECTION", "not true or false"),
        ({"DRY_RUN": "maybe"}, "DRY_RUN", "not true or false"),
        ({"TABLE_TAGS": "team=iot"}, "TABLE_TAGS", "not JSON"),
        ({"TABLE_TAGS": '["team"]'}, "TABLE_TAGS", "JSON object of strings"),
        ({"TABLE_TAGS": '{"team": 1}'}, "TABLE_TAGS", "JSON object of strings"),
        ({"TABLE_TAGS": '{"aws:owner": "me"}'}, "TABLE_TAGS", "not a tag key"),
        ({"TABLE_TAGS": '{"timeseries:managed-by": "me"}'}, "TABLE_TAGS", "set by the rotator itself"),
        ({"TABLE_TAGS": '{"team": "' + "x" * 257 + '"}'}, "TABLE_TAGS", "not a tag value"),
        ({"TABLE_TAGS": "{" + ",".join(f'"k{i}": "v"' for i in range(48)) + "}"}, "TABLE_TAGS", "at most 47"),
        ({"EXPORT_BUCKET": "Not_A_Bucket"}, "EXPORT_BUCKET", "not an S3 bucket name"),
        ({"EXPORT_BUCKET": "archive", "EXPORT_BUCKET_OWNER": "12"}, "EXPORT_BUCKET_OWNER", "12-digit"),
        ({"HOTKEYS_FUNCTION_ARN": "hotkeys"}, "HOTKEYS_FUNCTION_ARN", "not a Lambda function ARN"),
        ({"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_BATCH_SIZE": "10001"}, "HOTKEYS_BATCH_SIZE", "outside"),
        ({"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_MAX_RETRIES": "-1"}, "HOTKEYS_MAX_RETRIES", "outside"),
        ({"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_MAX_RECORD_AGE_S": "-1"}, "HOTKEYS_MAX_RECORD_AGE_S", "outside"),
        ({"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_PARALLELIZATION": "11"}, "HOTKEYS_PARALLELIZATION", "outside"),
        (
            {"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_TUMBLING_WINDOW_S": "901"},
            "HOTKEYS_TUMBLING_WINDOW_S",
            "outside",
        ),
        ({"HOTKEYS_FUNCTION_ARN": FUNCTION, "HOTKEYS_ON_FAILURE_ARN": "dlq"}, "HOTKEYS_ON_FAILURE_ARN", "not an SQS"),
        ({"ALARM_TOPIC_ARN": "alarms"}, "ALARM_TOPIC_ARN", "not an SNS topic ARN"),
        ({"ALARM_DATAPOINTS": "6"}, "ALARM_DATAPOINTS", "above ALARM_EVALUATION_MINUTES"),
        ({"ALARM_THRESHOLD": "0"}, "ALARM_THRESHOLD", "outside"),
        ({"MAX_DELETES_PER_RUN": "101"}, "MAX_DELETES_PER_RUN", "outside"),
        ({"DEADLINE_MARGIN_MS": "-5"}, "DEADLINE_MARGIN_MS", "outside"),
    ],
)
def test_a_bad_value_names_its_variable(overrides: dict[str, str], variable: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        RotatorSettings.from_env({**BASE, **overrides})
    assert caught.value.variable == variable
    assert fragment in str(caught.value)
