"""infra/config.py: defaults, parsing of CLI strings, and every rejection naming its key. No synthesis."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from pydantic import ValidationError

import keydesign
from infra.config import (
    DEFAULTS,
    ConfigError,
    Context,
    FunctionSizing,
    FunctionWiring,
    LambdaFunction,
    environment_reference,
    load_cdk_json_context,
)
from keydesign import Layout, Workload, parse_duration, plan_capacity

REPO_ROOT = Path(__file__).resolve().parents[2]
DOCS = REPO_ROOT / "docs" / "configuration.md"
CDK_JSON = REPO_ROOT / "cdk.json"
FUNCTIONS = REPO_ROOT / "functions"
NOV_22_2026_0600_MS = 1_795_327_200_000


# -- defaults ----------------------------------------------------------------------


def test_default_shard_count_is_what_the_capacity_planner_gives_for_the_seed_workload() -> None:
    # 50,000 writes/s of 500-byte items at 50% key utilisation
    plan = plan_capacity(Workload(peak_writes_per_s=50_000, item_bytes=500, utilisation=0.5))
    assert DEFAULTS["shards"] == plan.global_shards == 100


def test_cdk_json_restates_only_defaults() -> None:
    # cdk.json shows the keys with their defaults; the model holds them, so a new key need not be added there.
    context = load_cdk_json_context(CDK_JSON)
    own = {k: v for k, v in context.items() if re.match(r"^[a-z][a-z0-9_]*$", k)}
    assert own.items() <= dict(DEFAULTS).items()
    assert Context.parse(context) == Context.parse({})


def test_the_default_period_is_the_planners_for_the_seed_workload() -> None:
    # `make plan`'s workload: 100 partitions written at 25 MB/s in all fill 95% of 10 GiB in 11.3 h,
    # so a day's table would outgrow its partitions and an hour's does not
    plan = keydesign.plan_capacity(
        keydesign.Workload(
            peak_writes_per_s=50_000, item_bytes=500, entities=10_000, hot_entities={"sensor-alpha-001": 2_000}
        )
    )
    assert plan.fill_hours == pytest.approx(10 * 2**30 * 0.95 / (50_000 * 500 / 100) / 3600, abs=0.01)
    assert plan.table_period == "hour" == DEFAULTS["table_period"]


def test_one_table_is_one_setting_away() -> None:
    config = Context.parse({"table_period": "null"})
    assert config.table_period is None and config.readings_table_name == "timeseries-readings"


def test_cdk_json_runs_the_app_with_python3() -> None:
    assert json.loads(CDK_JSON.read_text())["app"] == "python3 app.py"


def test_defaults_describe_the_documented_deployment() -> None:
    config = Context.parse({})
    assert (config.layout_kind, config.shards, config.bucket, config.table_period) == ("hybrid", 100, "1h", "hour")
    assert config.retention_ms == 30 * 86_400_000
    # Per-period tables by default: the rotator builds them, the stack holds none
    assert config.readings_table_name is None
    assert config.rotation_interval_minutes() == 15
    assert config.control_table == "timeseries-control"
    assert config.billing_mode == "PAY_PER_REQUEST"
    assert config.deletion_protection and config.point_in_time_recovery
    assert config.removal_policy == "retain"
    assert config.kinesis_mode == "on_demand"


def test_config_is_immutable() -> None:
    config = Context.parse({})
    with pytest.raises(ValidationError, match="frozen"):
        config.shards = 7  # type: ignore[misc]


# -- values as the CLI passes them ------------------------------------------------------


def test_strings_from_dash_c_are_parsed_into_typed_values() -> None:
    # Given what `cdk synth -c key=value` hands the app: strings only
    config = Context.parse(
        {
            "shards": "64",
            "deletion_protection": "false",
            "removal_policy": "DESTROY",
            "table_period": "null",
            "billing_mode": "provisioned",
            "api_throttle_rate": "12.5",
            "warm_writes_per_s": "8000",
            "alarm_email": "",
        }
    )
    assert config.shards == 64
    assert config.deletion_protection is False
    assert config.removal_policy == "destroy"
    assert config.table_period is None
    assert config.billing_mode == "PROVISIONED"
    assert config.api_throttle_rate == 12.5
    assert config.warm_writes_per_s == 8000
    assert config.alarm_email is None


def test_cdk_own_context_keys_are_ignored() -> None:
    config = Context.parse(
        {
            "@aws-cdk/core:target-partitions": ["aws", "aws-cn"],
            "aws:cdk:enable-path-metadata": True,
            "acknowledged-issue-numbers": [34892],
            "availability-zones:account=123456789012:region=eu-west-1": ["eu-west-1a"],
        }
    )
    assert config == Context.parse({})


def test_a_misspelt_key_is_refused_with_a_suggestion() -> None:
    with pytest.raises(ConfigError) as caught:
        Context.parse({"shard": 64})
    assert caught.value.field == "shard"
    assert "did you mean 'shards'" in str(caught.value)


# -- rejections: each names the offending key -----------------------------------------

BAD_VALUES = [
    ("stack_name", "1stack"),
    ("stack_name", "S" + "x" * 53),  # with the compaction function: 64 - len("-compaction")
    ("layout", "zigzag"),
    ("shards", 0),
    ("shards", 10_000),
    ("shards", "many"),
    ("shards", True),
    ("shards", 2.5),
    ("bucket", "7m"),
    ("table_prefix", "readings table"),
    ("control_table", "ab"),
    ("control_table", "timeseries-readings-control"),
    ("table_period", "fortnight"),
    ("retention", "30 days"),
    ("retention", "0d"),
    ("billing_mode", "FREE"),
    ("read_capacity_min", 0),
    ("write_capacity_max", -5),
    ("autoscaling_target_percent", 19),
    ("autoscaling_target_percent", 91),
    ("warm_writes_per_s", 0),
    ("deletion_protection", "maybe"),
    ("removal_policy", "snapshot"),
    ("point_in_time_recovery", 1),
    ("contributor_insights", "all"),
    ("kinesis_mode", "serverless"),
    ("kinesis_shards", 0),
    ("kinesis_retention_hours", 23),
    ("kinesis_retention_hours", 8_761),
    ("ingest_batch_size", 0),
    ("ingest_batch_size", 10_001),
    ("ingest_batching_window_s", -1),
    ("ingest_batching_window_s", 301),
    ("ingest_parallelization_factor", 0),
    ("ingest_parallelization_factor", 11),
    ("ingest_max_retries", -2),
    ("ingest_max_retries", 10_001),
    ("ingest_max_record_age_s", 0),
    ("ingest_max_record_age_s", 59),
    ("ingest_max_record_age_s", 604_801),
    ("hot_split_threshold_wcu", 0),
    ("hot_split_threshold_wcu", 1_000),
    ("shard_map_cache_ttl_s", 0),
    ("shard_map_cache_ttl_s", 3_601),
    ("alarm_email", "ops-team"),
    ("api_stage", "v 1"),
    ("api_throttle_rate", 0),
    ("api_throttle_rate", "fast"),
    ("api_throttle_burst", 0),
    ("log_retention_days", 31),
    ("powertools_layer_version", 0),
    ("ingest_memory_mb", 127),
    ("ingest_memory_mb", 10_241),
    ("ingest_timeout_s", 9),
    ("ingest_timeout_s", 901),
    ("query_memory_mb", 64),
    ("query_timeout_s", 29),
    ("query_reserved_concurrency", 0),
    ("ingest_reserved_concurrency", 0),
    ("hotkeys_reserved_concurrency", 10_001),
    ("max_future", "0s"),
    ("max_future", "2d"),
    ("max_future", "5 minutes"),
    ("item_bytes", 0),
    ("item_bytes", 409_601),
    ("hotkeys_batch_size", 10_001),
    ("hotkeys_batching_window_s", 301),
    ("hotkeys_parallelization_factor", 11),
    ("hotkeys_max_retries", -1),
    ("hotkeys_max_record_age_s", -1),
    ("hotkeys_max_record_age_s", 86_401),
    ("hot_auto_apply_entity", "yes"),
    ("hot_auto_apply_global", 0),
    ("grace", "2 hours"),
    ("prebuild_periods", 0),
    ("dial_down_delay", "-1m"),
    ("peak_writes_per_s", 0),
    ("period_write_capacity", 0),
    ("period_read_capacity", 0),
    ("export_bucket", "Not_A_Bucket"),
    ("export_prefix", "a prefix with spaces"),
    ("max_deletes_per_run", 101),
    ("rotation_dry_run", "maybe"),
    ("iterator_age_alarm_s", 0),
    ("api_cloudwatch_role", "sometimes"),
]


@pytest.mark.parametrize(("key", "value"), BAD_VALUES, ids=[f"{k}={v!r}" for k, v in BAD_VALUES])
def test_bad_value_is_refused_naming_its_key(key: str, value: object) -> None:
    with pytest.raises(ConfigError) as caught:
        Context.parse({key: value})
    assert caught.value.field == key
    assert str(caught.value).startswith(f"{key}: ")


GOOD_LIMITS = [
    {"stack_name": "S" + "x" * 52},
    {"shards": 1},
    {"shards": 9_999},
    {"ingest_batch_size": 1},
    {"ingest_batch_size": 10_000},
    {"ingest_batching_window_s": 0},
    {"ingest_batching_window_s": 300},
    {"ingest_parallelization_factor": 10},
    {"ingest_max_retries": -1},
    {"ingest_max_retries": 10_000},
    {"ingest_max_record_age_s": -1},
    {"ingest_max_record_age_s": 60},
    {"ingest_max_record_age_s": 604_800, "kinesis_retention_hours": 168},
    {"hot_split_threshold_wcu": 999},
    {"autoscaling_target_percent": 20},
    {"autoscaling_target_percent": 90},
    {"kinesis_retention_hours": 8_760},
    {"log_retention_days": 3653},
    {"ingest_timeout_s": 900, "dial_down_delay": "15m"},
    {"query_timeout_s": 28},
    {"max_future": "1d", "table_period": None},
    {"item_bytes": 409_600},
    {"hotkeys_max_retries": 0, "hotkeys_max_record_age_s": 60},
    {"hotkeys_max_record_age_s": 86_400},
    {"grace": "0s", "dial_down_delay": "2m", "table_period": "hour", "retention": "1h"},
    {"max_deletes_per_run": 0},
    {"table_period": "day", "billing_mode": "PROVISIONED", "period_write_capacity": 40_000},
    {"table_period": "day", "billing_mode": "PROVISIONED", "peak_writes_per_s": 50_000},
    {"export_bucket": "my.export-bucket", "export_prefix": ""},
]


@pytest.mark.parametrize("context", GOOD_LIMITS, ids=[json.dumps(c) for c in GOOD_LIMITS])
def test_values_at_the_aws_limits_are_accepted(context: dict[str, object]) -> None:
    Context.parse(context)


CROSS_FIELD = [
    ({"removal_policy": "destroy"}, "removal_policy", "deletion_protection"),
    ({"read_capacity_min": 500, "read_capacity_max": 100}, "read_capacity_min", "read_capacity_max"),
    ({"write_capacity_min": 500, "write_capacity_max": 100}, "write_capacity_min", "write_capacity_max"),
    (
        {"ingest_max_record_age_s": 90_000, "kinesis_retention_hours": 24},
        "ingest_max_record_age_s",
        "kinesis_retention_hours",
    ),
    ({"max_age": "31d"}, "max_age", "retention"),
    ({"max_age": "3d", "retention": "2d", "table_period": "day"}, "max_age", "retention"),
    ({"table_period": "week", "retention": "3d"}, "retention", "week"),
    ({"table_period": "hour", "bucket": "2h"}, "bucket", "hourly"),
    ({"table_prefix": "ts", "control_table": "ts-control", "table_period": "day"}, "control_table", "'ts-'"),
    ({"table_period": "day", "retention": "1d", "grace": "23h", "dial_down_delay": "1h"}, "grace", "retention"),
    ({"table_period": "day", "dial_down_delay": "1m"}, "dial_down_delay", "ingest_timeout_s"),
    ({"table_period": "hour", "retention": "2d", "max_future": "2h"}, "max_future", "hour"),
    ({"table_period": "day", "billing_mode": "PROVISIONED"}, "period_write_capacity", "peak_writes_per_s"),
    (
        {
            "kinesis_mode": "provisioned",
            "kinesis_shards": 8,
            "ingest_parallelization_factor": 2,
            "ingest_reserved_concurrency": 15,
        },
        "ingest_reserved_concurrency",
        "(16)",
    ),
]


@pytest.mark.parametrize(("context", "key", "mentions"), CROSS_FIELD, ids=[c[1] for c in CROSS_FIELD])
def test_contradictory_settings_are_refused(context: dict[str, object], key: str, mentions: str) -> None:
    with pytest.raises(ConfigError) as caught:
        Context.parse(context)
    assert caught.value.field == key
    assert mentions in caught.value.reason


def test_config_error_is_the_key_design_layers_error_type() -> None:
    # Callers (the CLI, the local runtime) catch one type for every bad setting.
    with pytest.raises(keydesign.ConfigError):
        Context.parse({"bucket": "7m"})
    assert issubclass(ConfigError, ValueError)


# -- views: layout, shard map, Lambda environment -------------------------------------


def test_layout_is_the_key_design_layout_of_the_settings() -> None:
    single = Context.parse({"table_period": None})
    assert single.layout() == Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="timeseries-readings")
    assert single.layout().table_for(NOV_22_2026_0600_MS) == "timeseries-readings"
    daily = Context.parse({"table_period": "day"})
    assert daily.layout().table_for(NOV_22_2026_0600_MS) == "timeseries-readings-2026-11-22"
    assert daily.readings_table_name is None


def test_environment_of_the_single_table_deployment() -> None:
    env = Context.parse({"table_period": None}).function_environment(
        LambdaFunction.INGEST, FunctionWiring(rejects_queue_url="https://sqs.example/rejects")
    )
    assert env == {
        "POWERTOOLS_SERVICE_NAME": "ingest",
        "POWERTOOLS_METRICS_NAMESPACE": "TimeSeries",
        "LAYOUT": "hybrid",
        "SHARDS": "100",
        "BUCKET": "1h",
        "TABLE_PREFIX": "timeseries-readings",
        "RETENTION": "30d",
        "GRACE": "2h",
        "PREBUILD_PERIODS": "2",
        "CONTROL_TABLE": "timeseries-control",
        "REJECTS_QUEUE_URL": "https://sqs.example/rejects",
        "SHARD_MAP_CACHE_TTL": "1m",
        "MAX_FUTURE": "5m",
        "MAX_AGE": "3d",
        "ROLLUPS": "1m,1h,1d",
        "INGEST_FORMATS": "influx,telegraf_json,otlp_proto,otlp_json",
        "ENTITY_TAGS": "host,service.instance.id",
        "INFLUX_PRECISION": "ns",
        "TELEGRAF_JSON_TIMESTAMP_UNITS": "1s",
        "WRITE_TIER_GROUPS": "32",
    }


def test_the_agent_keys_reach_ingest_and_a_bad_one_is_refused_naming_it() -> None:
    config = Context.parse({"ingest_formats": "otlp_proto", "entity_tags": "device_id,host", "influx_precision": "ms"})
    env = config.function_environment(LambdaFunction.INGEST, FunctionWiring(rejects_queue_url="https://sqs.example/r"))
    assert (env["INGEST_FORMATS"], env["ENTITY_TAGS"], env["INFLUX_PRECISION"]) == (
        "otlp_proto",
        "device_id,host",
        "ms",
    )
    for key, value, fragment in (
        ("ingest_formats", "influx,prometheus", "'prometheus' is not an agent format"),
        ("entity_tags", "host,,device_id", "'' is not a tag or attribute name"),
        ("influx_precision", "m", "'m' is not one of ns, us, ms, s"),
        ("telegraf_json_timestamp_units", "1m", "'1m' is not one of 1ns"),
    ):
        with pytest.raises(ConfigError, match=fragment) as caught:
            Context.parse({key: value})
        assert caught.value.field == key


def test_environment_of_per_period_tables_has_a_period_and_no_fixed_table() -> None:
    config = Context.parse({"table_period": "week", "warm_writes_per_s": 12_000})
    env = config.function_environment(LambdaFunction.ROTATOR, _wiring())
    assert env["TABLE_PERIOD"] == "week"
    assert (env["GRACE"], env["PREBUILD_PERIODS"], env["MAX_AGE"]) == ("2h", "2", "3d")
    assert env["WARM_WRITES_PER_S"] == "12000"
    # Ingest gets the same MAX_AGE, and the rotator to ask for a missing table
    ingest = config.function_environment(LambdaFunction.INGEST, _wiring())
    assert (ingest["MAX_AGE"], ingest["ROTATOR_FUNCTION"]) == ("3d", _wiring().rotator_function)
    assert "READINGS_TABLE" not in env
    assert "REJECTS_QUEUE_URL" not in env


@pytest.mark.parametrize(
    "context",
    [{}, {"layout": "random", "bucket": "1d", "table_period": "month", "retention": "90d"}, {"layout": "calculated"}],
    ids=["hybrid", "random-monthly", "calculated"],
)
def test_environment_rebuilds_the_same_layout_and_retention(context: dict[str, object]) -> None:
    # Given the variables a Lambda receives
    config = Context.parse(context)
    env = config.function_environment(LambdaFunction.QUERY, _wiring())
    # When it rebuilds its settings from them alone
    layout = Layout.from_settings(
        kind=env["LAYOUT"], bucket=env["BUCKET"], table_prefix=env["TABLE_PREFIX"], table_period=env.get("TABLE_PERIOD")
    )
    # Then it has exactly the stack's layout, shard count and retention
    assert layout == config.layout()
    assert int(env["SHARDS"]) == config.shards
    assert parse_duration(env["RETENTION"], "RETENTION") == config.retention_ms
    assert parse_duration(env["SHARD_MAP_CACHE_TTL"], "SHARD_MAP_CACHE_TTL") == config.shard_map_cache_ttl_s * 1000


def _wiring() -> FunctionWiring:
    """Deploy-time values in the shapes AWS gives them (the stack passes CDK tokens)."""
    return FunctionWiring(
        rejects_queue_url="https://sqs.eu-west-1.amazonaws.com/123456789012/rejects",
        cursor_secret_arn="arn:aws:secretsmanager:eu-west-1:123456789012:secret:cursor-AbCdEf",
        alert_topic_arn="arn:aws:sns:eu-west-1:123456789012:alerts",
        hotkeys_function_arn="arn:aws:lambda:eu-west-1:123456789012:function:TimeSeriesIngest-hotkeys",
        hotkeys_on_failure_arn="arn:aws:sqs:eu-west-1:123456789012:hotkeys-failures",
        rotator_function="TimeSeriesIngest-rotator",
    )


CONTRACT_CONFIGS = [
    {},
    {"table_period": "day", "bucket": "15m", "shards": 64, "shard_map_cache_ttl_s": 90},
    {
        "table_period": "hour",
        "retention": "2d",
        "billing_mode": "PROVISIONED",
        "period_write_capacity": 5_000,
        "period_read_capacity": 200,
        "grace": "30m",
        "dial_down_delay": "5m",
        "prebuild_periods": 3,
        "max_future": "10m",
        "export_bucket": "timeseries-exports",
        "export_prefix": "exports/readings",
        "max_deletes_per_run": 0,
        "rotation_dry_run": True,
        "deletion_protection": False,
        "removal_policy": "destroy",
    },
    {"table_period": "month", "retention": "365d", "peak_writes_per_s": 50_000, "item_bytes": 900},
    {"layout": "random", "hot_split_threshold_wcu": 1, "hot_auto_apply_global": True, "item_bytes": 2_048},
    {"layout": "calculated", "hot_split_threshold_wcu": 999, "hot_auto_apply_entity": False},
]


@pytest.mark.parametrize("context", CONTRACT_CONFIGS, ids=[json.dumps(c)[:60] for c in CONTRACT_CONFIGS])
def test_every_function_environment_is_what_its_settings_parse(context: dict[str, object]) -> None:
    # The contract with functions/*/settings.py: what the stack (and the local
    # runtime) gives each function parses at cold start into the configured values.
    from adapters.settings import CommonSettings  # noqa: PLC0415 - runtime code, imported only here
    from hotkeys.settings import HotKeySettings  # noqa: PLC0415
    from ingest.settings import IngestSettings  # noqa: PLC0415
    from query.settings import QuerySettings  # noqa: PLC0415

    config = Context.parse(context)
    wiring = _wiring()
    max_future_ms = config.max_future_ms

    for function in LambdaFunction:
        if function is LambdaFunction.ROTATOR and config.table_period is None:
            continue
        env = config.function_environment(function, wiring)
        common = CommonSettings.from_env(env)
        assert common.layout == config.layout()
        assert common.shards == config.shards
        assert common.retention_ms == config.retention_ms
        assert common.control_table == config.control_table
        assert common.shard_map_cache_ttl_ms == config.shard_map_cache_ttl_s * 1000
        if config.table_period is not None:
            assert common.grace_ms == config.grace_ms
            assert common.prebuild_periods == config.prebuild_periods
        assert env["POWERTOOLS_SERVICE_NAME"] == function.value

    ingest = IngestSettings.from_env(config.function_environment(LambdaFunction.INGEST, wiring))
    assert ingest.rejects_queue_url == wiring.rejects_queue_url
    assert ingest.max_future_ms == max_future_ms

    query = QuerySettings.from_env(config.function_environment(LambdaFunction.QUERY, wiring))
    assert query.cursor_secret.secret_id == wiring.cursor_secret_arn

    hot = HotKeySettings.from_env(config.function_environment(LambdaFunction.HOTKEYS, wiring))
    assert hot.detector.split_threshold_wcu == config.split_threshold_wcu
    assert hot.alert_topic_arn == wiring.alert_topic_arn
    assert (hot.auto_apply_entity, hot.auto_apply_global) == (
        config.auto_apply_entity,
        config.auto_apply_global,
    )
    assert hot.change_margin_ms >= max_future_ms

    if config.table_period is not None:
        _check_rotator(config, wiring)


def _check_rotator(config: Context, wiring: FunctionWiring) -> None:
    from rotator.settings import RotatorSettings  # noqa: PLC0415 - runtime code, imported only here

    rotator = RotatorSettings.from_env(config.function_environment(LambdaFunction.ROTATOR, wiring))
    assert rotator.period.name == config.table_period
    assert (rotator.grace_ms, rotator.prebuild_periods) == (config.grace_ms, config.prebuild_periods)
    assert rotator.dial_down_delay_ms == config.dial_down_delay_ms
    assert rotator.capacity.billing_mode == config.billing_mode
    assert rotator.capacity.read_capacity == config.period_read_capacity
    if config.period_write_capacity is not None:
        assert rotator.capacity.write_capacity == config.period_write_capacity
    assert rotator.deletion_protection == config.deletion_protection
    assert (rotator.max_deletes_per_run, rotator.dry_run) == (config.max_deletes_per_run, config.dry_run)
    assert (rotator.hotkeys_function_arn, rotator.hotkeys_on_failure_arn) == (
        wiring.hotkeys_function_arn,
        wiring.hotkeys_on_failure_arn,
    )
    assert (rotator.hotkeys_batch_size, rotator.hotkeys_max_retries, rotator.hotkeys_max_record_age_s) == (
        config.hotkeys_batch_size,
        config.hotkeys_max_retries,
        config.hotkeys_max_record_age_s,
    )
    assert rotator.alert_topic_arn == wiring.alert_topic_arn
    assert (rotator.export_bucket, rotator.export_prefix) == (config.export_bucket, config.export_prefix)


@pytest.mark.parametrize("function", list(LambdaFunction), ids=[f.value for f in LambdaFunction])
def test_every_variable_a_function_gets_is_a_setting_of_its_model(function: LambdaFunction) -> None:
    # A misspelt name would parse (the setting falls back to its default) and
    # silently ignore the configuration: every variable is a field of the
    # function's own settings model, which parses it (the whole environment
    # parsing is checked above).
    config = Context.parse({"table_period": "day", "warm_writes_per_s": 20_000, "peak_writes_per_s": 5})
    env = config.function_environment(function, _wiring())
    assert set(env) <= set(function.settings.variables().values())
    assert function.settings.from_env(env).service_name == function.value


def test_function_environment_refuses_missing_wiring_naming_the_variable_and_a_rotator_without_periods() -> None:
    config = Context.parse({"table_period": None})
    with pytest.raises(ValueError, match="REJECTS_QUEUE_URL"):
        config.function_environment(LambdaFunction.INGEST, FunctionWiring())
    with pytest.raises(ValueError, match="CURSOR_SECRET_ARN"):
        config.function_environment(LambdaFunction.QUERY, FunctionWiring())
    with pytest.raises(ValueError, match="table_period"):
        config.function_environment(LambdaFunction.ROTATOR, _wiring())


def test_only_ingest_is_told_the_rejects_queue() -> None:
    config = Context.parse({})
    for function in (LambdaFunction.QUERY, LambdaFunction.HOTKEYS):
        assert "REJECTS_QUEUE_URL" not in config.function_environment(function, _wiring())


@pytest.mark.parametrize(("period", "minutes"), [("hour", 15), ("day", 60), ("week", 60), ("month", 60)])
def test_the_rotator_runs_every_quarter_hour_for_hourly_tables_and_hourly_otherwise(period: str, minutes: int) -> None:
    config = Context.parse({"table_period": period, "retention": "60d"})
    assert config.rotation_interval_minutes() == minutes


# -- cdk.json loading --------------------------------------------------------------------


def test_unreadable_cdk_json_is_a_config_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_cdk_json_context(tmp_path / "missing.json")
    assert caught.value.field == "cdk.json"
    broken = tmp_path / "cdk.json"
    broken.write_text('{"context": [1, 2]}')
    with pytest.raises(ConfigError, match="must be a JSON object"):
        load_cdk_json_context(broken)


# -- the reference documentation ---------------------------------------------------------


def _documented_defaults() -> dict[str, str]:
    rows = re.findall(r"^\| `([a-z_]+)` \| ([^|]+) \|", DOCS.read_text(encoding="utf-8"), flags=re.MULTILINE)
    return {key: default.strip() for key, default in rows}


def test_docs_list_every_key_with_its_real_default() -> None:
    documented = _documented_defaults()
    assert set(documented) == set(DEFAULTS)
    for key, default in DEFAULTS.items():
        assert documented[key] == f"`{json.dumps(default)}`", key


def test_docs_list_every_lambda_environment_variable_as_the_models_define_it() -> None:
    reference = environment_reference()
    variables = {name for function in LambdaFunction for name in function.settings.variables().values()}
    assert sorted(name for name in variables if f"| `{name}` |" not in reference) == []
    assert reference in DOCS.read_text(encoding="utf-8"), "regenerate docs/configuration.md's Lambda environment"


def test_rollups_reach_ingest_query_and_the_rollup_function_and_can_be_turned_off() -> None:
    config = Context.parse({"ingest_timeout_s": 300, "retention": "12h"})
    env = config.function_environment(LambdaFunction.ROLLUP, FunctionWiring())
    # The settle time covers ingest's timeout; late marks are applied up to MAX_AGE, whose default (3 days)
    # a shorter retention cuts
    assert (env["ROLLUPS"], env["ROLLUP_SETTLE"], env["MAX_AGE"]) == ("1m,1h,1d", "6m", "12h")
    assert config.function_environment(LambdaFunction.QUERY, _wiring())["ROLLUPS"] == "1m,1h,1d"
    off = Context.parse({"rollups": ""})
    assert "ROLLUPS" not in off.function_environment(LambdaFunction.QUERY, _wiring())
    with pytest.raises(ConfigError) as refused:
        Context.parse({"rollups": "1h,90m"})
    assert refused.value.field == "rollups"
    # compaction's totals are put hour by hour: a level that neither divides an hour nor is whole hours is refused
    with pytest.raises(ConfigError) as refused:
        Context.parse({"rollups": "1m,90m,3h"})
    assert refused.value.field == "rollups" and "90m neither divides an hour nor is a whole number of hours" in str(
        refused.value
    )


def test_the_compaction_function_comes_with_the_write_tier_and_settles_as_the_rollups_do() -> None:
    config = Context.parse({"ingest_timeout_s": 300, "compaction_every_minutes": 1})
    env = config.function_environment(LambdaFunction.COMPACTION, FunctionWiring())
    assert (env["WRITE_TIER_GROUPS"], env["COMPACTION_SETTLE"]) == ("32", "6m")
    # a run ends before the next is due, one at a time
    assert config.sizing(LambdaFunction.COMPACTION) == FunctionSizing(1_024, 40, 1)
    assert Context.parse({}).sizing(LambdaFunction.COMPACTION).timeout_s == 240
    assert LambdaFunction.COMPACTION in config.functions()
    # it puts its part of the rollups: their granularities reach it, and ones it cannot hold are refused
    assert env["ROLLUPS"] == "1m,1h,1d"
    for spec in ("1m,7m,14m", "2h,1d"):
        with pytest.raises(ConfigError) as refused:
            Context.parse({"rollups": spec}).function_environment(LambdaFunction.COMPACTION, FunctionWiring())
        assert refused.value.field == "rollups"
    # the write tier is never off: readers find a sparse entity's compacted history only through it
    with pytest.raises(ConfigError, match="write_tier_groups"):
        Context.parse({"write_tier_groups": 0})
