"""A failed batch's range read back (``replay.sources``) from fake streams whose pages the test writes: a
message is deleted only when its whole range was read back, and a read that stops short says where and why."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from replay import sources
from replay.failures import FailedBatch
from replay.sources import DynamoStreamRanges, KinesisRanges
from tests.unit.replay.test_runner import Clock, Function, Queue, run

ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/readings"
WHEN = datetime(2026, 12, 1, tzinfo=UTC)


def failed(first: int, last: int, source: str = "kinesis") -> FailedBatch:
    return FailedBatch(
        message_id="m1",  # Function maps sequence 100,000 + k back to message m1
        receipt_handle="h1",
        source=source,  # type: ignore[arg-type]
        stream_arn=ARN,
        shard_id="shardId-0",
        first_sequence=str(first),
        last_sequence=str(last),
        batch_size=last - first + 1,
        function_arn="f",
    )


class Kinesis:
    """A Kinesis client whose GetRecords answers the pages given, in order: (sequence numbers,
    MillisBehindLatest); the shard is closed after the last page (no next iterator)."""

    def __init__(self, pages: list[tuple[list[int], int]]) -> None:
        self.pages = pages
        self.calls = 0

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return {"ShardIterator": "0"}

    def get_records(self, **params: Any) -> dict[str, Any]:
        self.calls += 1
        at = int(params["ShardIterator"])
        sequences, behind = self.pages[at]
        return {
            "Records": [
                {"SequenceNumber": str(s), "PartitionKey": "p", "Data": b"{}", "ApproximateArrivalTimestamp": WHEN}
                for s in sequences
            ],
            "NextShardIterator": str(at + 1) if at + 1 < len(self.pages) else None,
            "MillisBehindLatest": behind,
        }


class Streams:
    """A DynamoDB Streams client answering the pages given (sequence numbers); closed after the last."""

    def __init__(self, pages: list[list[int]]) -> None:
        self.pages = pages

    def get_shard_iterator(self, **params: Any) -> dict[str, Any]:
        return {"ShardIterator": "0"}

    def get_records(self, **params: Any) -> dict[str, Any]:
        at = int(params["ShardIterator"])
        records = [
            {"eventName": "INSERT", "dynamodb": {"SequenceNumber": str(s), "ApproximateCreationDateTime": WHEN}}
            for s in self.pages[at]
        ]
        return {"Records": records, "NextShardIterator": str(at + 1) if at + 1 < len(self.pages) else None}


def test_empty_pages_in_the_middle_of_a_dynamodb_stream_shard_do_not_end_the_read() -> None:
    # Given a range of three records with six empty pages between its first and the rest (a DynamoDB
    # stream answers them mid-shard, as Kinesis does)
    streams = Streams([[100_000], [], [], [], [], [], [], [100_001, 100_002], [100_003]])
    read = DynamoStreamRanges(streams).read(failed(100_000, 100_002, "dynamodb"))
    # Then every record of the range is read back, and the read says it reached the end
    assert [r["dynamodb"]["SequenceNumber"] for r in read.records] == ["100000", "100001", "100002"]
    assert (read.unread, read.lost) == (None, None)


@pytest.mark.parametrize(
    ("pages", "why"),
    [
        # one record a page and a cap of three calls
        ([([100_000 + n], 1_000) for n in range(5)], "the read stopped at its cap of 3 GetRecords calls"),
        # an empty page at the stream's tip before the last record (the stream lost it)
        ([([100_000], 1_000), ([100_001], 1_000), ([], 0)], "the stream's tip was reached before"),
        # the shard closed before the last record
        ([([100_000], 1_000), ([100_001], 1_000)], "the shard ended before the range's last record"),
    ],
)
def test_a_range_not_read_to_its_last_record_keeps_its_message_and_says_why(
    monkeypatch: pytest.MonkeyPatch, pages: list[tuple[list[int], int]], why: str
) -> None:
    monkeypatch.setattr(sources, "MAX_CALLS", 3)
    clock = Clock()
    queue = Queue(clock, [failed(100_000, 100_004)])
    function = Function(clock, queue)
    (outcome,) = run(queue, KinesisRanges(Kinesis(pages)), function)  # type: ignore[arg-type]
    # Then the message is kept, nothing put through (the function gets a batch whole or not at all), and
    # the report names the tail not read and why
    assert not outcome.deleted and queue.deleted == [] and function.events == []
    assert outcome.lost is None
    assert outcome.unread is not None and outcome.unread.startswith("records after 10000")
    assert "to 100004 were not read back: " + why in outcome.unread
    assert outcome.kept_because is not None and outcome.kept_because.startswith(outcome.unread)


def test_empty_kinesis_pages_behind_the_tip_do_not_end_the_read() -> None:
    kinesis = Kinesis([([100_000], 5_000), ([], 5_000), ([], 5_000), ([100_001], 5_000), ([100_002, 100_003], 0)])
    read = KinesisRanges(kinesis).read(failed(100_000, 100_002))
    assert [r["kinesis"]["sequenceNumber"] for r in read.records] == ["100000", "100001", "100002"]
    assert read.unread is None and kinesis.calls == 5


@pytest.mark.parametrize(
    "pages",
    [[([], 0)], [([100_007], 0)], [([], 1_000)]],
    ids=["an empty shard at its tip", "a record past the range", "a closed shard"],
)
def test_a_range_none_of_which_the_shard_holds_up_to_its_end_is_lost_whole(pages: list[tuple[list[int], int]]) -> None:
    read = KinesisRanges(Kinesis(pages)).read(failed(100_000, 100_004))
    assert read.records == [] and read.unread is None
    assert read.lost is not None and (read.lost.first, read.lost.until) == ("100000", None)


def test_a_range_not_found_within_the_call_cap_is_unread_not_lost(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sources, "MAX_CALLS", 3)
    read = KinesisRanges(Kinesis([([], 9_000)] * 5)).read(failed(100_000, 100_004))
    assert read.lost is None
    assert read.describe_unread(failed(100_000, 100_004)) == (
        "records from 100000 to 100004 were not read back: the read stopped at its cap of 3 GetRecords calls"
    )
