"""The adapters' boto3 clients: one session for all, one client per service and configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters import clients


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("AWS_REGION", "eu-west-1")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    clients.reset_clients()
    yield
    clients.reset_clients()


def test_every_client_comes_from_one_session_and_each_configuration_is_built_once() -> None:
    # Given clients asked for twice, for two services and two retry configurations
    dynamodb, again = clients.client("dynamodb"), clients.client("dynamodb")
    sqs = clients.client("sqs")
    writer = clients.client("dynamodb", max_attempts=1)
    # Then one configuration is one client, a different one another, and all share one botocore session
    assert dynamodb is again and writer is not dynamodb
    assert writer.meta.config.retries != dynamodb.meta.config.retries
    assert len(clients._session) == 1
    loaders = {id(c._loader) for c in (dynamodb, sqs, writer)}  # the session's loader: models read once
    assert len(loaders) == 1


def test_reset_forgets_the_clients_and_the_session() -> None:
    first = clients.client("dynamodb")
    clients.reset_clients()
    assert clients.client("dynamodb") is not first
