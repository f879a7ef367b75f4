"""Query settings from the environment: the cursor key's source, and errors naming the variable."""

from __future__ import annotations

import pytest

from adapters.settings import SettingsError
from query.cursor import CursorKeys
from query.settings import CursorSecretSource, QuerySettings

BASE = {"TABLE_PREFIX": "readings", "SHARDS": "8", "CURSOR_SECRET": "s" * 32}


def test_a_literal_key_signs_cursors_outside_aws() -> None:
    assert QuerySettings.from_env(BASE).cursor_secret == CursorSecretSource(secret_id=None, literal=b"s" * 32)


@pytest.mark.parametrize(
    ("overrides", "variable"),
    [
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
    settings = QuerySettings.from_env({**BASE, "CURSOR_SECRET_ARN": arn})
    assert settings.cursor_secret == CursorSecretSource(secret_id=arn, literal=None)
    calls: list[tuple[str, str]] = []

    def fetch(secret_id: str, stage: str) -> bytes | None:
        calls.append((secret_id, stage))
        return b"f" * 40 if stage == "AWSCURRENT" else None

    keys = CursorKeys.from_source(settings.cursor_secret, fetch)

    assert keys.signing() == keys.signing() == b"f" * 40
    assert keys.accepted() == (b"f" * 40,)
    assert calls == [(arn, "AWSCURRENT")]  # the previous key only once a cursor needs it


def test_a_short_fetched_secret_is_a_configuration_error() -> None:
    keys = CursorKeys.from_source(CursorSecretSource(secret_id="arn:x", literal=None), lambda _, __: b"short")

    with pytest.raises(SettingsError) as caught:
        keys.signing()
    assert caught.value.variable == "CURSOR_SECRET_ARN"
