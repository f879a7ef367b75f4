"""Windows across invocations and stream shards, judged once: splits, scale-downs, alerts with a
cooldown, claims and their failures, metrics. moto plays the control table and SNS; time is simulated.

Time is compressed: one-minute buckets, one-second windows and a one-second cache TTL, so a
window is judged two seconds after it starts and a change lands at the next minute. The logic
is the same at production settings (see tests/unit/hotkeys/test_seed_scenario.py).
"""

from __future__ import annotations

import threading
from collections import defaultdict
from collections.abc import Sequence
from types import ModuleType
from typing import Any

import pytest

from adapters.shard_map_store import ShardMapStore
from doubles.clocks import ManualClock
from hotkeys.detector import decide, tally
from hotkeys.records import parse_record
from keydesign import Bucket, ShardMap, format_ts, parse_timestamp, shard_of
from tests.integration.hotkeys.conftest import CONTROL, SECOND_WINDOWS, Aws, invoke, run
from tests.unit.hotkeys.stream_events import block_record, stream_event

pytestmark = pytest.mark.integration

FAST = {**SECOND_WINDOWS, "HOT_CHANGE_MARGIN": "1s", "HOT_SCALE_DOWN_WINDOWS": "3"}
T = parse_timestamp("2026-11-22T06:00:00Z")
MINUTE = Bucket.parse("1m")
ALPHA = "sensor-alpha-001"
BETA = "sensor-beta-002"
UNITS = 10  # a block of about 10 KB: 10 write units


@pytest.fixture
def fast(aws: Aws, monkeypatch: pytest.MonkeyPatch) -> Aws:
    return aws.configure(monkeypatch, FAST)


def store(aws: Aws, now_ms: int) -> ShardMapStore:
    return ShardMapStore(aws.dynamodb, CONTROL, ShardMap.initial(MINUTE, 4), clock_ms=lambda: now_ms)


def split_since(aws: Aws, entity: str, shards: int, effective_ms: int) -> ShardMap:
    return (
        store(aws, effective_ms - 60_000)
        .apply(lambda m: m.with_entity(entity, shards, effective_ms, now_ms=effective_ms - 60_000), reason="setup")
        .shard_map
    )


def writes(
    aws: Aws, shard_map: ShardMap, entity: str, wcu_per_s: int, second_ms: int, *, units: int = UNITS, **kw: Any
) -> list[dict[str, Any]]:
    """Stream records of ``entity`` writing ``wcu_per_s`` in the second starting at ``second_ms``:
    blocks keyed with ``shard_map``, each billed ``units`` write units."""
    count = max(1, wcu_per_s // units)
    return [
        block_record(
            aws.layout,
            shard_map,
            entity,
            second_ms + i * 1000 // count,
            units=min(units, wcu_per_s),
            event_id=f"{entity}-{second_ms}-{i}",
            **kw,
        )
        for i in range(count)
    ]


def by_key(records: Sequence[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """Records grouped by partition key: one partition's writes reach one stream shard."""
    groups: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for record in records:
        groups[record["dynamodb"]["Keys"]["pk"]["S"]].append(record)
    return groups


def judged(outcomes: Sequence[Any], start: int) -> list[Any]:
    return [d for o in outcomes for d in o.windows_judged if d.window_start_ms == start]


def test_load_spread_over_stream_shards_is_judged_as_a_whole_and_once(fast: Aws) -> None:
    # Given sensor-alpha-001 split in 3 since 05:59, writing 1,800 WCU/s in 06:00:00-06:00:01
    shard_map = split_since(fast, ALPHA, 3, T - 60_000)
    records = writes(fast, shard_map, ALPHA, 1_800, T)
    shards = list(by_key(records).values())
    assert len(shards) == 3  # its sub-shards live in three partitions, read by three stream shards
    # And no stream shard alone sees enough to size the split: locally 600 WCU/s "needs" 2 of its 3 keys
    config = fast.settings().detector
    local = tally([parse_record(r, layout_kind="hybrid", table_prefix="readings") for r in shards[0]], config)  # type: ignore[misc]
    alone = decide(local[T].load(), shard_map, layout_kind="hybrid", config=config, change_from_ms=T + 60_000)
    assert alone.splits == ()
    # When three containers count their shards concurrently
    clock = ManualClock(T + 500)
    monitors = [fast.monitor(clock) for _ in shards]
    threads = [threading.Thread(target=m.process, args=(s,)) for m, s in zip(monitors, shards, strict=True)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window = fast.counters().read_window(T, 1000)
    assert window.entities[ALPHA].wcu == 1_800  # every ADD landed: 1,800 WCU over the second
    # And after the grace period all three get another batch
    clock.now = T + 2_000
    quiet_record = block_record(fast.layout, shard_map, "sensor-0001", T + 1_500)
    outcomes = [m.process([quiet_record]) for m in monitors]
    # Then exactly one of them judged the window, on the whole load: 1,800 WCU/s needs 5 sub-shards
    (decisions,) = judged(outcomes, T)
    (split,) = decisions.splits
    assert (split.entity, split.from_shards, split.to_shards) == (ALPHA, 3, 5)
    assert split.effective_from_ms == T + 60_000  # the next boundary after now + cache TTL + margin
    final = store(fast, T + 2_000).load()
    assert final.entity_shards_at(ALPHA, T + 59_999) == 3 and final.entity_shards_at(ALPHA, T + 60_000) == 5
    # And one notification went out
    (note,) = fast.notifications()
    assert note["subject"] == f"Hot entity {ALPHA}: 1,800 WCU/s"
    assert note["body"]["action"] == "split" and note["body"]["to_shards"] == 5 and note["body"]["applied"] is True


def test_a_split_is_announced_when_no_single_key_was_over_the_threshold(fast: Aws) -> None:
    # Given sensor-alpha-001 writing 700 WCU/s in the window 06:00:59-06:01:00 (write time), its readings
    # straddling the 06:01 bucket boundary (event time): 350 WCU/s on each minute's key, both under 500
    shard_map = ShardMap.initial(MINUTE, 4)
    layout = fast.layout
    window_ms = T + 59_000
    records = [
        # 06:00:59.5 .. 06:01:00.19: half in each bucket
        block_record(
            layout,
            shard_map,
            ALPHA,
            T + 59_500 + i * 10,
            units=UNITS,
            event_id=f"straddle-{i}",
            approx_s=(window_ms + i * 10) / 1000,
        )
        for i in range(70)
    ]
    assert len(by_key(records)) == 2
    clock = ManualClock(window_ms + 500)
    monitor = fast.monitor(clock)
    monitor.process(records)
    # When the window is judged
    clock.now = window_ms + 2_500
    (outcome,) = [
        monitor.process([block_record(layout, shard_map, "sensor-0001", window_ms + 2_000, approx_s=clock.now / 1000)])
    ]
    (decisions,) = judged([outcome], window_ms)
    # Then no key was hot, the entity was, and its split was announced
    assert decisions.hot_keys == ()
    (split,) = decisions.splits
    assert (split.entity, split.from_shards, split.to_shards) == (ALPHA, 1, 2)
    (note,) = fast.notifications()
    assert note["subject"] == f"Hot entity {ALPHA}: 700 WCU/s"
    assert note["body"]["kind"] == "hot_entity" and note["body"]["action"] == "split"
    assert note["body"]["to_shards"] == 2 and note["body"]["applied"] is True


def test_one_hot_key_is_one_message_until_the_cooldown_ends(fast: Aws) -> None:
    # Given splits are only recommended, so sensor-alpha-001 stays hot window after window
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T)
    monitors = [fast.monitor(clock, HOT_AUTO_APPLY_ENTITY="false") for _ in range(2)]
    outcomes = []
    for second in range(6):
        clock.now = T + second * 1000 + 500
        batch = writes(fast, shard_map, ALPHA, 600, T + second * 1000)
        if second == 3:
            batch += writes(fast, shard_map, BETA, 700, T + second * 1000)
        outcomes.append(monitors[second % 2].process(batch))
    hot_windows = [d for o in outcomes for d in o.windows_judged if d.hot_keys]
    assert len(hot_windows) == 4  # windows 0..3 judged so far, each with a hot key
    # Then alpha was announced once, beta once, and no window's map changed
    notes = fast.notifications()
    assert sorted(n["subject"] for n in notes) == [f"Hot entity {ALPHA}: 600 WCU/s", f"Hot entity {BETA}: 700 WCU/s"]
    assert all(n["body"]["applied"] is False for n in notes)
    assert store(fast, clock.now).load().version == 0
    assert sum(o.alerts_suppressed for o in outcomes) == 3
    # And an hour later, still hot, it is announced again
    clock.now = T + 3_600_000 + 500
    monitors[0].process(writes(fast, shard_map, ALPHA, 600, T + 3_600_000))
    clock.now = T + 3_602_500
    monitors[1].process(writes(fast, shard_map, "sensor-0001", 10, T + 3_602_000))
    assert [n["subject"] for n in fast.notifications()] == [f"Hot entity {ALPHA}: 600 WCU/s"]


class FailingPublish:
    def __init__(self, inner: Any, failures: int) -> None:
        self.inner = inner
        self.failures = failures

    def publish(self, **kwargs: Any) -> Any:
        if self.failures:
            self.failures -= 1
            raise ConnectionError("SNS unreachable")
        return self.inner.publish(**kwargs)


def test_a_message_that_could_not_be_sent_is_sent_by_a_later_window(fast: Aws) -> None:
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T)
    monitor = fast.monitor(clock, sns=FailingPublish(fast.sns, 1), HOT_AUTO_APPLY_ENTITY="false")
    outcomes = []
    for second in range(5):
        clock.now = T + second * 1000 + 500
        outcomes.append(monitor.process(writes(fast, shard_map, ALPHA, 600, T + second * 1000)))
    assert sum(o.alert_failures for o in outcomes) == 1
    assert sum(o.alerts_sent for o in outcomes) == 1
    assert len(fast.notifications()) == 1


class FailingQuery:
    """Once armed, the next read of a window's counters fails (a timeout after retries)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.armed = False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def query(self, **kwargs: Any) -> Any:
        if self.armed:
            self.armed = False
            raise TimeoutError("read timed out")
        return self.inner.query(**kwargs)


def test_a_window_whose_judging_fails_is_released_and_judged_by_the_next_invocation(fast: Aws) -> None:
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T + 500)
    faulty = FailingQuery(fast.dynamodb)
    broken = fast.monitor(clock, dynamodb=faulty)
    healthy = fast.monitor(clock)
    broken.process(writes(fast, shard_map, ALPHA, 600, T))
    # When judging the first window due at 06:00:02 (05:59:59) fails
    clock.now = T + 2_000
    faulty.armed = True
    failing = broken.process(writes(fast, shard_map, "sensor-0001", 10, T + 1_000))
    assert failing.close_failures == 1
    assert [d.window_start_ms for d in failing.windows_judged] == [T]
    # Then it is released, not lost: the next invocation (another container) judges it
    later = healthy.process(writes(fast, shard_map, "sensor-0001", 10, T + 1_000))
    assert [d.window_start_ms for d in later.windows_judged] == [T - 1_000]
    claims = fast.control_items("close#")
    assert claims and all(c["state"]["S"] == "done" for c in claims)


def test_an_expired_claim_is_taken_over_and_a_live_one_is_respected(fast: Aws) -> None:
    clock = ManualClock(T + 2_500)
    for start, lease in ((T - 1_000, T), (T, T + 60_000)):
        fast.dynamodb.put_item(
            TableName=CONTROL,
            Item={
                "pk": {"S": f"close#{format_ts(start)}"},
                "sk": {"S": "window"},
                "state": {"S": "claimed"},
                "owner": {"S": "a container that died"},
                "lease_until": {"N": str(lease)},
            },
        )
    outcome = fast.monitor(clock).process(writes(fast, ShardMap.initial(MINUTE, 4), "sensor-0001", 10, T + 2_000))
    judged_starts = [d.window_start_ms for d in outcome.windows_judged]
    assert T - 1_000 in judged_starts and T not in judged_starts


def test_a_split_entity_scales_down_only_after_enough_quiet_windows(fast: Aws) -> None:
    # Given sensor-alpha-001 in 5 sub-shards since 05:59, busy at 2,000 WCU/s until 06:00
    shard_map = split_since(fast, ALPHA, 5, T - 60_000)
    clock = ManualClock(T)
    monitor = fast.monitor(clock)
    versions: dict[int, int] = {}
    for second in range(-3, 6):
        rate = 2_000 if second < 0 else 100
        clock.now = T + second * 1000 + 500
        monitor.process(writes(fast, shard_map, ALPHA, rate, T + second * 1000))
        versions[second] = store(fast, clock.now).load().version
    # Then nothing changed while fewer than three quiet windows had been judged
    # (window w is judged two seconds after it starts)
    assert all(versions[s] == 1 for s in range(-3, 4))
    # And once windows 0, 1 and 2 were all quiet, it goes back to its base key at the next boundary
    assert versions[4] == 2
    final = store(fast, clock.now).load()
    assert final.entity_shards_at(ALPHA, T + 59_999) == 5
    assert final.entity_shards_at(ALPHA, T + 60_000) == 1


def test_a_window_without_counted_writes_never_starts_a_scale_down(fast: Aws) -> None:
    # Given sensor-alpha-001 in 5 sub-shards, and a scale-down after a single quiet window
    shard_map = split_since(fast, ALPHA, 5, T - 60_000)
    clock = ManualClock(T + 3_500)
    monitor = fast.monitor(clock, HOT_SCALE_DOWN_WINDOWS="1")
    # When windows in which nothing at all was counted are judged (the stream just started)
    outcome = monitor.process(writes(fast, shard_map, "sensor-0001", 10, T + 3_000))
    assert len(outcome.windows_judged) == 3
    assert all(not d.scale_downs for d in outcome.windows_judged)
    assert store(fast, clock.now).load().version == 1
    # Then only a window with writes counted in it (none of them alpha's) shows alpha quiet
    clock.now = T + 5_500
    outcome = monitor.process(writes(fast, shard_map, "sensor-0001", 10, T + 5_000))
    (with_writes,) = [d for d in outcome.windows_judged if d.window_start_ms == T + 3_000]
    assert [(d.entity, d.to_shards) for d in with_writes.scale_downs] == [(ALPHA, 1)]


def test_top_keys_and_entities_are_published_with_bounded_dimensions(
    fast: Aws, handler_module: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T + 500)
    monitor = fast.monitor(clock)
    batch = [r for i in range(12) for r in writes(fast, shard_map, f"sensor-{i:04d}", 10 * (i + 1), T)]
    invoke(handler_module, stream_event(batch), capsys, monitor=monitor)
    clock.now = T + 2_500
    invocation = invoke(
        handler_module, stream_event(writes(fast, shard_map, "sensor-0000", 10, T + 2_000)), capsys, monitor=monitor
    )
    keys = invocation.dimensioned("KeyWriteUnitsPerSecond")
    entities = invocation.dimensioned("EntityWriteUnitsPerSecond")
    # The detector's top 5: of the 12 entities, and every one of the 4 keys (N = 4)
    assert (len(keys), len(entities)) == (4, 5)
    assert [e["Entity"] for e in entities] == [f"sensor-{i:04d}" for i in range(11, 6, -1)]
    assert [e["EntityWriteUnitsPerSecond"] for e in entities] == [[120.0], [110.0], [100.0], [90.0], [80.0]]
    # Partition keys are named without their bucket, so a key is one series across buckets
    assert all(len(k["PartitionKey"]) == 4 and k["PartitionKey"].isdigit() for k in keys)
    assert all("#" in k["partition_key"] for k in keys)  # the full key is in the log record
    assert invocation.metric("WindowsJudged") >= 1


def test_late_records_are_counted_and_reported(fast: Aws) -> None:
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T + 2_500)
    response, outcome = run(fast.monitor(clock), stream_event(writes(fast, shard_map, "sensor-0001", 50, T)))
    assert response == {"batchItemFailures": []}
    assert outcome.late == 5 and outcome.counted == 5


def test_ttl_deletions_and_other_tables_never_raise_an_alarm(fast: Aws) -> None:
    # Given a storm of TTL deletions and another table's writes, all on one key, far over the threshold
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T + 500)
    monitor = fast.monitor(clock)
    ttl = writes(fast, shard_map, ALPHA, 5_000, T, event_name="REMOVE", ttl=True)
    foreign = writes(fast, shard_map, ALPHA, 5_000, T, table="other-readings")
    response, outcome = run(monitor, stream_event(ttl + foreign))
    assert response == {"batchItemFailures": []}
    assert outcome.counted == 0
    clock.now = T + 2_500
    _, later = run(monitor, stream_event(writes(fast, shard_map, "sensor-0001", 10, T + 2_000)))
    (window,) = [d for d in later.windows_judged if d.window_start_ms == T]
    assert window.hot_keys == () and not window.has_changes
    assert fast.notifications() == []
    assert store(fast, clock.now).load().version == 0


@pytest.mark.parametrize("auto_apply", [False, True])
def test_a_crowded_base_key_asks_for_a_larger_global_n(fast: Aws, auto_apply: bool) -> None:
    # Given 40 sensors of 20 WCU/s each that all hash onto base shard 0 of N = 4
    shard_map = ShardMap.initial(MINUTE, 4)
    crowd = [e for e in (f"sensor-{i:05d}" for i in range(1000)) if shard_of(e, 4) == 0][:40]
    clock = ManualClock(T + 500)
    monitor = fast.monitor(clock, HOT_AUTO_APPLY_GLOBAL=str(auto_apply).lower())
    monitor.process([r for e in crowd for r in writes(fast, shard_map, e, 20, T)])
    clock.now = T + 2_500
    monitor.process(writes(fast, shard_map, "sensor-0001", 10, T + 2_000))
    # Then one notification names the key, blames no entity, and says N = ceil(4 x 800 / 400) = 8
    (note,) = fast.notifications()
    assert note["subject"] == "Hot partition key 0000: 800 WCU/s from many entities"
    assert note["body"]["crowded"] is True and "entity" not in note["body"]
    assert (note["body"]["from_shards"], note["body"]["to_shards"]) == (4, 8)
    assert note["body"]["applied"] is auto_apply
    final = store(fast, clock.now).load()
    assert final.global_shards_at(T + 60_000) == (8 if auto_apply else 4)
    assert final.global_shards_at(T + 59_999) == 4


def test_a_window_with_an_unreadable_run_counts_the_others(fast: Aws) -> None:
    # Given a window's runs, and a run item someone mangled
    shard_map = ShardMap.initial(MINUTE, 4)
    clock = ManualClock(T + 500)
    monitor = fast.monitor(clock)
    monitor.process(writes(fast, shard_map, ALPHA, 600, T))
    fast.dynamodb.put_item(
        TableName=CONTROL,
        Item={
            "pk": {"S": f"load#{format_ts(T)}#00"},
            "sk": {"S": "run#readings#1"},
            "load": {"S": '{"k": {"x": [1]}}'},
            "window_ms": {"N": "1000"},
        },
    )
    # When the window is read back, Then the good runs are all there and the bad one is skipped
    window = fast.counters().read_window(T, 1_000)
    assert window.entities[ALPHA].wcu == 600 and set(window.entities) == {ALPHA}


def test_a_judged_window_whose_loads_cannot_be_read_holds_a_scale_down_back(fast: Aws) -> None:
    # Given sensor-alpha-001 in 5 sub-shards and quiet, with a scale-down after three quiet windows
    shard_map = split_since(fast, ALPHA, 5, T - 60_000)
    clock = ManualClock(T)
    monitor = fast.monitor(clock)
    for second in range(3):
        clock.now = T + second * 1000 + 500
        monitor.process(writes(fast, shard_map, ALPHA, 100, T + second * 1000))
    # And the load window 06:00:00 was judged with is mangled
    page = {"pk": {"S": f"close#{format_ts(T)}"}, "sk": {"S": "entities#000"}}
    assert "Item" in fast.dynamodb.get_item(TableName=CONTROL, Key=page)
    fast.dynamodb.put_item(TableName=CONTROL, Item={**page, "load": {"S": "not json"}})
    # When the next windows are judged, Then nothing scales down while that window is in the span
    for second in range(3, 5):
        clock.now = T + second * 1000 + 500
        monitor.process(writes(fast, shard_map, ALPHA, 100, T + second * 1000))
    assert store(fast, clock.now).load().version == 1
    # And once it has left the span, the scale-down comes
    clock.now = T + 5_500
    monitor.process(writes(fast, shard_map, ALPHA, 100, T + 5_000))
    assert store(fast, clock.now).load().version == 2


def test_judging_a_window_folds_the_changes_retention_has_passed(fast: Aws) -> None:
    # Given sensor-alpha-001 split three hours ago and back on its base key since two, with one hour of retention
    hour = 3_600_000
    store(fast, T - 4 * hour).apply(lambda m: m.with_entity(ALPHA, 5, T - 3 * hour, now_ms=T - 4 * hour), reason="up")
    store(fast, T - 3 * hour).apply(lambda m: m.with_entity(ALPHA, 1, T - 2 * hour, now_ms=T - 3 * hour), reason="down")
    assert store(fast, T).load().entity_history[ALPHA][-1].shards == 1
    # When the detector judges a window
    clock = ManualClock(T + 2_500)
    monitor = fast.monitor(clock, RETENTION="1h")
    assert monitor.process(writes(fast, ShardMap.initial(MINUTE, 4), BETA, 10, T + 2_000)).windows_judged
    # Then the entity, on its default count since before retention began, has left the map
    compacted = store(fast, clock.now).load()
    assert ALPHA not in compacted.entity_history and compacted.version == 3
    (stored,) = fast.control_items("shardmap")
    assert "folded" in stored["reason"]["S"]
