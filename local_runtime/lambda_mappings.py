"""Lambda's event source mapping API, in process: where the rotator's mappings go in local mode.

With a table per period, the rotator maps each new table's stream to the
hot-key function (CreateEventSourceMapping, with the ``HOTKEYS_*`` settings
of the stack's configuration). moto's Lambda cannot stand in for that API:
it runs functions only through Docker, and once a stream is mapped it hands
the shard's records to that function and empties the shard, so nothing else
could read them. :class:`LocalMappings` takes the rotator's calls instead
(it is the rotator's ``MappingApi``): each mapping it creates is an
:class:`~local_runtime.event_source_mapping.EventSourceMapping` emulator
polling that table's stream with the request's settings, its on-failure
destination the local queue the request names; deleting it stops the poller.

Not emulated: ``UpdateEventSourceMapping`` records the new settings (the
rotator then sees no drift) but a running poller keeps the ones it started
with; states other than ``Enabled`` never occur.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from local_runtime.event_source_mapping import EventSourceMapping, FailureDestination, MappingConfig
from local_runtime.faults import service_error
from local_runtime.stream_sources import DynamoDBStreamSource
from rotator.stream_mappings import StreamMapping, table_of_stream

if TYPE_CHECKING:
    from local_runtime.system import LocalSystem


@dataclass(slots=True)
class _Entry:
    uuid: str
    request: dict[str, Any]
    mapping: EventSourceMapping
    changes: dict[str, Any] = field(default_factory=dict)

    def describe(self) -> StreamMapping:
        return StreamMapping.from_configuration(
            {**self.request, **self.changes, "UUID": self.uuid, "State": "Enabled", "FunctionArn": self.function_arn}
        )

    @property
    def function_arn(self) -> str:
        return str(self.request["FunctionName"])


class LocalMappings:
    """The rotator's ``MappingApi`` on the local system: list, create, update, delete."""

    def __init__(
        self,
        system: LocalSystem,
        *,
        destination_for: Callable[[str], FailureDestination | None],
    ) -> None:
        self._system = system
        self._destination_for = destination_for
        self._entries: dict[str, _Entry] = {}
        self._lock = threading.Lock()

    def list(self, function_arn: str) -> list[StreamMapping]:
        with self._lock:
            return [e.describe() for e in self._entries.values() if e.function_arn == function_arn]

    def create(self, request: Mapping[str, Any]) -> StreamMapping | None:
        """The new mapping, or None when this stream already feeds this function (Lambda's
        ResourceConflictException, answered the way ``rotator.stream_mappings.LambdaMappings`` does)."""
        operation = "CreateEventSourceMapping"
        function_arn = str(request.get("FunctionName", ""))
        source_arn = str(request.get("EventSourceArn", ""))
        function = self._system.function_by_arn(function_arn)
        if function is None:
            raise service_error("ResourceNotFoundException", operation, f"Function not found: {function_arn}")
        table = table_of_stream(source_arn)
        if table is None:
            raise service_error("InvalidParameterValueException", operation, f"{source_arn} is not a DynamoDB stream")
        with self._lock:
            if any(
                e.function_arn == function_arn and e.request["EventSourceArn"] == source_arn
                for e in self._entries.values()
            ):
                return None
            destination_arn = request.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
            destination = self._destination_for(str(destination_arn)) if destination_arn else None
            if destination_arn and destination is None:
                raise service_error(
                    "InvalidParameterValueException", operation, f"no local destination {destination_arn}"
                )
            config = MappingConfig.from_request(request, poll_interval_s=self._system.options.poll_interval_s)
            mapping = self._system.add_stream_mapping(
                name=f"{function.name}:{table}",
                source=DynamoDBStreamSource(
                    self._system.client("dynamodbstreams"), source_arn, region=self._system.options.region
                ),
                function=function,
                config=config,
                destination=destination,
            )
            entry = _Entry(str(uuid.uuid4()), dict(request), mapping)
            self._entries[entry.uuid] = entry
            return entry.describe()

    def update(self, mapping_uuid: str, changes: Mapping[str, Any]) -> None:
        with self._lock:
            entry = self._entries.get(mapping_uuid)
            if entry is None:
                raise service_error(
                    "ResourceNotFoundException", "UpdateEventSourceMapping", f"no mapping {mapping_uuid}"
                )
            entry.changes.update(changes)

    def delete(self, mapping_uuid: str) -> bool:
        with self._lock:
            entry = self._entries.pop(mapping_uuid, None)
        if entry is None:
            return False
        self._system.remove_stream_mapping(entry.mapping)
        return True
