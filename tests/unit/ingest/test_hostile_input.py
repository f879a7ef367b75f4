"""Hostile producers: whatever bytes a record holds, ingest does not raise for them.

Each reading ends written, rejected (with a reason, on a message SQS accepts)
or handed back, and handed back only for a transient fault. The rules of SQS
are checked by the fake's own oracle (``doubles.memory_sqs.sqs_refusal``), written from
SQS's documentation: moto checks neither the character set nor the size.
"""

from __future__ import annotations

import json
import random
from decimal import Decimal
from typing import Any

import pytest
from aws_lambda_powertools.utilities.batch import BatchProcessor, EventType, process_partial_response
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from doubles.clocks import ManualClock
from doubles.lambda_context import FakeLambdaContext
from doubles.memory_dynamo import MemoryDynamo
from doubles.memory_sqs import MemorySQS, sqs_refusal
from ingest.logic import BatchOutcome
from keydesign import Reading, blocks, layouts
from local_runtime.faults import FaultInjectingDynamoDB, FaultPlan, service_error
from tests.unit.ingest.kinesis_events import as_json, kinesis_event, parsed, reading
from tests.unit.ingest.kpl import aggregate
from tests.unit.ingest.stored import stored_readings
from tests.unit.ingest.test_logic import NOW, _ingestor

PROCESSOR = BatchProcessor(event_type=EventType.KinesisDataStreams, raise_on_entire_batch_failure=False)


class FlakySQS(MemorySQS):
    """Fails a share of SendMessageBatch calls, and of entries, the way SQS does when it is unwell."""

    def __init__(self, rate: float, seed: int) -> None:
        super().__init__()
        self._rate = rate
        self._rng = random.Random(seed)

    def send_message_batch(self, **kwargs: Any) -> Any:
        if self._rng.random() < self._rate:
            raise service_error("ServiceUnavailable", "SendMessageBatch")
        return super().send_message_batch(**kwargs)


def handle(ingestor: Any, event: dict[str, Any], remaining_ms: int = 60_000) -> tuple[BatchOutcome, list[str]]:
    """What ``ingest.handler.handler`` does, around the given ingestor: ingest, then Powertools' settle."""
    outcome = ingestor.ingest(parsed(event), remaining_ms)
    response = process_partial_response(
        event=event, record_handler=outcome.settle, processor=PROCESSOR, context=FakeLambdaContext()
    )
    return outcome, [f["itemIdentifier"] for f in response["batchItemFailures"]]


# -- what a hostile producer sends ------------------------------------------------------------

# Any character at all, lone surrogates and control characters included.
_any_text = st.text(st.characters(codec=None, categories=None), max_size=12) | st.lists(
    st.integers(0xD800, 0xDFFF).map(chr) | st.sampled_from(["\x00", "\x01", "\x7f", "\ufffe", "#", "~", "é"]),
    max_size=4,
).map("".join)


def _string_literal(text: str, ascii_only: bool) -> str:
    # A lone surrogate can only travel as a \u escape: it is not UTF-8.
    return json.dumps(text, ensure_ascii=ascii_only or any(0xD800 <= ord(c) <= 0xDFFF for c in text))


string_literal = st.builds(_string_literal, _any_text, st.booleans())
number_literal = st.one_of(
    st.integers(-(10**40), 10**40).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        [
            "1e-400",
            "-1e-400",
            "0.000000000000000000000000000000000000000000000000000000000000000000000001e-300",
            "1e400",
            "-1E+999",
            "1e-131",
            "9.9999999999999999999999999999999999999e125",
            "0",
            "-0.0",
            "0e-999",
            "NaN",
            "Infinity",
            "-Infinity",
        ]
    ),
    st.integers(1, 6_000).map(lambda n: "9" * n),  # past Python's 4,300-digit int-from-text limit
    st.integers(1, 400).map(lambda n: "0." + "0" * n + "1"),  # underflows without an exponent
    # around where a double underflows to zero (~2.5e-324): zeros and a two-digit exponent
    st.builds(lambda k, e: f"0.{'0' * k}1e-{e}", st.integers(150, 330), st.integers(0, 99)),
    st.sampled_from(["1e-0400", "2e-324", "5e-324", "2.4E-324", "1e-323"]),
)
timestamp_literal = st.one_of(
    st.integers(NOW - 3_600_000, NOW).map(str),
    st.just(json.dumps("2026-11-18T12:00:00.000Z")),
    number_literal,
    string_literal,
)


@st.composite
def reading_text(draw: st.DrawFn) -> str:
    """A reading written as JSON text, each slot valid or hostile."""
    entity = draw(st.one_of(st.just('"sensor-1"'), st.just('"s#1"'), string_literal, number_literal))
    fields = [f'"entity_id":{entity}', f'"timestamp":{draw(timestamp_literal)}']
    measures = draw(
        st.lists(st.tuples(st.one_of(st.just('"temp"'), string_literal), number_literal), min_size=0, max_size=3)
    )
    fields.append('"measures":{' + ",".join(f"{name}:{value}" for name, value in measures) + "}")
    if draw(st.booleans()):
        dims = draw(st.lists(st.tuples(st.one_of(st.just('"site"'), string_literal), string_literal), max_size=2))
        fields.append('"dimensions":{' + ",".join(f"{name}:{value}" for name, value in dims) + "}")
    if draw(st.booleans()):
        fields.append(f"{draw(string_literal)}:{draw(st.one_of(string_literal, number_literal))}")
    return "{" + ",".join(draw(st.permutations(fields))) + "}"


def _good(n: int) -> str:
    return json.dumps(reading(f"sensor-{n}", NOW - 1_000 - n, f"good-{n}", temp=n))


json_text = st.one_of(
    reading_text(),
    st.integers(0, 50).map(_good),
    st.lists(st.one_of(reading_text(), st.integers(0, 50).map(_good), string_literal, number_literal), max_size=6).map(
        lambda items: "[" + ",".join(items) + "]"
    ),
    st.integers(1, 5_000).map(lambda depth: "[" * depth + "]" * depth),  # nesting past the decoder's limit
    st.integers(1, 200_000).map(lambda n: json.dumps({"entity_id": "x" * n})),  # long strings
    string_literal,
    number_literal,
)


@st.composite
def record_data(draw: st.DrawFn) -> bytes:
    """One Kinesis record's bytes: hostile JSON, raw bytes, or a KPL aggregate (sound or corrupted)."""
    kind = draw(st.sampled_from(["json", "json", "json", "bytes", "kpl", "kpl-corrupt"]))
    if kind == "json":
        text = draw(json_text)
        return text.encode("utf-8")
    if kind == "bytes":
        return draw(st.binary(max_size=200))
    members = draw(st.lists(json_text.map(lambda t: t.encode("utf-8")) | st.binary(max_size=40), max_size=4))
    blob = aggregate([(f"pk-{i}", data) for i, data in enumerate(members)])
    if kind == "kpl-corrupt" and len(blob) > 5:
        position = draw(st.integers(4, len(blob) - 1))
        blob = blob[:position] + bytes([blob[position] ^ 0xFF]) + blob[position + 1 :]
    return blob


def _assert_every_reject_is_a_message_sqs_accepts(sqs: MemorySQS) -> None:
    assert sqs.refused == []
    for message in sqs.messages:
        assert sqs_refusal(message) is None
        body = json.loads(message["MessageBody"])
        assert body["reason"] and body["field"]


def _readings_of(outcome: BatchOutcome) -> int:
    for record in outcome.records:
        assert record.readings == record.written + record.rejected + record.retry, record
    return outcome.readings


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(payloads=st.lists(record_data(), min_size=1, max_size=6))
def test_no_record_content_makes_ingest_raise_or_hand_a_record_back(payloads: list[bytes]) -> None:
    # Given a batch of hostile records and healthy services
    dynamodb, sqs = MemoryDynamo(tables={"readings"}), MemorySQS()
    ingestor = _ingestor(dynamodb, sqs)
    try:
        # When the batch is handled as the Lambda handler does
        outcome, failed = handle(ingestor, kinesis_event(payloads))
    finally:
        ingestor.close()
    # Then nothing is handed back: every reading is written or rejected on a message SQS accepts
    _readings_of(outcome)
    assert outcome.retry == 0 and failed == []
    assert len(sqs.messages) == outcome.rejected
    _assert_every_reject_is_a_message_sqs_accepts(sqs)
    assert len(dynamodb.items()) == len(outcome.write.written)
    assert len(stored_readings(dynamodb.items())) == outcome.readings_stored


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(
    payloads=st.lists(record_data(), min_size=1, max_size=5),
    throttle_rate=st.sampled_from([0.0, 0.5, 1.0]),
    sqs_rate=st.sampled_from([0.0, 0.5, 1.0]),
    seed=st.integers(0, 1_000),
)
def test_under_transient_faults_only_records_with_unsettled_readings_come_back(
    payloads: list[bytes], throttle_rate: float, sqs_rate: float, seed: int
) -> None:
    # Given hostile records while DynamoDB throttles and SQS fails calls
    clock = ManualClock(0.0)
    dynamodb = MemoryDynamo(tables={"readings"})
    sqs = FlakySQS(sqs_rate, seed)
    faulty = FaultInjectingDynamoDB(dynamodb, FaultPlan(throttle_rate=throttle_rate, seed=seed), sleep=clock.sleep)
    ingestor = _ingestor(faulty, sqs, clock=clock, concurrency=1)
    event = kinesis_event(payloads)
    try:
        outcome, failed = handle(ingestor, event, remaining_ms=4_000)
    finally:
        ingestor.close()
    # Then conservation holds, and what is handed back is exactly the records with a reading not settled
    _readings_of(outcome)
    assert failed == [r.sequence_number for r in outcome.records if r.retry]
    if throttle_rate == 0.0 and sqs_rate == 0.0:
        assert outcome.retry == 0
    _assert_every_reject_is_a_message_sqs_accepts(sqs)


# -- the payloads that took a batch down before, one by one ------------------------------------


def _one(payload: bytes) -> tuple[BatchOutcome, MemoryDynamo, MemorySQS]:
    dynamodb, sqs = MemoryDynamo(tables={"readings"}), MemorySQS()
    ingestor = _ingestor(dynamodb, sqs)
    try:
        outcome, failed = handle(ingestor, kinesis_event([payload]))
    finally:
        ingestor.close()
    assert failed == []
    _assert_every_reject_is_a_message_sqs_accepts(sqs)
    return outcome, dynamodb, sqs


def _rejects(sqs: MemorySQS) -> list[dict[str, Any]]:
    return [json.loads(m["MessageBody"]) for m in sqs.messages]


GOOD = _good(1)


def _text(measures: str, *, timestamp: str = str(NOW - 1), extra: str = "") -> str:
    return f'{{"entity_id":"s1","timestamp":{timestamp},"measures":{{{measures}}}{extra}}}'


@pytest.mark.parametrize(
    ("hostile", "field"),
    [
        (_text('"t":' + "9" * 5_000), "measures.t"),
        (_text('"t":1', timestamp="9" * 5_000), "timestamp"),
        (_text('"t":1e-400'), "measures.t"),
        (_text('"t":0.' + "0" * 400 + "1"), "measures.t"),
        (_text('"t":1e400'), "measures.t"),
        ('"\\udc80"', "reading"),
        (_text('"t\\u0001":1'), "measures.t\\x01"),
        (_text('"\\udc80":1'), "measures.\\udc80"),
        (_text('"t":1', extra=',"dimensions":{"d":"\\udc80"}'), "dimensions.d"),
        (_text('"t":1', extra=',"\\u0000x":1'), "\\x00x"),
    ],
    ids=lambda v: repr(v)[:50],
)
def test_a_hostile_reading_next_to_good_ones_is_rejected_naming_its_field(hostile: str, field: str) -> None:
    # Given an array of a good reading, the hostile one, and another good one
    payload = f"[{GOOD},{hostile},{_good(2)}]".encode()
    # When it is ingested
    outcome, dynamodb, sqs = _one(payload)
    # Then both good readings are stored and the hostile one is a reject naming the field
    assert outcome.written == 2 and outcome.rejected == 1
    assert [r.event_id for r in stored_readings(dynamodb.items())] == ["good-1", "good-2"]
    (reject,) = _rejects(sqs)
    assert reject["field"] == field
    assert sqs.messages[0]["MessageAttributes"]["field"]["StringValue"] == field
    # and the payload decodes to the element it was: numbers as their digits, surrogates as escapes
    exact = {"parse_float": Decimal, "parse_int": Decimal}
    assert json.loads(reject["payload"], **exact) == json.loads(hostile, **exact)


def test_a_number_is_never_stored_as_zero_when_it_is_not_zero() -> None:
    outcome, dynamodb, _ = _one(
        b'[{"entity_id":"s1","timestamp":%d,"measures":{"a":0,"b":-0.0,"c":0e-999}}]' % (NOW - 1)
    )
    assert outcome.written == 1
    outcome, dynamodb, sqs = _one(b'{"entity_id":"s1","timestamp":%d,"measures":{"a":1e-400}}' % (NOW - 1))
    assert outcome.rejected == 1 and dynamodb.items() == []
    assert "outside the range DynamoDB can store" in _rejects(sqs)[0]["reason"]


def test_a_whole_record_past_the_decoders_nesting_limit_is_one_reject_with_its_bytes() -> None:
    deep = b"[" * 100_000 + b"]" * 100_000
    outcome, _, sqs = _one(deep)
    assert outcome.rejected == 1
    (reject,) = _rejects(sqs)
    assert reject["field"] == "data" and reject["payload_bytes"] == len(deep) and reject["payload_truncated"]


def test_an_element_too_deep_to_write_back_is_rejected_with_its_whole_record() -> None:
    # Given an element the decoder could read but that is too deep to re-serialise on its own
    depth = 900
    payload = b"[%s,%s%s]" % (GOOD.encode(), b"[" * depth, b"]" * depth)
    outcome, _, sqs = _one(payload)
    assert outcome.written == 1 and outcome.rejected == 1
    (reject,) = _rejects(sqs)
    # Then its reject carries bytes that decode (the element, or at worst the whole record)
    assert reject["payload"] is not None
    json.loads(reject["payload"])


def test_a_reading_that_raises_something_unexpected_is_rejected_not_handed_back(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a bug that makes validating one reading raise (content is the only input there)
    real = Reading.parse.__func__  # type: ignore[attr-defined]

    def flaky_parse(cls: type[Reading], /, obj: Any, **kwargs: Any) -> Reading:
        if obj.get("entity_id") == "sensor-2":
            raise ZeroDivisionError("a bug")
        return real(cls, obj, **kwargs)  # type: ignore[no-any-return]

    monkeypatch.setattr(Reading, "parse", classmethod(flaky_parse))
    _assert_one_of_three_rejected_as_a_bug()


def _packing_raises_for(entity: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """A bug that makes packing the readings of ``entity`` into a block raise."""
    real = blocks.encode_block  # what keydesign.layouts calls, under the name it imported it by

    def flaky_encode(readings: Any, version: int) -> Any:
        if any(r.entity_id == entity for r in readings):
            raise ZeroDivisionError("a bug")
        return real(readings, version)

    monkeypatch.setattr(layouts, "encode_block", flaky_encode)


def test_a_reading_that_makes_packing_raise_is_rejected_and_its_neighbours_stored(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    _packing_raises_for("sensor-2", monkeypatch)
    _assert_one_of_three_rejected_as_a_bug()


def test_a_reading_that_makes_packing_raise_after_its_records_folds_still_gets_a_message(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given a record whose invalid elements were folded already, and a bug in packing one of its readings
    _packing_raises_for("sensor-2", monkeypatch)
    elements = [*([0] * 40), json.loads(_good(1)), json.loads(_good(2))]
    outcome, _, sqs = _one(as_json(elements))
    # Then every reading is counted: 40 folded rejects, one stored, one rejected on a message of its own
    _readings_of(outcome)
    assert (outcome.written, outcome.rejected, outcome.retry) == (1, 41, 0)
    assert sum(r["readings"] for r in _rejects(sqs)) == 41
    assert [r["source"]["index"] for r in _rejects(sqs) if "ZeroDivisionError" in r["reason"]] == [41]


def _assert_one_of_three_rejected_as_a_bug() -> None:
    outcome, dynamodb, sqs = _one(as_json([json.loads(_good(1)), json.loads(_good(2)), json.loads(_good(3))]))
    # Then the two others are stored, the one is a reject saying so, and nothing is handed back
    assert outcome.written == 2 and outcome.rejected == 1 and outcome.unexpected == 1
    assert [r.event_id for r in stored_readings(dynamodb.items())] == ["good-1", "good-3"]
    (reject,) = _rejects(sqs)
    assert reject["field"] == "reading" and "ZeroDivisionError" in reject["reason"]
    assert json.loads(reject["payload"]) == json.loads(_good(2)) and reject["source"]["index"] == 1


def test_a_record_of_many_tiny_invalid_elements_costs_messages_bounded_by_its_bytes() -> None:
    # Given a 200 KB record of 100,000 invalid elements around three good readings
    bad = 100_000
    payload = "[" + GOOD + "," + ",".join(["0"] * (bad // 2)) + "," + _good(2) + ","
    payload += ",".join(["0"] * (bad - bad // 2)) + "," + _good(3) + "]"
    dynamodb, sqs = MemoryDynamo(tables={"readings"}), MemorySQS()
    ingestor = _ingestor(dynamodb, sqs)
    try:
        outcome, failed = handle(ingestor, kinesis_event([payload.encode()]), remaining_ms=60_000)
    finally:
        ingestor.close()
    # Then nothing comes back, every reading is counted, and the rejects fit in a few dozen messages
    assert failed == [] and outcome.written == 3 and outcome.rejected == bad
    _assert_every_reject_is_a_message_sqs_accepts(sqs)
    rejects = _rejects(sqs)
    assert len(rejects) <= 25 + len(payload) // (55 * 1024) + 2  # folds are filled to about 90%
    assert sum(r["readings"] for r in rejects) == bad
    # The first 25 go one by one; the rest are arrays of themselves, never cut, each a fold with its own id
    folds = [r for r in rejects if "/fold-" in r["reject_id"]]
    assert len(rejects) - len(folds) == 25 and all(r["readings"] == 1 for r in rejects if r not in folds)
    assert len({r["reject_id"] for r in folds}) == len(folds)
    assert all(not r["payload_truncated"] for r in folds)
    assert sum(len(json.loads(r["payload"])) for r in folds) == sum(r["readings"] for r in folds) == bad - 25
    assert "folded into one message" in folds[0]["reason"] and folds[0]["field"] == "reading"


def test_a_record_with_a_few_invalid_elements_gets_one_message_each() -> None:
    payload = as_json([json.loads(_good(1)), *([{"entity_id": "x"}] * 25), json.loads(_good(2))])
    outcome, _, sqs = _one(payload)
    assert outcome.rejected == 25 and len(sqs.messages) == 25
    assert {r["readings"] for r in _rejects(sqs)} == {1}


def test_a_reject_at_the_size_limit_with_the_widest_field_still_fits_one_message() -> None:
    # Given a bad reading whose payload is as large as a reject can carry and whose field name
    # is made of four-byte characters (the widest message attribute)
    name = "\U0001f600" * 200
    payload = _text(f'"{name}":1', extra=',"dimensions":{"d":"' + "x" * 300_000 + '"}')
    ingestor = _ingestor(MemoryDynamo(tables={"readings"}), MemorySQS())
    sqs = ingestor.rejects._api  # the fake behind the publisher
    publisher = type(ingestor.rejects)(sqs, "https://q", payload_limit=128 * 1024)
    ingestor.rejects = publisher
    try:
        outcome, failed = handle(ingestor, kinesis_event([f"[{GOOD},{payload}]".encode()]))
    finally:
        ingestor.close()
    # Then it is one message SQS takes (256 KiB with its attributes), cut and saying so
    assert failed == [] and outcome.rejected == 1
    _assert_every_reject_is_a_message_sqs_accepts(sqs)
    (reject,) = _rejects(sqs)
    assert reject["payload_truncated"] and len(sqs.messages[0]["MessageAttributes"]["field"]["StringValue"]) <= 128


def test_folded_elements_keep_the_digits_of_numbers_a_double_cannot_hold() -> None:
    elements = [_text(f'"t":1e4{n:02d}') for n in range(40)]  # 1e400 .. 1e439: infinity as a double
    _, _, sqs = _one(("[" + GOOD + "," + ",".join(elements) + "]").encode())
    exact = {"parse_float": Decimal, "parse_int": Decimal}
    sent = [
        element
        for r in _rejects(sqs)
        for element in (json.loads(r["payload"], **exact) if r["readings"] > 1 else [json.loads(r["payload"], **exact)])
    ]
    assert sorted(e["measures"]["t"] for e in sent) == [Decimal(f"1e4{n:02d}") for n in range(40)]
