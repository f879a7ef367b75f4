"""The local Lambda Invoke API answers a boto3 Lambda client as Lambda does: results, function
errors, asynchronous invocations retried, and the errors of a bad request."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import boto3
import pytest
from botocore.config import Config
from botocore.exceptions import ClientError

from local_runtime.functions import FunctionError
from local_runtime.lambda_api import LambdaInvokeApi, function_name


class Function:
    """A function that returns its event, or fails the first ``failures`` times."""

    def __init__(self, name: str, failures: int = 0) -> None:
        self.name = name
        self.failures = failures
        self.events: list[Any] = []
        self.called = threading.Event()

    def invoke(self, event: Any) -> Any:
        self.events.append(event)
        if len(self.events) <= self.failures:
            try:
                raise ValueError("table not found")
            except ValueError as cause:
                raise FunctionError("the handler raised") from cause
        self.called.set()
        return {"echo": event}


@pytest.fixture
def functions() -> dict[str, Function]:
    return {"ingest": Function("ingest"), "rotator": Function("rotator", failures=2), "broken": Function("x", 9)}


@pytest.fixture
def api(functions: dict[str, Any]) -> Iterator[LambdaInvokeApi]:
    served = LambdaInvokeApi(functions.get, retry_delays_s=(0.01, 0.01))
    served.start()
    yield served
    served.stop(timeout_s=5)


def lambda_client(api: LambdaInvokeApi) -> Any:
    return boto3.client(
        "lambda",
        endpoint_url=api.url,
        region_name="eu-west-1",
        aws_access_key_id="testing",
        aws_secret_access_key="testing",
        config=Config(retries={"max_attempts": 1}),
    )


def test_a_synchronous_invocation_returns_the_functions_result(api: LambdaInvokeApi) -> None:
    arn = "arn:aws:lambda:eu-west-1:123456789012:function:ingest"
    answer = lambda_client(api).invoke(FunctionName=arn, Payload=json.dumps({"Records": []}))
    assert answer["StatusCode"] == 200 and "FunctionError" not in answer
    assert json.loads(answer["Payload"].read()) == {"echo": {"Records": []}}


def test_a_failed_function_is_a_200_with_the_error_named(api: LambdaInvokeApi) -> None:
    answer = lambda_client(api).invoke(FunctionName="broken", Payload=b"{}")
    assert answer["StatusCode"] == 200 and answer["FunctionError"] == "Unhandled"
    assert json.loads(answer["Payload"].read()) == {"errorMessage": "table not found", "errorType": "ValueError"}


def test_an_asynchronous_invocation_is_accepted_and_tried_again_until_it_succeeds(
    api: LambdaInvokeApi, functions: dict[str, Function]
) -> None:
    answer = lambda_client(api).invoke(FunctionName="rotator", InvocationType="Event", Payload=b'{"build": [1]}')
    assert answer["StatusCode"] == 202
    assert functions["rotator"].called.wait(5)
    assert functions["rotator"].events == [{"build": [1]}] * 3 and api.failed_events == []


def test_an_asynchronous_invocation_that_always_fails_is_recorded_after_three_attempts(
    api: LambdaInvokeApi, functions: dict[str, Function]
) -> None:
    assert lambda_client(api).invoke(FunctionName="broken", InvocationType="Event")["StatusCode"] == 202
    deadline = time.monotonic() + 5
    while not api.failed_events and time.monotonic() < deadline:
        time.sleep(0.01)
    assert len(functions["broken"].events) == 3
    assert api.failed_events == [("x", "the handler raised")]


def test_an_unknown_function_and_a_body_that_is_not_json_are_refused(api: LambdaInvokeApi) -> None:
    client = lambda_client(api)
    with pytest.raises(ClientError) as missing:
        client.invoke(FunctionName="nope", Payload=b"{}")
    assert missing.value.response["Error"]["Code"] == "ResourceNotFoundException"
    with pytest.raises(ClientError) as bad:
        client.invoke(FunctionName="ingest", Payload=b"{not json")
    assert bad.value.response["Error"]["Code"] == "InvalidRequestContentException"
    assert client.invoke(FunctionName="ingest", InvocationType="DryRun")["StatusCode"] == 204


@pytest.mark.parametrize(
    ("reference", "name"),
    [
        ("ingest", "ingest"),
        ("ingest:$LATEST", "ingest"),
        ("arn:aws:lambda:eu-west-1:123456789012:function:ingest", "ingest"),
        ("arn:aws:lambda:eu-west-1:123456789012:function:ingest:7", "ingest"),
        ("123456789012:function:ingest", "ingest"),
    ],
)
def test_a_name_or_arn_names_its_function(reference: str, name: str) -> None:
    assert function_name(reference) == name
