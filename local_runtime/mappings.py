"""The event source mappings the local system runs, and the Lambda API the rotator creates them with.

:class:`StreamMappings` holds every running mapping (an
:class:`~local_runtime.event_source_mapping.EventSourceMapping` emulator):
ingest's on the Kinesis stream, and the hot-key function's on each readings
table's stream, either kept on every table as tables come and go
(:meth:`StreamMappings.follow_tables`: the stack's one mapping, or a test's
plug point) or created by the rotator. It waits for them in the order the data
flows, and stops them.

:class:`LocalLambda` is the Lambda client the rotator is built with locally
(``Rotator(settings, lambda_client=...)``), for the four event source
mapping calls it makes. moto's Lambda cannot take them: it runs functions only
through Docker, and once a stream is mapped it hands the shard's records to
that function and empties the shard, so nothing else could read them. Each
mapping created here is an emulator polling that table's stream with the
request's settings, its on-failure destination the local queue the request
names; deleting it stops the poller. Not emulated: ``UpdateEventSourceMapping``
records the new settings (the rotator then sees no drift) but a running poller
keeps the ones it started with; states other than ``Enabled`` never occur.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import replace
from typing import Any

from local_runtime.event_source_mapping import EventSourceMapping, FailureDestination, MappingConfig
from local_runtime.faults import service_error
from local_runtime.functions import LocalFunction
from local_runtime.stream_sources import DynamoDBStreamSource, KinesisSource, StartingPosition
from rotator.stream_mappings import table_of_stream

_log = logging.getLogger(__name__)

#: How often the readings tables are listed again, to follow new ones' streams.
TABLE_DISCOVERY_S = 5.0


class StreamMappings:
    """Every event source mapping of the running system, in the order they were added."""

    def __init__(
        self, *, dynamodb: Any, streams: Any, region: str, tables: Callable[[], tuple[str, ...]], stop_timeout_s: float
    ) -> None:
        self._dynamodb = dynamodb
        self._streams = streams
        self.region = region
        self._tables = tables
        self._stop_timeout_s = stop_timeout_s
        self._mappings: list[EventSourceMapping] = []
        self._followers: list[_TableFollower] = []
        self._lock = threading.Lock()

    def add(
        self,
        *,
        name: str,
        source: KinesisSource | DynamoDBStreamSource,
        function: LocalFunction,
        config: MappingConfig,
        destination: FailureDestination | None,
    ) -> EventSourceMapping:
        """Start a mapping of ``source`` to ``function``."""
        mapping = EventSourceMapping(
            name=name,
            source=source,
            function=function,
            function_arn=function.spec.arn,
            config=config,
            destination=destination,
        )
        with self._lock:
            self._mappings.append(mapping)
        mapping.start()
        return mapping

    def table_stream(self, stream_arn: str) -> DynamoDBStreamSource:
        return DynamoDBStreamSource(self._streams, stream_arn, region=self.region)

    def remove(self, mapping: EventSourceMapping) -> None:
        """Stop ``mapping`` and forget it (its stream is gone)."""
        mapping.stop(self._stop_timeout_s)
        with self._lock:
            if mapping in self._mappings:
                self._mappings.remove(mapping)

    def follow_tables(
        self, function: LocalFunction, config: MappingConfig, destination: FailureDestination | None = None
    ) -> None:
        """Keep a mapping of every readings table's stream to ``function``, including tables created
        later (looked for every :data:`TABLE_DISCOVERY_S`), from each stream's trim horizon."""
        follower = _TableFollower(
            self, function, replace(config, starting_position=StartingPosition.TRIM_HORIZON), destination
        )
        with self._lock:
            self._followers.append(follower)
        follower.start()

    def named(self, name: str) -> EventSourceMapping | None:
        with self._lock:
            return next((m for m in self._mappings if m.name == name), None)

    def wait_until_idle(self, timeout_s: float) -> bool:
        """True once every mapping has caught up with everything written before the call, in the order
        the data flows (the stream first, then the tables' streams it wrote to); False on timeout."""
        deadline = time.monotonic() + timeout_s
        for follower in self._followers:
            follower.discover()
        with self._lock:
            mappings = list(self._mappings)
        # In order, stopping at the first that has not caught up (all() short-circuits).
        return all(m.wait_until_caught_up(max(0.0, deadline - time.monotonic())) for m in mappings)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {m.name: m.snapshot() for m in self._mappings}

    def stop(self) -> None:
        for follower in self._followers:
            follower.stop()
        with self._lock:
            mappings = list(self._mappings)
        for mapping in mappings:
            mapping.stop(self._stop_timeout_s)


class _TableFollower:
    """One mapping per readings table for one function, as tables come and go."""

    def __init__(
        self,
        mappings: StreamMappings,
        function: LocalFunction,
        config: MappingConfig,
        destination: FailureDestination | None,
    ) -> None:
        self._owner = mappings
        self._function = function
        self._config = config
        self._destination = destination
        self._mappings: dict[str, EventSourceMapping] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"{function.name}-tables", daemon=True)
        self._lock = threading.Lock()

    def start(self) -> None:
        self.discover()
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=10)

    def discover(self) -> None:
        owner = self._owner
        with self._lock:
            tables = set(owner._tables())
            for table in sorted(tables - set(self._mappings)):
                arn = owner._dynamodb.describe_table(TableName=table)["Table"].get("LatestStreamArn")
                if arn:
                    self._mappings[table] = owner.add(
                        name=f"{self._function.name}:{table}",
                        source=owner.table_stream(str(arn)),
                        function=self._function,
                        config=self._config,
                        destination=self._destination,
                    )
            for table in sorted(set(self._mappings) - tables):
                # A dropped table's stream ends; its mapping stops and is no longer waited on.
                owner.remove(self._mappings.pop(table))

    def _run(self) -> None:
        while not self._stop.wait(TABLE_DISCOVERY_S):
            try:
                self.discover()
            except Exception:  # a failed look must not end the follower; the next one retries
                _log.exception("looking for readings tables failed")


class LocalLambda:
    """The event source mapping calls of a boto3 Lambda client, on :class:`StreamMappings`."""

    def __init__(
        self,
        mappings: StreamMappings,
        *,
        function_by_arn: Callable[[str], LocalFunction | None],
        destination_for: Callable[[str], FailureDestination | None],
        poll_interval_s: float,
    ) -> None:
        self._mappings = mappings
        self._function_by_arn = function_by_arn
        self._destination_for = destination_for
        self._poll_interval_s = poll_interval_s
        self._entries: dict[str, tuple[dict[str, Any], EventSourceMapping]] = {}
        self._lock = threading.Lock()

    def create_event_source_mapping(self, **request: Any) -> dict[str, Any]:
        operation = "CreateEventSourceMapping"
        function_arn = str(request.get("FunctionName", ""))
        source_arn = str(request.get("EventSourceArn", ""))
        function = self._function_by_arn(function_arn)
        if function is None:
            raise service_error("ResourceNotFoundException", operation, f"Function not found: {function_arn}")
        table = table_of_stream(source_arn)
        if table is None:
            raise service_error("InvalidParameterValueException", operation, f"{source_arn} is not a DynamoDB stream")
        destination_arn = request.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        destination = self._destination_for(str(destination_arn)) if destination_arn else None
        if destination_arn and destination is None:
            raise service_error("InvalidParameterValueException", operation, f"no local destination {destination_arn}")
        with self._lock:
            if any(
                c["FunctionName"] == function_arn and c["EventSourceArn"] == source_arn
                for c, _ in self._entries.values()
            ):
                raise service_error(
                    "ResourceConflictException", operation, f"{source_arn} already feeds {function_arn}"
                )
            mapping = self._mappings.add(
                name=f"{function.name}:{table}",
                source=self._mappings.table_stream(source_arn),
                function=function,
                config=MappingConfig.from_request(request, poll_interval_s=self._poll_interval_s),
                destination=destination,
            )
            configuration = {**request, "UUID": str(uuid.uuid4()), "State": "Enabled", "FunctionArn": function_arn}
            self._entries[configuration["UUID"]] = (configuration, mapping)
            return dict(configuration)

    def get_paginator(self, operation: str) -> Any:
        if operation != "list_event_source_mappings":
            raise NotImplementedError(operation)
        return self

    def paginate(self, *, FunctionName: str) -> Iterator[Mapping[str, Any]]:  # noqa: N803 - boto3's name
        with self._lock:
            found = [dict(c) for c, _ in self._entries.values() if c["FunctionArn"] == FunctionName]
        yield {"EventSourceMappings": found}

    def update_event_source_mapping(self, *, UUID: str, **changes: Any) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            if UUID not in self._entries:
                raise service_error("ResourceNotFoundException", "UpdateEventSourceMapping", f"no mapping {UUID}")
            self._entries[UUID][0].update(changes)
            return dict(self._entries[UUID][0])

    def delete_event_source_mapping(self, *, UUID: str) -> dict[str, Any]:  # noqa: N803
        with self._lock:
            entry = self._entries.pop(UUID, None)
        if entry is None:
            raise service_error("ResourceNotFoundException", "DeleteEventSourceMapping", f"no mapping {UUID}")
        self._mappings.remove(entry[1])
        return {**entry[0], "State": "Deleting"}
