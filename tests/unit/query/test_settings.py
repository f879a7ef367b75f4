"""Query settings from the environment: defaults, and errors naming the variable."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from query.logic import CursorKey
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


def test_an_arn_wins_over_a_literal_and_is_fetched_once() -> None:
    settings = QuerySettings.from_env({**BASE, "CURSOR_SECRET_ARN": "arn:aws:secretsmanager:eu-west-1:1:secret:c"})
    calls: list[str] = []

    def fetch(secret_id: str) -> bytes:
        calls.append(secret_id)
        return b"f" * 40

    key = CursorKey(settings.cursor_secret, fetch)

    assert key() == key() == b"f" * 40
    assert calls == ["arn:aws:secretsmanager:eu-west-1:1:secret:c"]


def test_a_short_fetched_secret_is_a_configuration_error() -> None:
    key = CursorKey(CursorSecretSource(secret_id="arn:x", literal=None), lambda _: b"short")

    with pytest.raises(SettingsError) as caught:
        key()
    assert caught.value.variable == "CURSOR_SECRET_ARN"
