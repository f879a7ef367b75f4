"""The adapters' botocore clients: one session for all, one client per service and configuration."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from botocore.exceptions import DataNotFoundError, UnknownServiceError
from botocore.loaders import create_loader

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


def test_the_loader_reads_the_same_models_as_botocores_own_and_still_refuses_an_unknown_service() -> None:
    # Given the shared session's loader (plain dicts, a cheaper service listing) and botocore's default one
    clients.client("dynamodb")
    assert isinstance(clients._session[0].get_component("data_loader"), clients._DataLoader)
    ours, theirs = clients._DataLoader(), create_loader()  # fresh: a resolver adds to the data it was given
    # Then every file a client reads holds the same data
    for service, kind in (("dynamodb", "service-2"), ("sqs", "endpoint-rule-set-1")):
        assert ours.load_service_model(service, kind) == theirs.load_service_model(service, kind)
    assert ours.load_data("endpoints") == theirs.load_data("endpoints")
    # And a name that is no service still fails when its client is asked for
    with pytest.raises((DataNotFoundError, UnknownServiceError)):
        clients.client("no-such-service")


def test_the_endpoint_comes_from_aws_endpoint_url(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given AWS_ENDPOINT_URL set, as the local runtime sets it for its moto server
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:4566")
    # Then every client is pointed there, with no code of ours
    assert clients.client("dynamodb").meta.endpoint_url == "http://127.0.0.1:4566"
    assert clients.client("sqs").meta.endpoint_url == "http://127.0.0.1:4566"


def test_every_call_carries_the_products_user_agent_made_once(monkeypatch: pytest.MonkeyPatch) -> None:
    # Given a request botocore prepares for one of our clients (sent nowhere: the hook raises first)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    dynamodb = clients.client("dynamodb", max_attempts=1)
    sent: list[str] = []

    def capture(request: object, **_: object) -> None:
        sent.append(request.headers["User-Agent"].decode())  # type: ignore[attr-defined]
        raise RuntimeError("captured")

    dynamodb.meta.events.register_last("before-send.dynamodb.ListTables", capture)
    for _ in range(2):
        with pytest.raises(RuntimeError, match="captured"):
            dynamodb.list_tables()
    # Then the header is the fixed one (botocore's own default is rebuilt twice a call), with
    # Powertools' marker after it once Powertools has registered its hook (it appends PT/...)
    assert len(sent) == 2 and sent[0] == sent[1] and sent[0].startswith(clients.USER_AGENT)
    assert clients.USER_AGENT.startswith("timeseries-dynamodb Botocore/")
