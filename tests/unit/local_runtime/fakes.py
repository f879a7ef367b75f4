"""In-memory stand-ins for a stream, a function and a destination (no network, no threads of their own)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from botocore.exceptions import ClientError

from local_runtime.functions import FunctionError
from local_runtime.stream_sources import ReadResult, SourceRecord, StartingPosition, record_size

ARRIVAL_S = 1_795_000_000.0
STREAM_ARN = "arn:aws:kinesis:eu-west-1:123456789012:stream/readings"


def record(shard: str, sequence: int, *, arrival_s: float = ARRIVAL_S, payload: str = "") -> SourceRecord:
    seq = str(sequence)
    event_record = {
        "kinesis": {"sequenceNumber": seq, "data": payload, "partitionKey": "p"},
        "eventID": f"{shard}:{seq}",
        "eventSource": "aws:kinesis",
        "eventSourceARN": STREAM_ARN,
    }
    return SourceRecord(seq, arrival_s, event_record, record_size(event_record))


class FakeStream:
    """Shards as lists; an iterator is ``"<shard>@<position>"``; records can be appended at any time."""

    batch_info_key = "KinesisBatchInfo"
    max_read_limit = 10_000

    def __init__(self, shards: Mapping[str, Sequence[SourceRecord]] | None = None) -> None:
        self.arn = STREAM_ARN
        self._shards: dict[str, list[SourceRecord]] = {k: list(v) for k, v in (shards or {}).items()}
        self._closed: set[str] = set()
        self._lock = threading.Lock()
        self.read_failures: dict[str, int] = {}
        self.reads = 0

    def append(self, shard: str, records: Sequence[SourceRecord]) -> None:
        with self._lock:
            self._shards.setdefault(shard, []).extend(records)

    def close(self, shard: str) -> None:
        with self._lock:
            self._closed.add(shard)

    def shard_ids(self) -> list[str]:
        with self._lock:
            return sorted(self._shards)

    def iterator(self, shard_id: str, position: StartingPosition, after_sequence: str | None) -> str:
        with self._lock:
            records = self._shards[shard_id]
            if after_sequence is not None:
                index = next(i for i, r in enumerate(records) if r.sequence_number == after_sequence) + 1
            elif position is StartingPosition.LATEST:
                index = len(records)
            else:
                index = 0
        return f"{shard_id}@{index}"

    def read(self, shard_id: str, iterator: str, limit: int) -> ReadResult:
        with self._lock:
            self.reads += 1
            if self.read_failures.get(shard_id, 0) > 0:
                self.read_failures[shard_id] -= 1
                raise ClientError({"Error": {"Code": "ExpiredIteratorException", "Message": "expired"}}, "GetRecords")
            shard, _, position = iterator.partition("@")
            start = int(position)
            records = self._shards[shard][start : start + limit]
            end = start + len(records)
            closed = shard in self._closed and end == len(self._shards[shard])
            return ReadResult(records, None if closed else f"{shard}@{end}", 0)


class FakeFunction:
    """A function whose behaviour is a callable of the batch's sequence numbers; it records every call."""

    def __init__(self, behaviour: Callable[[list[str]], Any] | None = None, name: str = "fake") -> None:
        self.name = name
        self._behaviour = behaviour or (lambda _seqs: None)
        self.calls: list[list[str]] = []
        self._lock = threading.Lock()

    def invoke(self, event: Any) -> Any:
        sequences = [r["kinesis"]["sequenceNumber"] for r in event["Records"]]
        with self._lock:
            self.calls.append(sequences)
        return self._behaviour(sequences)

    @property
    def delivered(self) -> list[str]:
        with self._lock:
            return [s for call in self.calls for s in call]


def failing(poison: set[str]) -> Callable[[list[str]], Any]:
    """A handler that raises whenever a batch holds a poison record."""

    def behaviour(sequences: list[str]) -> Any:
        if poison & set(sequences):
            raise FunctionError("poison record")
        return {"batchItemFailures": []}

    return behaviour


class FakeDestination:
    def __init__(self) -> None:
        self.messages: list[Mapping[str, Any]] = []

    def __call__(self, message: Mapping[str, Any]) -> None:
        self.messages.append(message)
