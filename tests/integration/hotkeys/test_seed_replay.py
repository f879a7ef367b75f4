"""The seed scenario replayed end to end: writers, the readings table, its stream, the hot-key
function on three stream shards, the control table, and range queries.

Many sensors write a reading a second each; sensor-alpha-001 bursts to 2,000 writes/s.
Writers store every reading as a block of its own (``Layout.pack``, as if each reached
ingest in a batch of its own: one write unit a reading, the most blocks can cost) with the
shard map they hold (read from the store through a cache, as ingest does), in a moto table.
Each write's stream record (KEYS_ONLY, shaped as Lambda delivers it) goes to the stream
shard of its partition, and every half second each stream shard's records are handed to
the real handler, in its own container (monitor). Then:

* before the split the hot sensor's partition key runs over 1,000 WCU/s;
* the split lands at the next bucket boundary every writer has seen;
* after it no partition key exceeds the threshold;
* every reading written before, during and after the split is returned by range queries,
  exactly once, following LastEvaluatedKey (a block holds one reading here, so its sort key,
  first reading's time included, names the reading).

Time is compressed (one-minute buckets, one-second windows and cache TTL) so the replay
writes thousands of readings, not millions; the same logic runs at production settings in
tests/unit/hotkeys/test_seed_scenario.py.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from types import ModuleType
from typing import Any

import pytest
from boto3.dynamodb.types import TypeSerializer

from adapters.shard_map_source import CachedShardMap
from adapters.shard_map_store import ShardMapStore
from doubles.clocks import ManualClock
from keydesign import Layout, PartitionQuery, Reading, ShardMap, parse_timestamp, shard_of
from tests.integration.hotkeys.conftest import CONTROL, SECOND_WINDOWS, Aws, invoke
from tests.integration.mocked_aws import all_items
from tests.unit.hotkeys.stream_events import TABLE, item_record, stream_event

pytestmark = pytest.mark.integration

SETTINGS = {**SECOND_WINDOWS, "SHARDS": "4", "HOT_CHANGE_MARGIN": "0s"}
HOT = "sensor-alpha-001"
SENSORS = [f"sensor-{i:04d}" for i in range(100)]
HOT_PER_S = 2_000
STREAM_SHARDS = 3
TICK_MS = 100
START = parse_timestamp("2026-11-22T06:00:56Z")
BOUNDARY = parse_timestamp("2026-11-22T06:01:00Z")
END = parse_timestamp("2026-11-22T06:01:03Z")


def write_all(aws: Aws, items: list[dict[str, object]]) -> None:
    for offset in range(0, len(items), 25):
        chunk = items[offset : offset + 25]
        serialise = TypeSerializer().serialize
        request = {TABLE: [{"PutRequest": {"Item": {k: serialise(v) for k, v in i.items()}}} for i in chunk]}
        while request:
            response = aws.dynamodb.batch_write_item(RequestItems=request)
            request = response.get("UnprocessedItems") or {}


def query(aws: Aws, part: PartitionQuery) -> list[dict[str, Any]]:
    """One planned partition, every page (LastEvaluatedKey followed)."""
    values: dict[str, Any] = {":pk": {"S": part.pk}}
    condition = "pk = :pk"
    if part.sk_low is not None and part.sk_high is not None:
        condition += " AND sk BETWEEN :lo AND :hi"
        values |= {":lo": {"S": part.sk_low}, ":hi": {"S": part.sk_high}}
    return all_items(
        aws.dynamodb,
        "query",
        TableName=part.table,
        ConsistentRead=True,
        ProjectionExpression="sk",
        KeyConditionExpression=condition,
        ExpressionAttributeValues=values,
    )


def read_back(aws: Aws, plan_parts: tuple[PartitionQuery, ...]) -> list[str]:
    """The sort key of every block the plan finds whose reading lies in its partition's time range."""
    found: list[str] = []
    for part in plan_parts:
        for item in query(aws, part):
            first_ts = item["sk"]["S"].split("#")[-3]  # <first ts>#<block id>#<write units>
            if part.from_ms <= parse_timestamp(first_ts, "sk") < part.to_ms:
                found.append(item["sk"]["S"])
    return found


@pytest.fixture
def seed(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    return aws.configure(monkeypatch, SETTINGS)


class Replay:
    """Writers, the table, the stream and the hot-key function, ticking through simulated time."""

    def __init__(self, aws: Aws, handler: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
        self.aws = aws
        self.handler = handler
        self.capsys = capsys
        self.layout: Layout = aws.layout
        self.clock = ManualClock(START)
        self.store = ShardMapStore(aws.dynamodb, CONTROL, ShardMap.initial(self.layout.bucket, 4), clock_ms=self.clock)
        # Writers read the map through a cache, exactly as ingest does
        self.writer_maps = CachedShardMap(self.store.load, 1_000, clock=lambda: self.clock() / 1000)
        self.monitors = [aws.monitor(self.clock) for _ in range(STREAM_SHARDS)]
        self.pending: dict[int, list[dict[str, Any]]] = defaultdict(list)
        self.written: dict[str, int] = {}  # a block's sort key (one reading each) -> its event (and write) time
        self.per_second: dict[int, Counter[str]] = defaultdict(Counter)  # second -> writes per partition key
        self.changed_at: int | None = None

    def run(self) -> None:
        for tick in range(START, END, TICK_MS):
            self.clock.now = tick
            readings = [Reading(HOT, f"hot-{tick}-{i}", tick + i * TICK_MS // 200, {"v": 1.5}) for i in range(200)]
            readings += [
                Reading(s, f"{s}-{tick}", tick + n, {"v": 2.5})
                for n, s in enumerate(SENSORS)
                if n % 10 == (tick // TICK_MS) % 10
            ]
            self.write(readings)
            if tick % 500 == 0:
                self.deliver()
                if self.changed_at is None and self.store.load().version > 0:
                    self.changed_at = tick
        # A last reading on every stream shard after the end, so the last windows are judged
        self.clock.now = END + 1_500
        for sensor in SENSORS:
            if len(self.pending) == STREAM_SHARDS:
                break
            self.write([Reading(sensor, "closing", END + 1_000, {"v": 1.0})])
        self.deliver()

    def write(self, readings: list[Reading]) -> None:
        shard_map = self.writer_maps.current()
        blocks = [block for r in readings for block in self.layout.pack([(r, 1)], shard_map)]
        write_all(self.aws, [b.item() for b in blocks])
        for reading, block in zip(readings, blocks, strict=True):
            self.written[block.key.sk] = reading.ts_ms
            self.per_second[reading.ts_ms // 1000 * 1000][block.key.pk] += block.write_units
            record = item_record(block.item(), approx_s=reading.ts_ms / 1000)
            self.pending[shard_of(block.key.pk, STREAM_SHARDS)].append(record)

    def deliver(self) -> None:
        """Each stream shard's records to its own container, through the real handler."""
        for shard, monitor in enumerate(self.monitors):
            batch = self.pending.pop(shard, [])
            if batch:
                invocation = invoke(self.handler, stream_event(batch), self.capsys, monitor=monitor)
                assert invocation.failed == []

    def hottest(self, seconds: range) -> int:
        return max(max(self.per_second[s].values()) for s in seconds)


def test_the_seed_scenario_splits_the_hot_sensor_without_losing_a_reading(
    seed: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    replay = Replay(seed, handler_module, capsys)
    replay.run()
    layout, written, counters = replay.layout, replay.written, seed.counters()

    # Before the split, the hot sensor's partition key ran over 1,000 WCU/s (1-KB items: 1 WCU each),
    # by the writes and by the counters every container added to
    assert min(max(replay.per_second[s].values()) for s in range(START, BOUNDARY, 1_000)) > 1_000
    before = [counters.read_window(s, 1_000) for s in range(START, BOUNDARY, 1_000)]
    assert all(max(w.key_rate(k) for k in w.keys) > 1_000 for w in before)
    # The split was decided from the first judged window and lands at the next boundary
    assert replay.changed_at is not None and replay.changed_at <= START + 2_500
    final = replay.store.load()
    assert [(c.effective_from_ms, c.shards) for c in final.entity_history[HOT]] == [(BOUNDARY, 5)]
    assert final.global_history == ShardMap.initial(layout.bucket, 4).global_history
    assert final.version == 1
    # After the boundary no partition key exceeds the threshold, by the counters and by the writes
    after = [counters.read_window(s, 1_000) for s in range(BOUNDARY, END, 1_000)]
    assert max(w.key_rate(k) for w in after for k in w.keys) <= 500
    assert replay.hottest(range(BOUNDARY, END, 1_000)) <= 500
    assert all(w.entity_rate(HOT) == HOT_PER_S for w in after)  # all of its load, from three stream shards
    # One hot key, one message
    (note,) = seed.notifications()
    assert note["body"]["entity"] == HOT and note["body"]["to_shards"] == 5

    # Readings were written before the decision, during it (decided, not yet in force) and after the boundary
    changed_at = replay.changed_at
    assert any(t < changed_at for t in written.values())
    assert any(changed_at <= t < BOUNDARY for t in written.values())
    assert any(t >= BOUNDARY for t in written.values())
    # Every one is returned exactly once by a cross-entity range read of the whole replay...
    everything = read_back(seed, layout.plan_range(START, END + 2_000, final).partitions)
    assert len(everything) == len(set(everything)) == len(written)
    assert set(everything) == set(written)
    # ...and the hot sensor's by an entity read across the boundary (the base key, then five sub-shards)
    hot = {sk for sk in written if sk.startswith(f"{HOT}#")}
    plan = layout.plan_entity(HOT, START, END, final)
    assert len(plan.partitions) == 1 + 5
    whole = read_back(seed, plan.partitions)
    assert len(whole) == len(hot) and set(whole) == hot
    # ...and a quiet sensor's, unaffected by the split
    quiet_sensor = next(s for s in SENSORS if shard_of(s, 4) != shard_of(HOT, 4))
    quiet = {sk for sk in written if sk.startswith(f"{quiet_sensor}#")}
    found = read_back(seed, layout.plan_entity(quiet_sensor, START, END + 2_000, final).partitions)
    assert len(found) == len(quiet) and set(found) == quiet
