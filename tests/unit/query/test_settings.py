"""Query settings from the environment: defaults, and errors naming the variable."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from query.cursor import CursorKeys
from query.settings import CursorSecretSource, QueryLimits, QuerySettings

BASE = {"TABLE_PREFIX": "readings", "SHARDS": "8", "CURSOR_SECRET": "s" * 32}


def test_defaults() -> None:
    settings = QuerySettings.from_env(BASE)

    assert settings.limits == QueryLimits()
    assert settings.limits.default_limit == 100
    assert settings.cursor_secret == CursorSecretSource(secret_id=None, literal=b"s" * 32)
    assert settings.common.layout.kind == "hybrid"


def test_every_limit_can_be_set() -> None:
    env = {
        **BASE,
        "MAX_RANGE": "2d",
        "MAX_LIMIT": "50",
        "LATEST_LOOKBACK": "6h",
        "MAX_SCAN_ITEMS": "500",
        "QUERY_CONCURRENCY": "4",
    }

    limits = QuerySettings.from_env(env).limits

    assert limits == QueryLimits(
        max_range_ms=2 * 86_400_000, max_limit=50, latest_lookback_ms=6 * 3_600_000, max_scan_items=500, concurrency=4
    )
    assert limits.default_limit == 50


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
        ({"MAX_RANGE": "forever"}, "MAX_RANGE"),
        ({"MAX_RANGE": "0s"}, "MAX_RANGE"),
        ({"MAX_LIMIT": "1001"}, "MAX_LIMIT"),
        ({"MAX_LIMIT": "ten"}, "MAX_LIMIT"),
        ({"LATEST_LOOKBACK": "7 days"}, "LATEST_LOOKBACK"),
        ({"MAX_SCAN_ITEMS": "0"}, "MAX_SCAN_ITEMS"),
        ({"QUERY_CONCURRENCY": "65"}, "QUERY_CONCURRENCY"),
        ({"CURSOR_SECRET": ""}, "CURSOR_SECRET_ARN"),
        ({"CURSOR_SECRET": "short"}, "CURSOR_SECRET"),
        ({"SHARDS": ""}, "SHARDS"),
        ({"LAYOUT": "spiral"}, "LAYOUT"),
    ],
)
def test_a_bad_variable_is_named(overrides: dict[str, str], variable: str) -> None:
    with pytest.raises(SettingsError) as caught:
        QuerySettings.from_env({**BASE, **overrides})
    assert caught.value.variable == variable


def test_an_arn_wins_over_a_literal_and_is_fetched_once_per_ttl() -> None:
    arn = "arn:aws:secretsmanager:eu-west-1:1:secret:c"
    settings = QuerySettings.from_env({**BASE, "CURSOR_SECRET_ARN": arn, "CURSOR_KEY_TTL": "2m"})
    assert settings.cursor_secret == CursorSecretSource(secret_id=arn, literal=None, ttl_ms=120_000)
    calls: list[tuple[str, str]] = []

    def fetch(secret_id: str, stage: str) -> bytes | None:
        calls.append((secret_id, stage))
        return b"f" * 40 if stage == "AWSCURRENT" else None

    keys = CursorKeys.from_source(settings.cursor_secret, fetch)

    assert keys.signing() == keys.signing() == b"f" * 40
    assert keys.accepted() == (b"f" * 40,)
    assert calls == [(arn, "AWSCURRENT")]  # the previous key only once a cursor needs it


def test_the_cursor_key_ttl_defaults_to_five_minutes() -> None:
    settings = QuerySettings.from_env({**BASE, "CURSOR_SECRET_ARN": "arn:x"})
    assert settings.cursor_secret.ttl_ms == 300_000


def test_a_short_fetched_secret_is_a_configuration_error() -> None:
    keys = CursorKeys.from_source(CursorSecretSource(secret_id="arn:x", literal=None), lambda _, __: b"short")

    with pytest.raises(SettingsError) as caught:
        keys.signing()
    assert caught.value.variable == "CURSOR_SECRET_ARN"
