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
from dataclasses import KW_ONLY, dataclass, field, replace
from typing import Any

from local_runtime.event_source_mapping import EventSourceMapping, FailureDestination, MappingConfig
from local_runtime.faults import service_error
from local_runtime.functions import LocalFunction
from local_runtime.stream_sources import DynamoDBStreamSource, KinesisSource, StartingPosition
from rotator.stream_mappings import table_of_stream

_log = logging.getLogger(__name__)

#: How often the readings tables are listed again, to follow new ones' streams.
TABLE_DISCOVERY_S = 5.0


@dataclass(kw_only=True, eq=False)
class StreamMappings:
    """Every event source mapping of the running system, in the order they were added."""

    dynamodb: Any
    table_stream: Callable[[str], DynamoDBStreamSource]  # the source that reads a table's stream, by its ARN
    tables: Callable[[], tuple[str, ...]]
    stop_timeout_s: float
    _mappings: list[EventSourceMapping] = field(default_factory=list, init=False)
    _followers: list[_TableFollower] = field(default_factory=list, init=False)
    _stopping: list[threading.Thread] = field(default_factory=list, init=False)  # removed mappings stopping
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def add(
        self,
        *,
        name: str,
        source: KinesisSource | DynamoDBStreamSource,
        function: LocalFunction,
        config: MappingConfig,
        destination: FailureDestination | None,
    ) -> EventSourceMapping:
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

    def remove(self, mapping: EventSourceMapping) -> None:
        """Forget ``mapping`` and stop it (its stream is gone, or DeleteEventSourceMapping), without
        waiting for the batch under way, as AWS answers a delete ("Deleting") at once: the caller can be
        a function holding the one invocation at a time that batch waits for (the rotator deleting a
        closed table's mapping), and waiting would hold both until the stop's timeout. :meth:`stop`
        waits for it."""
        with self._lock:
            if mapping in self._mappings:
                self._mappings.remove(mapping)
            self._stopping = [t for t in self._stopping if t.is_alive()]
            stopping = threading.Thread(
                target=mapping.stop, args=(self.stop_timeout_s,), name=f"{mapping.name}-stop", daemon=True
            )
            self._stopping.append(stopping)
        stopping.start()

    def follow_tables(
        self, function: LocalFunction, config: MappingConfig, destination: FailureDestination | None = None
    ) -> None:
        """Keep a mapping of every readings table's stream to ``function``, including tables created
        later (looked for every :data:`TABLE_DISCOVERY_S`), from each stream's trim horizon."""
        follower = _TableFollower(
            self, function, replace(config, starting_position=StartingPosition.TRIM_HORIZON), destination
        )
        follower.start()  # started before it is listed: every follower stop() reaches has a thread to join
        with self._lock:
            self._followers.append(follower)

    def named(self, name: str) -> EventSourceMapping | None:
        with self._lock:
            return next((m for m in self._mappings if m.name == name), None)

    def wait_until_idle(self, timeout_s: float, *, flush: bool = False) -> bool:
        """True once every mapping has caught up with everything written before the call, in the order
        the data flows (the stream first, then the tables' streams it wrote to); False on timeout. With
        ``flush``, each one's batching window is cut short (for a caller that has stopped writing: the
        window would gather nothing more)."""
        deadline = time.monotonic() + timeout_s
        for follower in self._followers:
            follower.discover()
        with self._lock:
            mappings = list(self._mappings)
        # In order, stopping at the first that has not caught up (all() short-circuits).
        return all(m.wait_until_caught_up(max(0.0, deadline - time.monotonic()), flush=flush) for m in mappings)

    def snapshot(self) -> dict[str, Any]:
        with self._lock:
            return {m.name: m.snapshot() for m in self._mappings}

    def stop(self) -> None:
        for follower in self._followers:
            follower.stop()
        with self._lock:
            mappings = list(self._mappings)
            stopping = list(self._stopping)
        for mapping in mappings:
            mapping.stop(self.stop_timeout_s)
        for thread in stopping:
            thread.join(self.stop_timeout_s)


@dataclass(eq=False)
class _TableFollower:
    """One mapping per readings table for one function, as tables come and go."""

    owner: StreamMappings
    function: LocalFunction
    config: MappingConfig
    destination: FailureDestination | None
    _mappings: dict[str, EventSourceMapping] = field(default_factory=dict, init=False)
    _stop: threading.Event = field(default_factory=threading.Event, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def start(self) -> None:
        self.discover()
        self._thread = threading.Thread(target=self._run, name=f"{self.function.name}-tables", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=10)

    def discover(self) -> None:
        owner = self.owner
        with self._lock:
            tables = set(owner.tables())
            for table in sorted(tables - set(self._mappings)):
                arn = owner.dynamodb.describe_table(TableName=table)["Table"].get("LatestStreamArn")
                if arn:
                    self._mappings[table] = owner.add(
                        name=f"{self.function.name}:{table}",
                        source=owner.table_stream(str(arn)),
                        function=self.function,
                        config=self.config,
                        destination=self.destination,
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


@dataclass(eq=False)
class LocalLambda:
    """The event source mapping calls of a boto3 Lambda client, on :class:`StreamMappings`."""

    mappings: StreamMappings
    _: KW_ONLY
    function_by_arn: Callable[[str], LocalFunction | None]
    destination_for: Callable[[str], FailureDestination | None]
    poll_interval_s: float
    _entries: dict[str, tuple[dict[str, Any], EventSourceMapping]] = field(default_factory=dict, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    def create_event_source_mapping(self, **request: Any) -> dict[str, Any]:
        operation = "CreateEventSourceMapping"
        function_arn = str(request.get("FunctionName", ""))
        source_arn = str(request.get("EventSourceArn", ""))
        function = self.function_by_arn(function_arn)
        if function is None:
            raise service_error("ResourceNotFoundException", operation, f"Function not found: {function_arn}")
        table = table_of_stream(source_arn)
        if table is None:
            raise service_error("InvalidParameterValueException", operation, f"{source_arn} is not a DynamoDB stream")
        destination_arn = request.get("DestinationConfig", {}).get("OnFailure", {}).get("Destination")
        destination = self.destination_for(str(destination_arn)) if destination_arn else None
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
            mapping = self.mappings.add(
                name=f"{function.name}:{table}",
                source=self.mappings.table_stream(source_arn),
                function=function,
                config=MappingConfig.from_request(request, poll_interval_s=self.poll_interval_s),
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
        self.mappings.remove(entry[1])
        return {**entry[0], "State": "Deleting"}
