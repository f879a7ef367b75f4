"""A stream batch delivered again counts nothing twice: retried whole, retried from a reported
record, bisected, or overlapping a longer batch. moto plays the control table; the real
monitor processes each delivery and Powertools builds the partial batch response."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from botocore.exceptions import ClientError

from doubles.clocks import ManualClock
from hotkeys.records import parse_record
from keydesign import ShardMap, format_ts
from tests.integration.hotkeys.conftest import Aws, run
from tests.integration.hotkeys.test_windows import MINUTE, T, fast
from tests.unit.hotkeys.stream_events import block_record, stream_event

pytestmark = pytest.mark.integration
__all__ = ["fast"]  # fixture

ENTITIES = ("sensor-0001", "sensor-0002", "sensor-0003")


def stream(aws: Aws, count: int = 30) -> list[dict[str, Any]]:
    """One stream shard's records over two one-second windows (06:00:00 and 06:00:01), in order."""
    shard_map = ShardMap.initial(MINUTE, 4)
    return [
        block_record(aws.layout, shard_map, ENTITIES[i % 3], T + i * 2_000 // count, units=1 + i % 4, event_id=f"e{i}")
        for i in range(count)
    ]


def once(records: list[dict[str, Any]]) -> dict[int, Counter[str]]:
    """Each window's write units per entity, every record counted once: what the control table must hold."""
    out: dict[int, Counter[str]] = {}
    for record in records:
        obs = parse_record(record, layout_kind="hybrid", table_prefix="readings")
        assert not hasattr(obs, "kind"), obs
        start = obs.approx_time_ms - obs.approx_time_ms % 1_000  # type: ignore[union-attr]
        out.setdefault(start, Counter())[obs.entity] += obs.write_units  # type: ignore[union-attr]
    return out


def stored(aws: Aws) -> dict[int, Counter[str]]:
    counters = aws.counters()
    windows = {s: counters.read_window(s, 1_000) for s in (T, T + 1_000)}
    return {s: Counter({e: load.wcu for e, load in w.entities.items()}) for s, w in windows.items() if w.entities}


class FailingRunPut:
    """Puts of runs in one window fail (throttled after retries) while ``failing``."""

    def __init__(self, inner: Any, window_ms: int) -> None:
        self.inner = inner
        self.prefix = f"load#{format_ts(window_ms)}#"
        self.failing = True
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def put_item(self, **kwargs: Any) -> Any:
        if self.failing and kwargs["Item"]["pk"]["S"].startswith(self.prefix):
            self.refused += 1
            raise ClientError({"Error": {"Code": "ThrottlingException", "Message": "Rate exceeded"}}, "PutItem")
        return self.inner.put_item(**kwargs)


def sequence(record: dict[str, Any]) -> str:
    return str(record["dynamodb"]["SequenceNumber"])


def test_a_batch_retried_whole_after_its_load_was_stored_counts_once(fast: Aws) -> None:
    # Given a batch counted, and then the function failed (a timeout after its puts landed)
    records = stream(fast)
    monitor = fast.monitor(ManualClock(T + 500))
    assert run(monitor, stream_event(records))[0] == {"batchItemFailures": []}
    first = stored(fast)
    assert first == once(records)
    # When Lambda delivers the same batch again, and then again with more records behind it
    run(monitor, stream_event(records))
    assert stored(fast) == first
    more = records + stream(fast, 40)[30:]
    run(monitor, stream_event(more))
    # Then every record is counted once
    assert stored(fast) == once(more)


def test_a_batch_retried_from_the_record_it_reported_counts_once(fast: Aws) -> None:
    # Given the second window's run cannot be stored
    records = stream(fast)
    faulty = FailingRunPut(fast.dynamodb, T + 1_000)
    monitor = fast.monitor(ManualClock(T + 500), dynamodb=faulty)
    response, outcome = run(monitor, stream_event(records))
    # Then exactly that window's records are reported, the first one first
    second = [r for r in records if r["dynamodb"]["ApproximateCreationDateTime"] >= (T + 1_000) / 1000]
    assert [f["itemIdentifier"] for f in response["batchItemFailures"]] == [sequence(r) for r in second]
    assert faulty.refused == 1 and outcome.counters_failed == 1
    assert stored(fast) == {T: once(records)[T]}
    # When Lambda resumes from the first reported record, the fault gone
    faulty.failing = False
    resumed = records[records.index(second[0]) :]
    assert run(monitor, stream_event(resumed))[0] == {"batchItemFailures": []}
    # Then each window holds its records once
    assert stored(fast) == once(records)


def test_a_bisected_batch_counts_once(fast: Aws) -> None:
    # Given a batch whose load was stored before the function failed
    records = stream(fast)
    monitor = fast.monitor(ManualClock(T + 500))
    run(monitor, stream_event(records))
    # When Lambda bisects it (the halves cut the first window in two), then bisects the first half again
    half, quarter = len(records) // 2, len(records) // 4
    for part in (records[:quarter], records[quarter:half], records[half:]):
        assert run(monitor, stream_event(part))[0] == {"batchItemFailures": []}
    # Then every record is counted once, in its window
    assert stored(fast) == once(records)


def test_overlapping_batches_from_two_stream_shards_add_up(fast: Aws) -> None:
    # Given the same entities written through two partitions (two stream shards), delivered twice each
    ours, theirs = stream(fast), stream(fast)
    monitors = [fast.monitor(ManualClock(T + 500)) for _ in range(2)]
    for _ in range(2):
        for monitor, batch in zip(monitors, (ours, theirs), strict=True):
            run(monitor, stream_event(batch))
    # Then both shards' loads are there, each once
    expected = once(ours)
    for start, load in once(theirs).items():
        expected[start] = expected[start] + load
    assert stored(fast) == expected
