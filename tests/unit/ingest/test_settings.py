"""Ingest settings: defaults, and a clear error naming the variable for every bad value."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from ingest.settings import IngestSettings

BASE = {"SHARDS": "8", "TABLE_PREFIX": "readings", "REJECTS_QUEUE_URL": "https://sqs.eu-west-1.amazonaws.com/1/r"}


def test_defaults() -> None:
    settings = IngestSettings.from_env(BASE)
    assert settings.max_future_ms == 300_000
    # MAX_AGE unset: a long weekend (3 days), or RETENTION when that is shorter
    assert settings.max_age_ms == 3 * 86_400_000
    assert IngestSettings.from_env({**BASE, "RETENTION": "2d"}).max_age_ms == 2 * 86_400_000
    assert settings.rotator_function is None
    assert (settings.write_concurrency, settings.reject_concurrency) == (8, 4)
    assert (settings.deadline_margin_ms, settings.retry_base_ms, settings.retry_max_delay_ms) == (2_000, 50, 5_000)
    assert settings.reject_payload_bytes == 65_536


def test_values_are_read() -> None:
    settings = IngestSettings.from_env(
        {**BASE, "MAX_FUTURE": "90s", "MAX_AGE": "2d", "WRITE_CONCURRENCY": "16", "DEADLINE_MARGIN_MS": "500"}
    )
    assert (settings.max_future_ms, settings.max_age_ms) == (90_000, 2 * 86_400_000)
    assert (settings.write_concurrency, settings.deadline_margin_ms) == (16, 500)


@pytest.mark.parametrize(
    ("overrides", "variable", "fragment"),
    [
        ({"REJECTS_QUEUE_URL": " "}, "REJECTS_QUEUE_URL", "is required"),
        ({"REJECTS_QUEUE_URL": "rejects"}, "REJECTS_QUEUE_URL", "not a queue URL"),
        ({"MAX_AGE": "31d"}, "MAX_AGE", "must not exceed RETENTION"),
        ({"MAX_AGE": "old"}, "MAX_AGE", "not a duration"),
        ({"MAX_FUTURE": "5 minutes"}, "MAX_FUTURE", "not a duration"),
        ({"WRITE_CONCURRENCY": "33"}, "WRITE_CONCURRENCY", "outside 1..32"),
        ({"REJECT_CONCURRENCY": "x"}, "REJECT_CONCURRENCY", "not a whole number"),
        ({"DEADLINE_MARGIN_MS": "-1"}, "DEADLINE_MARGIN_MS", "outside"),
        ({"RETRY_BASE_MS": "500", "RETRY_MAX_DELAY_MS": "100"}, "RETRY_MAX_DELAY_MS", "below RETRY_BASE_MS"),
        ({"REJECT_PAYLOAD_BYTES": "10"}, "REJECT_PAYLOAD_BYTES", "outside"),
        ({"SHARDS": ""}, "SHARDS", "is required"),
    ],
)
def test_a_bad_value_names_its_variable(overrides: dict[str, str], variable: str, fragment: str) -> None:
    with pytest.raises(SettingsError) as caught:
        IngestSettings.from_env({**BASE, **overrides})
    assert caught.value.variable == variable
    assert fragment in str(caught.value)
