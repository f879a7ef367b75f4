"""Invoking a stream function with an event, as its mapping would (a small interface).

In AWS, :class:`LambdaInvoker`: a synchronous Lambda Invoke (6 MB of request
payload at most; :mod:`replay.runner` keeps each event under
:data:`MAX_EVENT_BYTES`). The local runtime, or a test, provides any object with
the same ``invoke``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Protocol

#: Lambda takes 6 MB in a synchronous request; an event is kept under this (records are never cut).
MAX_EVENT_BYTES = 5_000_000


class InvocationFailed(Exception):  # noqa: N818 - reads as the outcome
    """The function raised (or could not be invoked): none of the event's records count as done."""


class Invoker(Protocol):
    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The function's response to ``event``; raises :class:`InvocationFailed` when it failed."""


class LambdaInvoker:
    """:class:`Invoker` on a boto3 Lambda client."""

    def __init__(self, lambda_client: Any) -> None:
        self._lambda = lambda_client

    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        response = self._lambda.invoke(
            FunctionName=function, InvocationType="RequestResponse", Payload=json.dumps(event).encode()
        )
        body = response["Payload"].read()
        if response.get("FunctionError"):
            raise InvocationFailed(f"{response['FunctionError']}: {body[:500].decode('utf-8', 'replace')}")
        answer = json.loads(body) if body else None
        return answer if isinstance(answer, dict) else None
