"""Parsing stream records: what counts, what it cost, what is skipped and why. Nothing here may raise."""

from __future__ import annotations

import math
import random
from typing import Any

import pytest

from hotkeys.detector import Observation
from hotkeys.records import SkipKind, Skipped, parse_record, table_of
from keydesign import Block, Layout, Reading, ShardMap
from keydesign.layouts import key_family, parse_keys
from tests.unit.hotkeys.stream_events import TABLE, item_record, stream_arn, stream_record

T0 = 1_795_000_000  # 2026-11-18T...: epoch seconds
HYBRID = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=TABLE)


def block(
    entity: str = "sensor-0001", shard_map: ShardMap | None = None, *, readings: int = 1, layout: Layout = HYBRID
) -> Block:
    """The one block ingest stores for ``readings`` readings of ``entity`` in one batch."""
    shard_map = shard_map or ShardMap.initial(layout.bucket, 4)
    rng = random.Random(7)
    batch = [
        (Reading(entity, f"e{i}", T0 * 1000 + i * 5, {"temp": rng.uniform(-40, 60), "rh": rng.random()}), 1)
        for i in range(readings)
    ]
    (only,) = layout.pack(batch, shard_map)
    return only


def parse(raw: object, kind: str = "hybrid") -> Observation | Skipped:
    return parse_record(raw, layout_kind=kind, table_prefix=TABLE)  # type: ignore[arg-type]


def test_an_insert_of_a_hybrid_base_key_is_observed_with_its_entity_and_write_units() -> None:
    # Given the stream record of a block written to a shared base key
    stored = block()
    # When it is parsed
    obs = parse(item_record(stored.item(), approx_s=T0 + 0.9))
    # Then the entity comes from the sort key, the key is marked shared, and the block's units are counted
    assert obs == Observation(
        partition_key=stored.key.pk,
        entity="sensor-0001",
        write_units=stored.write_units,
        approx_time_ms=T0 * 1000,
        event_name="INSERT",
        shared_key=True,
    )


def test_a_block_over_one_kb_counts_exactly_what_it_was_billed_from_its_keys_alone() -> None:
    # Given a block of 800 readings (several KB) on a KEYS_ONLY stream, whose record holds only the keys
    stored = block(readings=800)
    assert stored.write_units > 3
    record = item_record(stored.item(), approx_s=T0)
    assert record["dynamodb"]["SizeBytes"] < 1024  # the record's size: one write unit's worth
    # Then the observation carries the write units the put was billed, read from the sort key
    obs = parse(record)
    assert isinstance(obs, Observation)
    assert obs.write_units == stored.write_units
    # And a user delete of it costs the same (a delete is billed by the size of what it deletes)
    deleted = parse(item_record(stored.item(), approx_s=T0, event_name="REMOVE"))
    assert isinstance(deleted, Observation) and deleted.write_units == stored.write_units


def test_images_and_record_size_are_not_what_is_counted() -> None:
    # Given a NEW_IMAGE record (a stream switched to images) whose declared size says something else
    stored = block(readings=300)
    record = item_record(stored.item(), approx_s=T0, new_image={"pk": stored.key.pk, "v": "x" * 9000})
    record["dynamodb"]["SizeBytes"] = 50_000
    # Then the key's write units are still what counts
    obs = parse(record)
    assert isinstance(obs, Observation) and obs.write_units == stored.write_units


def test_a_split_entitys_own_key_is_not_shared() -> None:
    base = ShardMap.initial(HYBRID.bucket, 4)
    split = base.with_entity("sensor-alpha-001", 5, 3_600_000, now_ms=0)
    stored = block("sensor-alpha-001", split)
    assert "#sensor-alpha-001#" in stored.key.pk
    obs = parse(item_record(stored.item(), approx_s=T0))
    assert isinstance(obs, Observation)
    assert obs.entity == "sensor-alpha-001"
    assert obs.shared_key is False


@pytest.mark.parametrize("kind", ["random", "calculated"])
def test_suffix_layouts_take_the_entity_from_the_partition_key(kind: str) -> None:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix=TABLE)
    stored = block("pump-7", ShardMap.initial(layout.bucket, 8), readings=400, layout=layout)
    obs = parse(stream_record(stored.key.pk, stored.key.sk, approx_s=T0), kind)
    assert isinstance(obs, Observation)
    assert (obs.entity, obs.shared_key, obs.write_units) == ("pump-7", False, stored.write_units)


def test_a_user_remove_is_counted_and_a_ttl_remove_is_not() -> None:
    item = block().item()
    user = parse(item_record(item, approx_s=T0, event_name="REMOVE"))
    assert isinstance(user, Observation) and user.event_name == "REMOVE"
    ttl = parse(item_record(item, approx_s=T0, event_name="REMOVE", ttl=True))
    assert isinstance(ttl, Skipped) and ttl.kind is SkipKind.TTL_DELETE


def test_a_service_principal_other_than_dynamodb_is_a_user_write() -> None:
    record = item_record(block().item(), approx_s=T0, event_name="REMOVE")
    record["userIdentity"] = {"type": "Service", "principalId": "glue.amazonaws.com"}
    assert isinstance(parse(record), Observation)


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        ({"id": {"S": "order-1"}}, "another table's key schema"),
        ({"pk": {"S": "a"}, "sk": {"S": "b"}, "x": {"S": "c"}}, "three key attributes"),
        ({"pk": {"N": "1"}, "sk": {"S": "b"}}, "a numeric partition key"),
        ({"pk": {"S": "user#42"}, "sk": {"S": "profile"}}, "single-table design keys"),
        (
            {"pk": {"S": "0001#2026-11-22T06:00"}, "sk": {"S": "bad entity!#2026-11-22T06:00:00.000Z#e1"}},
            "a key from before blocks with a bad id",
        ),
        (
            {"pk": {"S": "0001#2026-11-22T06:00#a#001"}, "sk": {"S": "b#2026-11-22T06:00:00.000Z#e1"}},
            "a key from before blocks of another entity's partition",
        ),
        (
            {
                "pk": {"S": "0001#2026-11-22T06:00"},
                "sk": {"S": "bad entity!#2026-11-22T06:00:00.000Z#00ff00ff00ff00ff#1"},
            },
            "bad id",
        ),
        (
            {"pk": {"S": "0001#2026-11-22T06:00#a#001"}, "sk": {"S": "b#2026-11-22T06:00:00.000Z#00ff00ff00ff00ff#1"}},
            "entity mismatch",
        ),
        (
            {"pk": {"S": "0001#2026-11-22T06:00"}, "sk": {"S": "sensor-1#2026-11-22T06:00:00.000Z#00ff00ff00ff00ff#0"}},
            "zero write units",
        ),
    ],
)
def test_other_key_schemas_are_foreign(keys: dict[str, Any], why: str) -> None:
    result = parse(stream_record("", "", approx_s=T0, keys=keys))
    assert isinstance(result, Skipped), why
    assert result.kind is SkipKind.FOREIGN, why


@pytest.mark.parametrize(
    ("kind", "pk", "sk", "shared"),
    [
        ("hybrid", "0001#2026-11-22T06:00", "sensor-1#2026-11-22T06:00:00.000Z#e1", True),
        ("hybrid", "0001#2026-11-22T06:00#sensor-1#002", "sensor-1#2026-11-22T06:00:00.000Z#e1", False),
        ("random", "sensor-1#3", "2026-11-22T06:00:00.000Z#e1", False),
        ("calculated", "sensor-1#0", "2026-11-22T06:00:00.000Z#h-00ff", False),
    ],
)
def test_an_item_from_before_blocks_counts_the_write_units_of_its_size(
    kind: str, pk: str, sk: str, shared: bool
) -> None:
    # Given the records of a table deployed before blocks, whose items hold one reading and whose
    # sort keys carry no write units: a user's delete (billed), a larger item's, a TTL delete
    user = parse(stream_record(pk, sk, approx_s=T0, event_name="REMOVE", size_bytes=300), kind)
    large = parse(stream_record(pk, sk, approx_s=T0, event_name="REMOVE", size_bytes=2_100), kind)
    expired = parse(stream_record(pk, sk, approx_s=T0, event_name="REMOVE", ttl=True), kind)
    no_size = stream_record(pk, sk, approx_s=T0, event_name="REMOVE")
    del no_size["dynamodb"]["SizeBytes"]

    # Then each counts what it was billed before blocks, from the record's size (1 KB a unit), for
    # the entity in its keys; a TTL delete is one, not a foreign key; and without a size, malformed
    assert user == Observation(
        partition_key=pk,
        entity="sensor-1",
        write_units=1,
        approx_time_ms=T0 * 1000,
        event_name="REMOVE",
        shared_key=shared,
    )
    assert isinstance(large, Observation) and large.write_units == 3
    assert expired == Skipped(SkipKind.TTL_DELETE, "deleted by TTL")
    assert parse(no_size, kind) == Skipped(SkipKind.MALFORMED, "dynamodb.SizeBytes must be a whole number of bytes")


def test_hybrid_keys_are_foreign_to_a_calculated_layout_and_back() -> None:
    item = block().item()
    assert parse(item_record(item, approx_s=T0), "calculated") == Skipped(
        SkipKind.FOREIGN, f"key {item['pk']!r} is not a calculated readings key"
    )
    assert parse_keys("pump-7#3", "2026-11-22T06:00:00.000Z#00ff00ff00ff00ff#1", "hybrid") is None


def test_another_tables_stream_is_foreign_but_a_period_table_is_ours() -> None:
    item = block().item()
    other = parse(item_record(item, approx_s=T0, table="orders"))
    assert isinstance(other, Skipped) and other.kind is SkipKind.FOREIGN
    period = item_record(item, approx_s=T0, table=f"{TABLE}-2026-11-22")
    assert isinstance(parse(period), Observation)
    # Each period's table has its own stream: a record names the one it came from
    assert table_of(period) == f"{TABLE}-2026-11-22"
    assert table_of({"eventSourceARN": stream_arn()}) == TABLE
    assert table_of({}) == ""


def _garbage() -> list[tuple[object, str]]:
    good = item_record(block().item(), approx_s=T0)

    def edit(path: str, value: object) -> dict[str, Any]:
        record: dict[str, Any] = {**good, "dynamodb": dict(good["dynamodb"])}
        target = record["dynamodb"] if path.startswith("dynamodb.") else record
        name = path.removeprefix("dynamodb.")
        if value is _DELETE:
            target.pop(name)
        else:
            target[name] = value
        return record

    return [
        (None, "None"),
        ("INSERT", "a string"),
        ([good], "a list"),
        ({}, "an empty object"),
        (edit("eventName", "UPSERT"), "unknown event"),
        (edit("eventName", _DELETE), "no event name"),
        (edit("dynamodb", "keys"), "dynamodb not an object"),
        (edit("dynamodb.Keys", _DELETE), "no keys"),
        (edit("dynamodb.Keys", []), "keys a list"),
        (edit("dynamodb.SequenceNumber", _DELETE), "no sequence number"),
        (edit("dynamodb.SequenceNumber", 42), "sequence number a number"),
        (edit("dynamodb.ApproximateCreationDateTime", _DELETE), "no time"),
        (edit("dynamodb.ApproximateCreationDateTime", "2026-11-22T06:00:00Z"), "time a string"),
        (edit("dynamodb.ApproximateCreationDateTime", T0 * 1000), "time in milliseconds"),
        (edit("dynamodb.ApproximateCreationDateTime", math.nan), "NaN time"),
        (edit("dynamodb.ApproximateCreationDateTime", math.inf), "infinite time"),
        (edit("eventSourceARN", "arn:aws:sqs:eu-west-1:1:queue"), "not a dynamodb arn"),
        (edit("eventSourceARN", 42), "arn a number"),
    ]


_DELETE = object()


@pytest.mark.parametrize(("raw", "why"), _garbage(), ids=[why for _, why in _garbage()])
def test_garbage_is_malformed_never_an_exception(raw: object, why: str) -> None:
    result = parse(raw)
    assert isinstance(result, Skipped), why
    assert result.kind is SkipKind.MALFORMED, f"{why}: {result}"
    assert result.reason


def test_an_event_from_another_source_is_foreign() -> None:
    record = item_record(block().item(), approx_s=T0)
    record["eventSource"] = "aws:kinesis"
    result = parse(record)
    assert isinstance(result, Skipped) and result.kind is SkipKind.FOREIGN


@pytest.mark.parametrize(
    ("pk", "kind", "family"),
    [
        ("0042#2026-11-22T06:00", "hybrid", "0042"),
        ("0042#2026-11-22T06:00#sensor-alpha-001#003", "hybrid", "0042#sensor-alpha-001#003"),
        ("pump-7#3", "calculated", "pump-7#3"),
        ("not-a-key", "hybrid", "not-a-key"),
    ],
)
def test_key_family_drops_the_bucket(pk: str, kind: str, family: str) -> None:
    assert key_family(pk, kind) == family  # type: ignore[arg-type]


@pytest.mark.parametrize("kind", ["hybrid", "random", "calculated"])
@pytest.mark.parametrize(
    ("pk", "sk"),
    [
        ("w#0007#2026-11-22T06", "2026-11-22T06:00:00.000Z#00ff00ff00ff#12"),  # a group item
        ("w#0007#2026-11-22T06", "!dense#sensor-1"),  # a dense mark
        ("s#0007#2026-11-22T06:00", "03#2026-11-22T06:00:00.000Z#00ff00ff00ff#2"),  # a sub-item
        ("0001#2026-11-22T06:00#c", "sensor-1#2026-11-22T06:00:00.000Z#00ff00ff00ff#3"),  # compacted, hybrid
        ("sensor-1#c", "2026-11-22T06:00:00.000Z#00ff00ff00ff#3"),  # compacted, the other layouts
    ],
)
def test_the_write_tiers_items_are_no_entitys_writes(kind: str, pk: str, sk: str) -> None:
    # The keys of the write tier (keydesign.writetier) parse as no entity's block, and are skipped as its own
    assert parse_keys(pk, sk, kind) is None  # type: ignore[arg-type]
    result = parse(stream_record("", "", approx_s=T0, keys={"pk": {"S": pk}, "sk": {"S": sk}}), kind)
    assert isinstance(result, Skipped)
    assert result.kind is SkipKind.WRITE_TIER
    assert key_family(pk, kind) == pk  # type: ignore[arg-type]


def test_an_entity_whose_key_looks_like_the_write_tiers_is_still_counted() -> None:
    # An entity named "w" writes w#<n> in the random layout: its own blocks, not a group's
    result = parse(stream_record("w#3", "2026-11-22T06:00:00.000Z#00ff00ff00ff#1", approx_s=T0), "random")
    assert isinstance(result, Observation)
    assert result.entity == "w"
