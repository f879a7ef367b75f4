"""Reading reject messages defensively, and a redrive that never loses a message (an in-memory queue)."""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Mapping
from typing import Any

import pytest

from doubles.clocks import ManualClock
from ingest.rejects import Reject, reject_message
from producer.publisher import Publisher
from producer.redrive import FieldRename, MessageQueue, RejectMessage, peek, redrive, summarise
from tests.unit.producer.test_publisher import FakeStream

GOOD = {"entity_id": "s-1", "event_id": "e-1", "timestamp": "2026-11-22T06:00:00Z", "measures": {"rh": 1}, "tmp": 2}


class FakeQueue:
    """SQS's receive / visibility / delete semantics, in memory: a received message is hidden
    until it is released or deleted."""

    def __init__(self, bodies: list[str], *, fail_deletes: int = 0) -> None:
        self.messages = {f"m{n}": body for n, body in enumerate(bodies)}
        self.hidden: set[str] = set()
        self.fail_deletes = fail_deletes
        self.receives = 0

    def receive_message(self, **kwargs: Any) -> Mapping[str, Any]:
        self.receives += 1
        assert kwargs["VisibilityTimeout"] > 0 and 1 <= kwargs["MaxNumberOfMessages"] <= 10
        free = [m for m in self.messages if m not in self.hidden][: kwargs["MaxNumberOfMessages"]]
        self.hidden.update(free)
        return {"Messages": [{"MessageId": m, "ReceiptHandle": f"h-{m}", "Body": self.messages[m]} for m in free]}

    def change_message_visibility_batch(self, **kwargs: Any) -> Mapping[str, Any]:
        assert len(kwargs["Entries"]) <= 10
        for entry in kwargs["Entries"]:
            assert entry["VisibilityTimeout"] == 0
            self.hidden.discard(entry["ReceiptHandle"].removeprefix("h-"))
        return {"Successful": [{"Id": e["Id"]} for e in kwargs["Entries"]]}

    def delete_message_batch(self, **kwargs: Any) -> Mapping[str, Any]:
        failed = []
        for entry in kwargs["Entries"]:
            if self.fail_deletes > 0:
                self.fail_deletes -= 1
                failed.append({"Id": entry["Id"], "Code": "InternalError", "SenderFault": False})
                continue
            message = entry["ReceiptHandle"].removeprefix("h-")
            del self.messages[message]
            self.hidden.discard(message)
        return {"Failed": failed}

    def get_queue_attributes(self, **kwargs: Any) -> Mapping[str, Any]:
        return {"Attributes": {"ApproximateNumberOfMessages": str(len(self.messages))}}


def body(
    payload: bytes, *, field: str = "tmp", reason: str = "is not a reading field", limit: int = 65_536, index: int = 0
) -> str:
    reject = Reject(payload, field, reason, "shardId-000000000000", "4959", index=index)
    return reject_message(reject, payload_limit=limit, rejected_at_ms=1_795_000_000_000)[0]


def publisher(stream: FakeStream, **kwargs: Any) -> Publisher:
    clock = ManualClock(0.0)
    return Publisher(stream, "readings", clock=clock, sleep=clock.sleep, rng=random.Random(1), **kwargs)


def test_messages_are_read_whatever_the_payload_and_extra_fields() -> None:
    text = RejectMessage.parse({"MessageId": "1", "ReceiptHandle": "h", "Body": body(json.dumps(GOOD).encode())})
    assert json.loads(text.payload_text()) == GOOD and text.why_not_redrivable() is None
    binary = RejectMessage.parse({"MessageId": "2", "ReceiptHandle": "h", "Body": body(b"\xff\x00bin", field="data")})
    assert binary.payload == b"\xff\x00bin" and binary.payload_text() == repr(b"\xff\x00bin")
    cut = RejectMessage.parse({"MessageId": "3", "ReceiptHandle": "h", "Body": body(b"x" * 500, limit=100)})
    assert cut.payload_truncated and "truncated" in str(cut.why_not_redrivable())
    # A body with fields this reader does not know (the format may grow) is still read
    grown = json.loads(body(json.dumps(GOOD).encode()))
    grown.update({"version": 2, "payload_escaping": "json", "new": {"x": 1}})
    assert RejectMessage.parse({"MessageId": "4", "Body": json.dumps(grown)}).why_not_redrivable() is None
    unreadable = RejectMessage.parse({"MessageId": "5", "Body": "<not json>"})
    assert unreadable.why_not_redrivable() == "the body is not a JSON object"
    bad64 = RejectMessage.parse({"MessageId": "6", "Body": json.dumps({"payload_base64": "@@@", "reason": "r"})})
    assert bad64.why_not_redrivable() == "payload_base64 is not valid base64"
    closed = RejectMessage.parse(
        {
            "MessageId": "7",
            "Body": body(
                b"{}", field="timestamp", reason="period 2026-11-21 closed at ...; its table no longer takes writes"
            ),
        }
    )
    assert "period is closed" in str(closed.why_not_redrivable())
    assert closed.why_not_redrivable(include_closed=True) is None


def test_peek_leaves_every_message_in_the_queue_and_summarises() -> None:
    bodies = [body(json.dumps(GOOD).encode()) for _ in range(12)] + [body(b"{}", field="measures.t", reason="bad")]
    sqs = FakeQueue(bodies)
    queue = MessageQueue(sqs, "q", RejectMessage.parse)
    seen = peek(queue, 100)
    assert len(seen) == 13 and not sqs.hidden and len(sqs.messages) == 13
    summary = summarise(seen)
    assert summary["by_field"] == {"tmp": 12, "measures.t": 1} and summary["messages"] == 13
    assert summary["by_reason"][0] == {"field": "tmp", "reason": "is not a reading field", "count": 12}
    assert len(peek(queue, 5)) == 5 and queue.approximate_count() == 13


def test_renames_reach_into_objects_and_refuse_bad_specs() -> None:
    reading = {"tmp": 1, "measures": {"rh": 2}, "dims": 3}
    assert FieldRename.parse("tmp=measures.temp").apply(reading)
    assert not FieldRename.parse("absent=measures.x").apply(reading)
    assert not FieldRename.parse("dims=measures.rh.deep").apply(reading)  # rh is a number: left alone
    assert reading == {"measures": {"rh": 2, "temp": 1}, "dims": 3}
    with pytest.raises(ValueError, match="OLD=NEW"):
        FieldRename.parse("tmp")


def test_a_redrive_deletes_only_what_kinesis_accepted_and_keeps_the_rest() -> None:
    readings = [{**GOOD, "event_id": f"e-{n}"} for n in range(6)]
    bodies = [body(json.dumps(r).encode(), index=n) for n, r in enumerate(readings)]
    bodies.append(body(json.dumps({**GOOD, "measures": {"rh": "x"}}).encode()))  # still invalid after the rename
    bodies.append(body(b"{" * 300, limit=100))  # truncated
    sqs = FakeQueue(bodies, fail_deletes=1)
    stream = FakeStream(refuse={"g-refused"}, times=100)
    keys = iter(["g"] * 2 + ["g-refused"] + ["g"] * 3)
    report = redrive(
        MessageQueue(sqs, "q", RejectMessage.parse),
        publisher(stream, max_attempts=2),
        renames=[FieldRename.parse("tmp=measures.temp")],
        partition_key=lambda entity: next(keys),
    )
    # One refused by Kinesis, one delete failed, one invalid, one truncated: kept; four sent and deleted
    assert len(report.sent) == 4 and len(report.kept) == 4
    assert len(sqs.messages) == 4 and not sqs.hidden  # every kept message is visible again at once
    assert sorted(json.loads(d)["event_id"] for d in stream.stored) == ["e-0", "e-1", "e-3", "e-4", "e-5"]
    assert all(json.loads(d)["measures"]["temp"] == 2 for d in stream.stored)
    assert sum("did not delete" in why for why in (why for _, why in report.kept)) == 1
    assert sum("Kinesis did not accept" in why for why in (why for _, why in report.kept)) == 1


def test_a_dry_run_sends_and_deletes_nothing_and_a_crash_releases_everything() -> None:
    sqs = FakeQueue([body(json.dumps(GOOD).encode()) for _ in range(3)])
    report = redrive(
        MessageQueue(sqs, "q", RejectMessage.parse), None, dry_run=True, renames=[FieldRename.parse("tmp=measures.tmp")]
    )
    assert len(report.sent) == 3 and report.readings[0]["measures"] == {"rh": 1, "tmp": 2}
    assert len(sqs.messages) == 3 and not sqs.hidden

    class Broken:
        def put_records(self, **kwargs: Any) -> Mapping[str, Any]:
            raise RuntimeError("network gone")

    with pytest.raises(RuntimeError):
        redrive(
            MessageQueue(sqs, "q", RejectMessage.parse),
            publisher(Broken()),
            renames=[FieldRename.parse("tmp=measures.tmp")],
        )  # type: ignore[arg-type]
    assert len(sqs.messages) == 3 and not sqs.hidden
    with pytest.raises(ValueError, match="publisher"):
        redrive(MessageQueue(sqs, "q", RejectMessage.parse), None)


def test_a_base64_payload_is_redriven_when_it_is_a_reading() -> None:
    reading = {**GOOD, "measures": {"rh": 1}}
    reading.pop("tmp")
    encoded = base64.b64encode(json.dumps(reading).encode()).decode()
    raw = json.dumps({"reject_id": "r", "field": "data", "reason": "x", "payload": None, "payload_base64": encoded})
    sqs = FakeQueue([raw, json.dumps({"reject_id": "n", "payload": "[1, 2]"})])
    stream = FakeStream()
    report = redrive(MessageQueue(sqs, "q", RejectMessage.parse), publisher(stream))
    assert [m.reject_id for m in report.sent] == ["r"] and json.loads(stream.stored[0]) == reading
    assert [(m.reject_id, why) for m, why in report.kept] == [
        ("n", "element 0: the payload is not a reading (a JSON object)")
    ]
    assert list(sqs.messages) == ["m1"]


def test_a_fold_of_many_readings_is_redriven_as_one_record_once_every_reading_is_valid() -> None:
    # Given ingest's fold: one message whose payload is an array of the record's invalid readings
    readings = [{**GOOD, "event_id": f"f-{n}"} for n in range(30)]
    fold = Reject(
        json.dumps(readings).encode(), "tmp", "is not a reading field", "shardId-0", "4959", readings=30, fold=25
    )
    bad_fold = Reject(
        json.dumps([*readings[:2], {"entity_id": "x"}]).encode(), "tmp", "x", "shardId-0", "4960", readings=3, fold=25
    )
    sqs = FakeQueue([reject_message(r, payload_limit=65_536, rejected_at_ms=0)[0] for r in (fold, bad_fold)])
    stream = FakeStream()
    # When it is redriven with the fix-up
    report = redrive(
        MessageQueue(sqs, "q", RejectMessage.parse), publisher(stream), renames=[FieldRename.parse("tmp=measures.tmp")]
    )
    # Then the valid fold goes back as one record of 30 readings; the other is kept, naming its bad element
    assert len(report.sent) == 1 and len(report.readings) == 30
    (record,) = stream.stored
    assert [r["event_id"] for r in json.loads(record)] == [f"f-{n}" for n in range(30)]
    assert [why for _, why in report.kept] == ["element 2: still invalid after the fix-ups: timestamp: is required"]
    assert len(sqs.messages) == 1 and not sqs.hidden
