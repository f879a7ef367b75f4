"""Ingest settings: how old a reading may be, and a clear error naming the variable for every bad value."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from ingest.settings import IngestSettings

BASE = {"SHARDS": "8", "TABLE_PREFIX": "readings", "REJECTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/r"}


def test_max_age_unset_is_a_long_weekend_cut_to_a_shorter_retention() -> None:
    assert IngestSettings.from_env(BASE).max_age_ms == 3 * 86_400_000
    assert IngestSettings.from_env({**BASE, "RETENTION": "2d"}).max_age_ms == 2 * 86_400_000
    assert IngestSettings.from_env({**BASE, "MAX_AGE": "12h"}).max_age_ms == 12 * 3_600_000


@pytest.mark.parametrize(
    ("overrides", "variable", "fragment"),
    [
        ({"REJECTS_QUEUE_URL": " "}, "REJECTS_QUEUE_URL", "is required"),
        ({"MAX_AGE": "31d"}, "MAX_AGE", "longer than retention"),
        ({"MAX_AGE": "old"}, "MAX_AGE", "not a duration"),
        ({"MAX_FUTURE": "5 minutes"}, "MAX_FUTURE", "not a duration"),
        ({"TABLE_PERIOD": "hour", "MAX_FUTURE": "2h"}, "MAX_FUTURE", "longer than one hour table period"),
        ({"TABLE_PERIOD": "week", "RETENTION": "3d"}, "RETENTION", "shorter than one week table period"),
        ({"RETENTION": "0s"}, "RETENTION", "must be above 0"),
        ({"SHARDS": ""}, "SHARDS", "is required"),
        ({"SHARDS": "x"}, "SHARDS", "must be a whole number, got 'x'"),
        ({"PREBUILD_PERIODS": "0"}, "PREBUILD_PERIODS", "must be at least 1, got '0'"),
        ({"INGEST_FORMATS": "influx,statsd"}, "INGEST_FORMATS", "'statsd' is not an agent format"),
        ({"ENTITY_TAGS": "host,"}, "ENTITY_TAGS", "'' is not a tag or attribute name"),
        ({"ENTITY_TAGS": "none"}, "ENTITY_TAGS", "must name at least one tag or attribute"),
        ({"INFLUX_PRECISION": "h"}, "INFLUX_PRECISION", "'h' is not one of ns, us, ms, s"),
        ({"TELEGRAF_JSON_TIMESTAMP_UNITS": "2ms"}, "TELEGRAF_JSON_TIMESTAMP_UNITS", "'2ms' is not one of"),
    ],
)
def test_a_bad_value_names_its_variable(overrides: dict[str, str], variable: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        IngestSettings.from_env({**BASE, **overrides})
    assert caught.value.variable == variable
    assert fragment in str(caught.value)


def test_the_agent_settings_become_the_decoders_formats() -> None:
    formats = IngestSettings.from_env(
        {
            **BASE,
            "INGEST_FORMATS": "otlp_proto, influx",
            "ENTITY_TAGS": "device_id, host",
            "INFLUX_PRECISION": "ms",
            "TELEGRAF_JSON_TIMESTAMP_UNITS": "1ms",
        }
    ).formats
    assert formats.enabled == {"otlp_proto", "influx"}
    assert formats.entity_tags == ("device_id", "host")
    assert (formats.influx_unit_ns, formats.telegraf_json_unit_ns) == (1_000_000, 1_000_000)
    assert IngestSettings.from_env({**BASE, "INGEST_FORMATS": "none"}).formats.enabled == frozenset()
    default = IngestSettings.from_env(BASE).formats
    assert default.enabled == {"influx", "telegraf_json", "otlp_proto", "otlp_json"}
    assert (default.entity_tags, default.influx_unit_ns, default.telegraf_json_unit_ns) == (
        ("host", "service.instance.id"),
        1,
        1_000_000_000,
    )
