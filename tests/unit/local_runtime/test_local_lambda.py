"""The rotator's stream mappings in local mode: its Lambda calls start pollers on tables' streams, with its settings."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.config import Context
from local_runtime.event_source_mapping import MappingConfig
from local_runtime.mappings import LocalLambda, StreamMappings
from local_runtime.stream_sources import StartingPosition
from rotator.settings import RotatorSettings
from rotator.specs import create_mapping_request
from rotator.stream_mappings import LambdaMappings, table_of_stream

HOTKEYS_ARN = "arn:aws:lambda:eu-west-1:123456789012:function:TimeSeriesIngest-hotkeys"
QUEUE_ARN = "arn:aws:sqs:eu-west-1:123456789012:TimeSeriesIngest-hotkeys-failures"
STREAM_ARN = (
    "arn:aws:dynamodb:eu-west-1:123456789012:table/timeseries-readings-2026-11-22/stream/2026-11-22T00:00:00.000"
)
SETTINGS = RotatorSettings.from_env(
    {
        "LAYOUT": "hybrid",
        "SHARDS": "8",
        "TABLE_PREFIX": "timeseries-readings",
        "TABLE_PERIOD": "day",
        "HOTKEYS_FUNCTION_ARN": HOTKEYS_ARN,
        "HOTKEYS_BATCH_SIZE": "500",
        "HOTKEYS_BATCHING_WINDOW_S": "2",
        "HOTKEYS_MAX_RETRIES": "7",
        "HOTKEYS_MAX_RECORD_AGE_S": "900",
        "HOTKEYS_ON_FAILURE_ARN": QUEUE_ARN,
    }
)


@dataclass
class FakeFunction:
    name: str = "TimeSeriesIngest-hotkeys"


@dataclass
class FakeMappings:
    """What LocalLambda uses of StreamMappings: starting and stopping pollers."""

    added: list[dict[str, Any]] = field(default_factory=list)
    removed: list[Any] = field(default_factory=list)

    def table_stream(self, stream_arn: str) -> str:
        return f"stream {stream_arn}"

    def add(self, **kwargs: Any) -> Mapping[str, Any]:
        self.added.append(kwargs)
        return kwargs

    def remove(self, mapping: Any) -> None:
        self.removed.append(mapping)


def mappings(system: FakeMappings) -> LambdaMappings:
    """The rotator's own adapter on the local Lambda API: what the rotator sees locally."""
    local = LocalLambda(
        system,  # type: ignore[arg-type]
        function_by_arn=lambda arn: FakeFunction() if arn == HOTKEYS_ARN else None,  # type: ignore[arg-type,return-value]
        destination_for={QUEUE_ARN: "queue"}.get,  # type: ignore[arg-type]
        poll_interval_s=0.1,
    )
    return LambdaMappings(local)


def test_a_created_mapping_polls_the_stream_with_the_requests_settings() -> None:
    # Given the request the rotator makes for a new table's stream
    system = FakeMappings()
    api = mappings(system)
    created = api.create(create_mapping_request(SETTINGS, STREAM_ARN))
    # Then a poller runs with exactly those settings, failures to the named queue
    assert created is not None and created.state == "Enabled"
    assert table_of_stream(created.source_arn) == "timeseries-readings-2026-11-22"
    (added,) = system.added
    assert added["name"] == "TimeSeriesIngest-hotkeys:timeseries-readings-2026-11-22"
    assert added["destination"] == "queue"
    config: MappingConfig = added["config"]
    assert (config.batch_size, config.batching_window_s, config.max_retries, config.max_record_age_s) == (
        500,
        2,
        7,
        900,
    )
    assert config.bisect_on_error and config.report_batch_item_failures
    assert config.starting_position is StartingPosition.TRIM_HORIZON and config.poll_interval_s == 0.1
    # And listing shows it with its settings, so the rotator sees no drift
    (listed,) = api.list(HOTKEYS_ARN)
    assert listed.uuid == created.uuid and listed.config["BatchSize"] == 500
    assert api.list("arn:aws:lambda:eu-west-1:123456789012:function:other") == []


def test_a_second_mapping_of_the_same_stream_is_a_conflict_answered_as_already_there() -> None:
    system = FakeMappings()
    api = mappings(system)
    request = create_mapping_request(SETTINGS, STREAM_ARN)
    assert api.create(request) is not None
    assert api.create(request) is None
    assert len(system.added) == 1


def test_update_records_the_settings_and_delete_stops_the_poller() -> None:
    system = FakeMappings()
    api = mappings(system)
    created = api.create(create_mapping_request(SETTINGS, STREAM_ARN))
    assert created is not None
    api.update(created.uuid, {"BatchSize": 100})
    assert api.list(HOTKEYS_ARN)[0].config["BatchSize"] == 100
    assert api.delete(created.uuid) is True
    assert system.removed == [system.added[0]]
    assert api.delete(created.uuid) is False
    with pytest.raises(ClientError, match="ResourceNotFoundException"):
        api.update(created.uuid, {})


@pytest.mark.parametrize(
    ("change", "code"),
    [
        ({"FunctionName": "arn:aws:lambda:eu-west-1:123456789012:function:missing"}, "ResourceNotFoundException"),
        ({"EventSourceArn": "arn:aws:kinesis:eu-west-1:123456789012:stream/x"}, "InvalidParameterValueException"),
        (
            {"DestinationConfig": {"OnFailure": {"Destination": "arn:aws:sqs:eu-west-1:1:nope"}}},
            "InvalidParameterValue",
        ),
    ],
)
def test_what_lambda_would_refuse_is_refused_the_same_way(change: dict[str, Any], code: str) -> None:
    api = mappings(FakeMappings())
    with pytest.raises(ClientError, match=code):
        api.create({**create_mapping_request(SETTINGS, STREAM_ARN), **change})


def test_the_hot_key_mapping_takes_the_stacks_settings() -> None:
    config = Context.parse({"hotkeys_batch_size": 250, "hotkeys_max_retries": 3, "hotkeys_batching_window_s": 0})
    mapping = MappingConfig.for_stream(config, "hotkeys", poll_interval_s=0.05)
    assert (mapping.batch_size, mapping.max_retries, mapping.batching_window_s) == (250, 3, 0.0)
    assert mapping.max_record_age_s == config.hotkeys_max_record_age_s
    assert mapping.bisect_on_error and mapping.report_batch_item_failures and mapping.poll_interval_s == 0.05


@dataclass
class BlockedMapping:
    """A mapping whose poller is in a batch that waits for what the deleting caller holds (the one
    invocation at a time): its stop returns only once ``released`` is set."""

    name: str = "TimeSeriesIngest-hotkeys:timeseries-readings-2026-11-22"
    released: threading.Event = field(default_factory=threading.Event)
    stopped: threading.Event = field(default_factory=threading.Event)

    def stop(self, timeout_s: float) -> None:
        self.released.wait(timeout_s)
        self.stopped.set()


def test_a_deleted_mapping_is_forgotten_at_once_and_stopped_without_holding_the_caller() -> None:
    # Given a running mapping whose batch under way waits for what the caller of the delete holds
    # (the rotator, inside its invocation, deleting the mapping of a table that closed)
    mappings = StreamMappings(dynamodb=None, table_stream=lambda arn: None, tables=tuple, stop_timeout_s=60.0)  # type: ignore[arg-type,return-value]
    blocked = BlockedMapping()
    mappings._mappings.append(blocked)  # type: ignore[arg-type]

    # When it is removed
    mappings.remove(blocked)  # type: ignore[arg-type]

    # Then the delete returns while the batch is still under way (as AWS answers "Deleting" at once),
    # and waiting for the system to go idle no longer waits for that mapping
    assert not blocked.stopped.is_set()
    assert mappings.snapshot() == {}
    # And stopping the system waits for the removed mapping's stop to finish
    blocked.released.set()
    mappings.stop()
    assert blocked.stopped.is_set()
