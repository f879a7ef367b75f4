"""The adapters' botocore clients: one session for all, one client per service and configuration."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from botocore.exceptions import ClientError, EndpointConnectionError, NoCredentialsError
from botocore.stub import Stubber

from adapters import clients
from tests.unit.adapters.conftest import CountingDynamoDB


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


def test_closed_connections_are_opened_anew_by_the_next_call(dynamodb_endpoint: CountingDynamoDB) -> None:
    # Given a client whose calls share one pooled connection
    dynamodb = clients.client("dynamodb")
    dynamodb.list_tables()
    dynamodb.list_tables()
    assert dynamodb_endpoint.connections == 1
    # When the pools are closed (a snapshot is about to be taken, or a copy was restored from one)
    clients.close_connections()
    # Then the same client still works, over a new connection
    assert dynamodb.list_tables()["TableNames"] == []
    assert dynamodb_endpoint.connections == 2


def test_renewed_credentials_are_resolved_again_from_the_environment_by_the_next_call(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given clients made (and a call signed) with the credentials of init's environment
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAINITIALISED")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    dynamodb, sqs = clients.client("dynamodb", max_attempts=1), clients.client("sqs", max_attempts=1)
    signed: list[str] = []

    def capture(request: object, **_: object) -> None:
        authorization = request.headers["Authorization"].decode()  # type: ignore[attr-defined]
        signed.append(authorization.split("Credential=")[1].split("/")[0])
        raise RuntimeError("captured")

    for made in (dynamodb, sqs):
        made.meta.events.register_last("before-send", capture)

    def call_both() -> None:
        for call in (dynamodb.list_tables, sqs.list_queues):
            with pytest.raises(RuntimeError, match="captured"):
                call()

    call_both()
    # When the environment changes (a restored copy's has other credentials), the clients keep theirs...
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIARESTORED")
    call_both()
    # ...until they are renewed: then every client resolves them again
    clients.renew_credentials()
    call_both()
    assert signed == ["AKIAINITIALISED"] * 4 + ["AKIARESTORED"] * 2


def test_without_credentials_a_call_fails_naming_them(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/nonexistent")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    with pytest.raises(NoCredentialsError):
        clients.client("dynamodb", max_attempts=1).list_tables()


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


def test_the_error_of_a_failed_call_is_read_from_the_client_error_botocore_raises() -> None:
    # Given a real client whose call fails the way DynamoDB fails a condition
    dynamodb = clients.client("dynamodb")
    with Stubber(dynamodb) as stub:
        stub.add_client_error(
            "delete_item", "ConditionalCheckFailedException", "The conditional request failed", http_status_code=400
        )
        with pytest.raises(ClientError) as raised:
            dynamodb.delete_item(TableName="t", Key={"pk": {"S": "a"}})
    # Then its code, message and status are what the service sent
    assert clients.error_code(raised.value) == clients.CONDITION_FAILED
    assert clients.error_message(raised.value) == "The conditional request failed"
    assert clients.http_status(raised.value) == 400


@pytest.mark.parametrize(
    "exc",
    [ValueError("no"), KeyError("Error"), EndpointConnectionError(endpoint_url="http://127.0.0.1:1"), Exception()],
    ids=["ValueError", "KeyError", "EndpointConnectionError", "Exception"],
)
def test_an_exception_that_is_not_a_client_error_has_no_code(exc: Exception) -> None:
    assert clients.error_code(exc) is None
    assert clients.error_message(exc) == ""
    assert clients.http_status(exc) == 0


@pytest.mark.parametrize(
    "response",
    [
        {},
        {"Error": {}},
        {"Error": {"Code": "", "Message": None}},
        {"Error": "Throttled", "ResponseMetadata": "500"},
        {"Error": None, "ResponseMetadata": {"HTTPStatusCode": "not a number"}},
        None,
    ],
    ids=["empty", "empty-error", "blank-code", "error-not-a-mapping", "error-none", "no-response"],
)
def test_a_client_error_whose_response_is_malformed_has_no_code_and_does_not_raise(response: Any) -> None:
    # Given a ClientError whose response lacks, or garbles, the parts botocore normally fills in
    exc = ClientError({}, "PutItem")
    exc.response = response
    # Then reading it gives "none" rather than raising a second error inside the first one's handler
    assert clients.error_code(exc) is None
    assert clients.error_message(exc) == ""
    assert clients.http_status(exc) == 0


def test_a_client_error_shaped_like_a_throttled_call_reads_as_retryable() -> None:
    exc = ClientError(
        {
            "Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"},
            "ResponseMetadata": {"HTTPStatusCode": 400},
        },
        "BatchWriteItem",
    )
    code = clients.error_code(exc)
    assert code in clients.DYNAMODB_THROTTLING and code in clients.DYNAMODB_RETRYABLE
    assert code in clients.KINESIS_RETRYABLE and code not in clients.SQS_PERMANENT
    # The sets keep each service's meaning: DynamoDB's request-rate limit is not a Kinesis code,
    # Kinesis's LimitExceededException is not DynamoDB's throttling
    assert "RequestLimitExceeded" in clients.DYNAMODB_THROTTLING - clients.KINESIS_RETRYABLE
    assert "LimitExceededException" in clients.KINESIS_RETRYABLE - clients.DYNAMODB_RETRYABLE
    assert clients.DYNAMODB_THROTTLING < clients.DYNAMODB_RETRYABLE
