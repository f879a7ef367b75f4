"""Invoking a stream function with an event, as its mapping would (a small interface).

In AWS, :class:`LambdaInvoker`: a synchronous Lambda Invoke on a client made
with :data:`INVOKE_CONFIG`: a read timeout above the longest a function may run
(botocore's default, 60 s, is half ingest's timeout), and one attempt only: a
retried Invoke would put the same records through the function again while the
first attempt may still be running. Every failure to get the function's answer
(a timeout, a throttle, an error of the Lambda API) is :class:`InvocationFailed`,
so the replay reports that message and goes on with the next. The local runtime,
or a test, provides any object with the same ``invoke``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError, ReadTimeoutError

#: Lambda's longest function timeout, plus a minute for the answer to come back.
INVOKE_TIMEOUT_S = 900 + 60
#: The Lambda client of :class:`LambdaInvoker`: waits out the longest invocation, never re-sends one.
INVOKE_CONFIG = Config(read_timeout=INVOKE_TIMEOUT_S, retries={"mode": "standard", "total_max_attempts": 1})


class InvocationFailed(Exception):  # noqa: N818 - reads as the outcome
    """The function raised, could not be invoked, or did not answer: none of the event's records count as done."""


class Invoker(Protocol):
    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The function's response to ``event``; raises :class:`InvocationFailed` when it failed."""


class LambdaInvoker:
    """:class:`Invoker` on a boto3 Lambda client (made with :data:`INVOKE_CONFIG`)."""

    def __init__(self, lambda_client: Any) -> None:
        self._lambda = lambda_client

    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        try:
            response = self._lambda.invoke(
                FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode()
            )
            body = response["Payload"].read()
        except ReadTimeoutError as exc:
            raise InvocationFailed(
                f"no answer within {INVOKE_TIMEOUT_S} s ({exc}); the invocation may still have stored some records"
            ) from exc
        except (BotoCoreError, ClientError) as exc:
            raise InvocationFailed(f"not invoked: {exc}") from exc
        if response.get("FunctionError"):
            raise InvocationFailed(f"{response['FunctionError']}: {body[:500].decode('utf-8', 'replace')}")
        answer = json.loads(body) if body else None
        return answer if isinstance(answer, dict) else None
