"""Packing readings into records and records into PutRecords calls: the limits hold."""

from __future__ import annotations

import json
import random

import pytest

from keydesign import shard_of
from keydesign.writetier import WriteTier
from producer.packing import (
    KINESIS_MAX_RECORD_BYTES,
    MAX_BATCH_BYTES,
    BatchPlanner,
    PackedRecord,
    Packer,
    ReadingTooLarge,
    partitioner,
)


def _reading(entity: str, n: int, pad: int = 0) -> dict[str, object]:
    out: dict[str, object] = {"entity_id": entity, "timestamp": 1_795_000_000_000 + n, "measures": {"t": n}}
    if pad:
        out["dimensions"] = {"pad": "x" * pad}
    return out


def test_records_never_exceed_the_limit_and_never_split_a_reading() -> None:
    packer = Packer(max_record_bytes=4_096, strategy="entity")
    records: list[PackedRecord] = []
    sent = [_reading(f"s-{i % 3}", i, pad=i % 200) for i in range(2_000)]
    for reading in sent:
        records.extend(packer.add(reading))
    records.extend(packer.flush())
    assert all(r.size <= 4_096 for r in records)
    decoded = [reading for r in records for reading in json.loads(r.data)]
    assert sorted(decoded, key=lambda x: str(x["timestamp"])) == sorted(sent, key=lambda x: str(x["timestamp"]))
    assert all(r.readings == len(json.loads(r.data)) for r in records)
    # the records are well filled: every closed record but the last per key is at least 90% full
    full = [r for r in records[:-3]]
    assert sum(r.size for r in full) / len(full) > 0.9 * 4_096


def test_each_record_carries_one_partition_key_and_readings_of_that_key_only() -> None:
    packer = Packer(max_record_bytes=2_048, strategy="group", groups=8)
    records = [r for i in range(500) for r in packer.add(_reading(f"sensor-{i % 50}", i))] + packer.flush()
    key = partitioner("group", groups=8)
    for record in records:
        assert {key(x["entity_id"]) for x in json.loads(record.data)} == {record.partition_key}
    assert {r.partition_key for r in records} <= {f"g{n:04d}" for n in range(8)}


def test_group_keys_are_the_stable_hash_of_the_entity() -> None:
    key = partitioner("group", groups=256)
    assert key("sensor-alpha-001") == f"g{shard_of('sensor-alpha-001', 256):04d}"
    # the write tier's own key: a Kinesis shard holds whole groups of the deployment's write tier
    assert partitioner("group", groups=1_024)("device-0000001") == WriteTier(1_024).partition_key("device-0000001")
    assert partitioner("entity")("sensor-alpha-001") == "sensor-alpha-001"


def test_random_keys_spread_records_and_share_one_open_record() -> None:
    packer = Packer(max_record_bytes=1_024, strategy="random", rng=random.Random(1))
    records = [r for i in range(300) for r in packer.add(_reading("hot", i))] + packer.flush()
    assert len({r.partition_key for r in records}) == len(records)
    assert all(r.size <= 1_024 for r in records)
    assert sum(r.readings for r in records) == 300


def test_a_reading_bigger_than_the_record_size_travels_alone_and_one_over_1_mib_is_refused() -> None:
    packer = Packer(max_record_bytes=1_024, strategy="entity")
    assert packer.add(_reading("a", 1)) == []
    big = packer.add(_reading("a", 2, pad=5_000))
    assert [r.readings for r in big] == [1, 1]  # the open record closes, then the big one alone
    assert big[1].size > 1_024
    with pytest.raises(ReadingTooLarge, match="1 MiB"):
        packer.add(_reading("a", 3, pad=KINESIS_MAX_RECORD_BYTES))


def test_batches_hold_at_most_500_records_and_5_mib() -> None:
    planner = BatchPlanner()
    small = [PackedRecord("k", b"x" * 100, 1) for _ in range(1_200)]
    batches = list(planner.add(small)) + list(planner.drain())
    assert [len(b) for b in batches] == [500, 500, 200]
    big = [PackedRecord("k", b"x" * 1_000_000, 1) for _ in range(12)]
    batches = list(planner.add(big)) + list(planner.drain())
    assert [len(b) for b in batches] == [5, 5, 2]
    assert all(sum(r.size for r in b) <= MAX_BATCH_BYTES for b in batches)


@pytest.mark.parametrize(
    ("size", "strategy", "groups"),
    [(100, "group", 8), (4_096, "striped", 8), (4_096, "group", 0), (4_096, "group", 10_000)],
)
def test_bad_packing_settings_are_refused(size: int, strategy: str, groups: int) -> None:
    with pytest.raises(ValueError):
        Packer(max_record_bytes=size, strategy=strategy, groups=groups)
