"""moto's in-process AWS for the integration tests: one way to enter it, one readings-table shape."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from moto import mock_aws

from adapters.clients import reset_clients
from local_runtime import moto_speedups


@contextmanager
def mocked_aws(monkeypatch: pytest.MonkeyPatch, region: str, **env: str) -> Iterator[None]:
    """Inside: test credentials and ``region`` (plus ``env``), no endpoint override, moto's mock, and
    the adapters' cached clients made afresh on entry and on exit."""
    for name, value in {
        "AWS_ACCESS_KEY_ID": "testing",
        "AWS_SECRET_ACCESS_KEY": "testing",
        "AWS_SESSION_TOKEN": "testing",
        "AWS_DEFAULT_REGION": region,
        "AWS_REGION": region,
        **env,
    }.items():
        monkeypatch.setenv(name, value)
    monkeypatch.delenv("AWS_ENDPOINT_URL", raising=False)
    # The local runtime's speed-ups to moto (same results: tests/unit/local_runtime/test_moto_speedups.py)
    # make a Query cost what it returns, not the size of its table, here as in local mode, and apply
    # each item write atomically, as DynamoDB does (tests that run containers in threads need it).
    moto_speedups.install()
    try:
        with mock_aws():
            reset_clients()
            yield
            reset_clients()
    finally:
        moto_speedups.uninstall()


def create_readings_table(dynamodb: Any, name: str, *, stream: bool = False) -> None:
    """A table with the readings tables' key schema (string pk and sk), on demand; ``stream`` adds a
    KEYS_ONLY stream, as the stack's tables have."""
    extra: dict[str, Any] = {}
    if stream:
        extra["StreamSpecification"] = {"StreamEnabled": True, "StreamViewType": "KEYS_ONLY"}
    dynamodb.create_table(
        TableName=name,
        AttributeDefinitions=[
            {"AttributeName": "pk", "AttributeType": "S"},
            {"AttributeName": "sk", "AttributeType": "S"},
        ],
        KeySchema=[{"AttributeName": "pk", "KeyType": "HASH"}, {"AttributeName": "sk", "KeyType": "RANGE"}],
        BillingMode="PAY_PER_REQUEST",
        **extra,
    )
