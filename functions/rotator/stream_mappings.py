"""Lambda event source mappings (table stream -> hot-key function), behind a small interface.

Lambda refuses a second mapping between the same stream and function with
``ResourceConflictException``; :meth:`LambdaMappings.create` answers that as
"already there", which is what makes two runs creating it at once safe.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import ClientError

from adapters.clients import deleted, error_code

_STREAM_TABLE = re.compile(r"^arn:aws[a-z-]*:dynamodb:[^:]*:[^:]*:table/([^/]+)/stream/.+$")


def table_of_stream(stream_arn: str) -> str | None:
    """The table name inside a DynamoDB stream ARN, or None for any other ARN."""
    match = _STREAM_TABLE.match(stream_arn)
    return match.group(1) if match else None


@dataclass(frozen=True, slots=True)
class StreamMapping:
    uuid: str
    source_arn: str
    state: str
    config: dict[str, Any] = field(compare=False)

    @classmethod
    def from_configuration(cls, config: Mapping[str, Any]) -> StreamMapping:
        return cls(
            uuid=str(config["UUID"]),
            source_arn=str(config.get("EventSourceArn", "")),
            state=str(config.get("State", "Unknown")),
            config=dict(config),
        )


class LambdaMappings:
    """The Lambda calls the rotator makes, on a boto3 client."""

    def __init__(self, lambda_client: Any) -> None:
        self._lambda = lambda_client

    def list(self, function_arn: str) -> list[StreamMapping]:
        pages = self._lambda.get_paginator("list_event_source_mappings").paginate(FunctionName=function_arn)
        return [StreamMapping.from_configuration(m) for page in pages for m in page.get("EventSourceMappings", [])]

    def create(self, request: Mapping[str, Any]) -> StreamMapping | None:
        """The new mapping, or None when this stream already feeds this function."""
        try:
            return StreamMapping.from_configuration(self._lambda.create_event_source_mapping(**request))
        except ClientError as exc:
            if error_code(exc) == "ResourceConflictException":
                return None
            raise

    def update(self, uuid: str, changes: Mapping[str, Any]) -> None:
        self._lambda.update_event_source_mapping(UUID=uuid, **changes)

    def delete(self, uuid: str) -> bool:
        return deleted(lambda: self._lambda.delete_event_source_mapping(UUID=uuid))
