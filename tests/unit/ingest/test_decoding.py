"""Record decoding: what counts as one reading, and what is rejected whole."""

from __future__ import annotations

import pytest

from adapters.kinesis_records import aggregate
from ingest.decoding import decode_record
from tests.unit.ingest.kinesis_events import SHARD_ID, as_json, kinesis_record, sequence_number


def _decode(data: bytes) -> tuple[list[object], list[tuple[str, int | None, int | None]]]:
    decoded = decode_record(0, kinesis_record(data, 0), SHARD_ID, sequence_number(0))
    return (
        [c.value for c in decoded.candidates],
        [(r.field, r.sub_sequence_number, r.index) for r in decoded.rejects],
    )


def test_an_object_is_one_candidate_carrying_the_exact_bytes() -> None:
    decoded = decode_record(0, kinesis_record(b'{"a": 1.10}', 0), SHARD_ID, sequence_number(0))
    (candidate,) = decoded.candidates
    assert candidate.payload() == b'{"a": 1.10}'


def test_an_array_is_one_candidate_per_element_with_its_index() -> None:
    decoded = decode_record(0, kinesis_record(as_json([{"a": 1}, 2]), 0), SHARD_ID, sequence_number(0))
    assert [(c.index, c.value) for c in decoded.candidates] == [(0, {"a": 1}), (1, 2)]
    assert decoded.candidates[0].payload() == b'{"a":1}'


def test_an_empty_array_carries_nothing() -> None:
    assert _decode(b"[]") == ([], [])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"nan?", "not JSON"),
        (b'"text"', "got a string"),
        (b"null", "got null"),
        (b"true", "got a boolean"),
    ],
)
def test_what_is_neither_object_nor_array_is_one_reject(data: bytes, reason: str) -> None:
    decoded = decode_record(0, kinesis_record(data, 0), SHARD_ID, sequence_number(0))
    (reject,) = decoded.rejects
    assert reject.field == "data" and reason in reject.reason and reject.payload == data


def test_deep_nesting_is_rejected_not_a_crash() -> None:
    _, rejects = _decode(b"[" * 100_000 + b"]" * 100_000)
    assert rejects == [("data", None, None)]


def test_kpl_members_each_decode_on_their_own() -> None:
    data = aggregate([("a", as_json([{"x": 1}, {"x": 2}])), ("b", b"oops"), ("c", as_json({"y": 1}))])
    values, rejects = _decode(data)
    assert values == [{"x": 1}, {"x": 2}, {"y": 1}]
    assert rejects == [("data", 1, None)]
    decoded = decode_record(0, kinesis_record(data, 0), SHARD_ID, sequence_number(0))
    assert decoded.kpl_members == 3
    assert [c.sub_sequence_number for c in decoded.candidates] == [0, 0, 2]
