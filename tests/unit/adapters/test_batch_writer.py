"""The batch writer against in-memory fakes and botocore's Stubber (no network)."""

from __future__ import annotations

import base64
import json
import random
import threading
from decimal import Decimal
from typing import Any

import boto3
import pytest
from botocore.awsrequest import AWSResponse
from botocore.config import Config
from botocore.exceptions import EndpointConnectionError
from botocore.stub import Stubber

from adapters import batch_writer
from adapters.batch_writer import (
    BatchWriter,
    PendingWrite,
    UnstorableValue,
    number_text,
    plan_chunks,
    send_prebuilt_json,
    serialize_item,
)
from adapters.retry import Backoff, Deadline
from doubles.clocks import ManualClock
from doubles.memory_dynamo import MemoryDynamo
from local_runtime.faults import FaultInjectingDynamoDB, FaultPlan, service_error


def _writes(count: int, table: str = "readings", prefix: str = "e") -> list[PendingWrite]:
    return [
        PendingWrite(
            table,
            f"0001#{prefix}",
            f"{prefix}#{i:05d}",
            {"pk": {"S": f"0001#{prefix}"}, "sk": {"S": f"{prefix}#{i:05d}"}},
        )
        for i in range(count)
    ]


def _writer(api: Any, clock: ManualClock[float], concurrency: int = 4) -> BatchWriter:
    return BatchWriter(api, concurrency=concurrency, clock=clock, sleep=clock.sleep, rng=random.Random(1))


# -- serialisation --------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (0, "0"),
        (-17, "-17"),
        (21.5, "21.5"),
        (1e-7, "1E-7"),
        (1e30, "1E+30"),
        (0.1 + 0.2, "0.30000000000000004"),
        (10**50, "1E+50"),
        (Decimal("1.50"), "1.5"),
    ],
)
def test_numbers_are_written_as_dynamodb_number_text(value: Any, text: str) -> None:
    assert number_text(value) == text
    assert Decimal(text) == Decimal(repr(value) if isinstance(value, float) else value)


def test_a_number_dynamodb_cannot_hold_is_refused_per_item() -> None:
    with pytest.raises(UnstorableValue) as caught:
        serialize_item({"m": {"x": 12345678901234567890123456789012345678901}})
    assert caught.value.path == "m.x"
    with pytest.raises(UnstorableValue):
        number_text(Decimal("NaN"))


@pytest.mark.parametrize("value", [1e126, -1e126, 10**126, 9.999999999999999e-131, Decimal("1E-131")])
def test_a_number_past_dynamodb_range_is_refused(value: Any) -> None:
    with pytest.raises(UnstorableValue, match="outside DynamoDB's number range"):
        number_text(value)
    assert number_text(9.999999999999998e125) == "9.999999999999998E+125"
    assert number_text(-1e-130) == "-1E-130"


def test_items_serialise_to_the_low_level_form() -> None:
    item = {"pk": "a", "n": 3, "m": {"t": 1.5}, "ok": True, "nothing": None, "l": ["x", 2], "b": b"\x00\xff"}
    assert serialize_item(item) == {
        "pk": {"S": "a"},
        "n": {"N": "3"},
        "m": {"M": {"t": {"N": "1.5"}}},
        "ok": {"BOOL": True},
        "nothing": {"NULL": True},
        "l": {"L": [{"S": "x"}, {"N": "2"}]},
        "b": {"B": b"\x00\xff"},
    }
    with pytest.raises(UnstorableValue, match="has type set"):
        serialize_item({"s": {1, 2}})


# -- chunking -------------------------------------------------------------------


def test_chunks_hold_at_most_25_items_of_one_table() -> None:
    writes = _writes(60, "readings-b") + _writes(30, "readings-a")
    chunks = plan_chunks(writes)
    assert [len(c) for c in chunks] == [25, 5, 25, 25, 10]
    for chunk in chunks:
        assert len({writes[i].table for i in chunk}) == 1
    assert sorted(i for c in chunks for i in c) == list(range(90))


def test_duplicate_keys_are_refused_before_any_call() -> None:
    api = MemoryDynamo(tables={"readings"}, record_calls=True)
    writer = _writer(api, ManualClock(0.0))
    with pytest.raises(ValueError, match="duplicate keys"):
        writer.write(_writes(2) + _writes(1), Deadline.never())
    assert api.calls == []


# -- outcomes -------------------------------------------------------------------


def test_every_item_is_written_with_one_call_per_25() -> None:
    api = MemoryDynamo(tables={"readings"}, record_calls=True)
    report = _writer(api, ManualClock(0.0)).write(_writes(1000), Deadline.never())
    assert report.written == set(range(1000))
    assert report.calls == 40 == len(api.calls)
    assert report.consumed_wcu == 1000.0
    assert len(api.items()) == 1000


def test_unprocessed_items_are_retried_with_full_jitter_backoff() -> None:
    clock = ManualClock(0.0)
    api = FaultInjectingDynamoDB(
        MemoryDynamo(tables={"readings"}), FaultPlan(partial_first=3, partial_fraction=0.6, seed=2)
    )
    report = _writer(api, clock, concurrency=1).write(_writes(25), Deadline.after_ms(30_000, clock))
    assert report.written == set(range(25)) and not report.unwritten
    assert report.calls == 4
    assert report.items_retried == api.counters.held_back
    # full jitter: the n-th retry waits somewhere in [0, 50ms * 2^(n-1)]
    assert [s <= 0.05 * 2**n for n, s in enumerate(clock.sleeps)] == [True] * 3


def test_throttling_until_the_deadline_hands_the_items_back_without_overrunning() -> None:
    clock = ManualClock(0.0)
    api = FaultInjectingDynamoDB(MemoryDynamo(tables={"readings"}), FaultPlan(throttle_rate=1.0))
    deadline = Deadline.after_ms(3_000, clock)
    report = _writer(api, clock, concurrency=1).write(_writes(40), deadline)
    assert report.written == set()
    assert set(report.unwritten) == set(range(40))
    assert all("ProvisionedThroughputExceededException" in r and "time budget" in r for r in report.unwritten.values())
    assert clock() <= deadline.at
    assert report.throttled_calls == report.calls == api.counters.calls


@pytest.mark.parametrize("code", ["ThrottlingException", "RequestLimitExceeded", "InternalServerError"])
def test_transient_errors_are_retried(code: str) -> None:
    clock = ManualClock(0.0)
    api = FaultInjectingDynamoDB(MemoryDynamo(tables={"readings"}), FaultPlan(throttle_first=2, throttle_code=code))
    report = _writer(api, clock, concurrency=1).write(_writes(10), Deadline.after_ms(10_000, clock))
    assert report.written == set(range(10))
    assert report.calls == 3


def test_a_5xx_and_a_dropped_connection_are_retried() -> None:
    clock = ManualClock(0.0)
    inner = MemoryDynamo(tables={"readings"})
    failures: list[Exception] = [
        service_error("SomethingNew", "BatchWriteItem", status=503),
        EndpointConnectionError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com"),
    ]

    class Flaky:
        def batch_write_item(self, **kwargs: Any) -> Any:
            if failures:
                raise failures.pop(0)
            return inner.batch_write_item(**kwargs)

    report = _writer(Flaky(), clock, concurrency=1).write(_writes(3), Deadline.after_ms(10_000, clock))
    assert report.written == {0, 1, 2}
    assert report.calls == 3


def test_a_missing_table_is_handed_back_at_once_not_retried() -> None:
    api = MemoryDynamo(tables={"readings"})
    report = _writer(api, ManualClock(0.0)).write(_writes(5, "readings-2026-11-21"), Deadline.never())
    assert set(report.unwritten) == set(range(5))
    assert "ResourceNotFoundException" in report.unwritten[0]
    assert report.calls == 1


def test_one_item_dynamodb_refuses_is_isolated_and_its_neighbours_written() -> None:
    api = MemoryDynamo(tables={"readings"}, refuse=lambda item: "bad item" if item["sk"]["S"] == "e#00007" else None)
    report = _writer(api, ManualClock(0.0), concurrency=2).write(_writes(30), Deadline.never())
    assert report.rejected == {7: "DynamoDB refused the item: bad item"}
    assert report.written == set(range(30)) - {7}
    assert len(api.items()) == 29


def test_an_unexpected_exception_hands_the_items_back() -> None:
    class Broken:
        def batch_write_item(self, **kwargs: Any) -> Any:
            raise RuntimeError("boom")

    report = _writer(Broken(), ManualClock(0.0)).write(_writes(3), Deadline.never())
    assert report.unwritten == dict.fromkeys(range(3), "unexpected RuntimeError: boom")


def test_an_expired_deadline_makes_no_call() -> None:
    clock = ManualClock(0.0)
    api = MemoryDynamo(tables={"readings"}, record_calls=True)
    report = _writer(api, clock).write(_writes(30), Deadline.after_ms(0, clock))
    assert api.calls == [] and set(report.unwritten) == set(range(30))


def test_chunks_are_in_flight_at_the_same_time() -> None:
    # Four chunks meet at a barrier: a writer running them one by one would time out here.
    barrier = threading.Barrier(4, timeout=5)
    inner = MemoryDynamo(tables={"readings"})

    class Meeting:
        def batch_write_item(self, **kwargs: Any) -> Any:
            barrier.wait()
            return inner.batch_write_item(**kwargs)

    report = BatchWriter(Meeting(), concurrency=4).write(_writes(100), Deadline.never())
    assert report.written == set(range(100))


@pytest.mark.parametrize("prebuilt", [False, True], ids=["botocore's serializer", "prebuilt JSON"])
def test_with_botocore_stubber_on_a_real_client(prebuilt: bool) -> None:
    # Given the real client answering UnprocessedItems once, then accepting the rest, for blocks
    # whose payloads are bytes (sent as they are, or through the prebuilt JSON the ingest client uses)
    dynamodb = boto3.client(
        "dynamodb",
        region_name="eu-west-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(parameter_validation=not prebuilt),
    )
    if prebuilt:
        send_prebuilt_json(dynamodb)
    writes = [
        PendingWrite(w.table, w.pk, w.sk, {**w.item, "b": {"B": bytes([i, 0, 255]) * 50}})
        for i, w in enumerate(_writes(3))
    ]
    clock = ManualClock(0.0)
    with Stubber(dynamodb) as stub:
        stub.add_response(
            "batch_write_item",
            {"UnprocessedItems": {"readings": [{"PutRequest": {"Item": writes[1].item}}]}},
            {
                "RequestItems": {"readings": [{"PutRequest": {"Item": w.item}} for w in writes]},
                "ReturnConsumedCapacity": "TOTAL",
            },
        )
        stub.add_response(
            "batch_write_item",
            {"UnprocessedItems": {}},
            {
                "RequestItems": {"readings": [{"PutRequest": {"Item": writes[1].item}}]},
                "ReturnConsumedCapacity": "TOTAL",
            },
        )
        report = _writer(dynamodb, clock, concurrency=1).write(writes, Deadline.after_ms(5_000, clock))
        stub.assert_no_pending_responses()
    assert report.written == {0, 1, 2} and report.items_retried == 1


def test_backoff_ceilings_double_up_to_the_cap() -> None:
    backoff = Backoff(base_ms=50, max_delay_ms=1_000)
    assert [backoff.ceiling_s(n) for n in range(1, 8)] == [0.05, 0.1, 0.2, 0.4, 0.8, 1.0, 1.0]
    rng = random.Random(0)
    assert all(0 <= backoff.delay_s(5, rng) <= 0.8 for _ in range(200))


def _capturing_client(*, validate: bool) -> tuple[Any, list[bytes]]:
    """A real client whose requests are captured before they would be sent, and answered at once."""
    dynamodb = boto3.client(
        "dynamodb",
        region_name="eu-west-1",
        aws_access_key_id="x",
        aws_secret_access_key="x",
        config=Config(parameter_validation=validate, retries={"mode": "standard", "max_attempts": 1}),
    )
    bodies: list[bytes] = []

    class _Raw:
        def stream(self, **_: Any) -> Any:
            yield b'{"UnprocessedItems":{}}'

    def answer(request: Any, **_: Any) -> AWSResponse:
        bodies.append(request.body)
        return AWSResponse(request.url, 200, {}, _Raw())

    dynamodb.meta.events.register("before-send.dynamodb.BatchWriteItem", answer)
    if not validate:
        send_prebuilt_json(dynamodb)
    return dynamodb, bodies


def _serialized_by_botocore(client: Any) -> list[bytes]:
    """The bodies botocore's serializer made, before any handler of ``before-call`` ran."""
    bodies: list[bytes] = []
    client.meta.events.register_first(
        "before-call.dynamodb.BatchWriteItem", lambda params, **_: bodies.append(params["body"])
    )
    return bodies


def test_a_client_without_validation_sends_the_same_json_without_botocores_serializer() -> None:
    # Given items with hostile text (a lone surrogate, non-ASCII, JSON syntax) and binary payloads
    # (every byte value, and an empty one) in two tables
    payload = bytes(range(256)) * 3
    item = serialize_item({"pk": "p", "sk": 'é"\\\udc80', "m": {"t": 1.5, "l": [None, True, "x"]}, "b": payload})
    writes = [
        PendingWrite("a-table", "p", "0", {**item, "sk": {"S": "0"}, "b": {"B": b""}}),
        PendingWrite("b-table", "p", "1", item),
    ]
    # When the writer sends them on a client that skips validation (sending prebuilt JSON), and one that validates
    fast, fast_bodies = _capturing_client(validate=False)
    slow, slow_bodies = _capturing_client(validate=True)
    fast_serialized, slow_serialized = _serialized_by_botocore(fast), _serialized_by_botocore(slow)
    for client in (fast, slow):
        report = _writer(client, ManualClock(0.0), concurrency=1).write(
            writes, Deadline.after_ms(5_000, ManualClock(0.0))
        )
        assert report.written == {0, 1}
    # Then the shortcut applies to the first only, and both bodies say the same
    assert [json.loads(b) for b in fast_bodies] == [json.loads(b) for b in slow_bodies]
    sent = json.loads(fast_bodies[1])["RequestItems"]["b-table"][0]["PutRequest"]["Item"]
    assert sent["sk"]["S"] == 'é"\\\udc80'
    assert base64.b64decode(sent["b"]["B"], validate=True) == payload  # the JSON protocol's blob: base64 text
    assert json.loads(fast_serialized[0])["RequestItems"] == {"a-table": []}  # botocore walked no item
    assert slow_serialized == slow_bodies
    # A parameter JSON cannot write is left to botocore (which refuses it here: not a valid type)
    context: dict[str, Any] = {}
    params: dict[str, Any] = {"RequestItems": {"t": [{"PutRequest": {"Item": {"n": {"N": Decimal(1)}}}}]}}
    batch_writer._stash_body(params, context)
    assert context == {} and params["RequestItems"]["t"][0]["PutRequest"]["Item"]["n"]["N"] == Decimal(1)
