"""Parsing stream records: what counts, what is skipped and why. Nothing here may raise."""

from __future__ import annotations

import math
from typing import Any

import pytest

from hotkeys.detector import Observation
from hotkeys.records import SkipKind, Skipped, parse_record
from keydesign import Layout, Reading, ShardMap, build_item, item_size
from keydesign.layouts import key_family, parse_keys
from tests.unit.hotkeys.stream_events import TABLE, item_record, stream_record

T0 = 1_795_000_000  # 2026-11-18T...: epoch seconds
HYBRID = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix=TABLE)


def reading(entity: str = "sensor-0001", ts_ms: int = T0 * 1000, event_id: str = "e1") -> Reading:
    return Reading(entity, event_id, ts_ms, {"temp": 21.5})


def hybrid_item(entity: str = "sensor-0001", shard_map: ShardMap | None = None) -> dict[str, object]:
    shard_map = shard_map or ShardMap.initial(HYBRID.bucket, 4)
    r = reading(entity)
    return build_item(r, HYBRID.key_for(r, shard_map))


def parse(raw: object, kind: str = "hybrid") -> Observation | Skipped:
    return parse_record(raw, layout_kind=kind, table_prefix=TABLE)  # type: ignore[arg-type]


def test_an_insert_of_a_hybrid_base_key_is_observed_with_its_entity() -> None:
    # Given the stream record of a reading written to a shared base key
    item = hybrid_item()
    # When it is parsed
    obs = parse(item_record(item, approx_s=T0 + 0.9))
    # Then the entity comes from the sort key and the key is marked shared
    assert isinstance(obs, Observation)
    assert obs.partition_key == item["pk"]
    assert obs.entity == "sensor-0001"
    assert obs.shared_key is True
    assert obs.approx_time_ms == T0 * 1000
    assert obs.event_name == "INSERT"
    assert obs.size_bytes == item_size({"pk": item["pk"], "sk": item["sk"]})


def test_a_split_entitys_own_key_is_not_shared() -> None:
    base = ShardMap.initial(HYBRID.bucket, 4)
    split = base.with_entity("sensor-alpha-001", 5, 3_600_000, now_ms=0)
    item = hybrid_item("sensor-alpha-001", split)
    assert "#sensor-alpha-001#" in str(item["pk"])
    obs = parse(item_record(item, approx_s=T0))
    assert isinstance(obs, Observation)
    assert obs.entity == "sensor-alpha-001"
    assert obs.shared_key is False


@pytest.mark.parametrize("kind", ["random", "calculated"])
def test_suffix_layouts_take_the_entity_from_the_partition_key(kind: str) -> None:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix=TABLE)
    r = reading("pump-7")
    key = layout.key_for(r, ShardMap.initial(layout.bucket, 8))
    obs = parse(stream_record(key.pk, key.sk, approx_s=T0), kind)
    assert isinstance(obs, Observation)
    assert (obs.entity, obs.shared_key) == ("pump-7", False)


def test_a_user_remove_is_counted_and_a_ttl_remove_is_not() -> None:
    item = hybrid_item()
    user = parse(item_record(item, approx_s=T0, event_name="REMOVE"))
    assert isinstance(user, Observation) and user.event_name == "REMOVE"
    ttl = parse(item_record(item, approx_s=T0, event_name="REMOVE", ttl=True))
    assert isinstance(ttl, Skipped) and ttl.kind is SkipKind.TTL_DELETE


def test_a_service_principal_other_than_dynamodb_is_a_user_write() -> None:
    record = item_record(hybrid_item(), approx_s=T0, event_name="REMOVE")
    record["userIdentity"] = {"type": "Service", "principalId": "glue.amazonaws.com"}
    assert isinstance(parse(record), Observation)


def test_modify_with_images_is_sized_by_the_larger_image() -> None:
    # Given a NEW_AND_OLD_IMAGES record of a 3 KB item
    item = hybrid_item()
    big = {**item, "blob": "x" * 3000}
    record = item_record(item, approx_s=T0, event_name="MODIFY", new_image=big)
    record["dynamodb"]["OldImage"] = record["dynamodb"]["NewImage"] | {"blob": {"S": "y"}}
    record["dynamodb"]["SizeBytes"] = 9_999  # the record's size: both images and the keys
    # Then the write is sized by the item, not the record (which would double it)
    obs = parse(record)
    assert isinstance(obs, Observation)
    assert obs.size_bytes == item_size(big)


@pytest.mark.parametrize(
    ("keys", "why"),
    [
        ({"id": {"S": "order-1"}}, "another table's key schema"),
        ({"pk": {"S": "a"}, "sk": {"S": "b"}, "x": {"S": "c"}}, "three key attributes"),
        ({"pk": {"N": "1"}, "sk": {"S": "b"}}, "a numeric partition key"),
        ({"pk": {"S": "user#42"}, "sk": {"S": "profile"}}, "single-table design keys"),
        ({"pk": {"S": "0001#2026-11-22T06:00"}, "sk": {"S": "bad entity!#2026-11-22T06:00:00.000Z#e"}}, "bad id"),
        ({"pk": {"S": "0001#2026-11-22T06:00#a#001"}, "sk": {"S": "b#2026-11-22T06:00:00.000Z#e"}}, "entity mismatch"),
    ],
)
def test_other_key_schemas_are_foreign(keys: dict[str, Any], why: str) -> None:
    result = parse(stream_record("", "", approx_s=T0, keys=keys))
    assert isinstance(result, Skipped), why
    assert result.kind is SkipKind.FOREIGN, why


def test_hybrid_keys_are_foreign_to_a_calculated_layout_and_back() -> None:
    item = hybrid_item()
    assert parse(item_record(item, approx_s=T0), "calculated") == Skipped(
        SkipKind.FOREIGN, f"key {item['pk']!r} is not a calculated readings key"
    )
    assert parse_keys("pump-7#3", "2026-11-22T06:00:00.000Z#e1", "hybrid") is None


def test_another_tables_stream_is_foreign_but_a_period_table_is_ours() -> None:
    item = hybrid_item()
    other = parse(item_record(item, approx_s=T0, table="orders"))
    assert isinstance(other, Skipped) and other.kind is SkipKind.FOREIGN
    period = parse(item_record(item, approx_s=T0, table=f"{TABLE}-2026-11-22"))
    assert isinstance(period, Observation)


def _garbage() -> list[tuple[object, str]]:
    good = item_record(hybrid_item(), approx_s=T0)

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
        (edit("dynamodb.SizeBytes", _DELETE), "no size"),
        (edit("dynamodb.SizeBytes", "112"), "size a string"),
        (edit("dynamodb.SizeBytes", True), "size a boolean"),
        (edit("dynamodb.SizeBytes", -5), "negative size"),
        (edit("dynamodb.SizeBytes", 10**9), "absurd size"),
        (edit("dynamodb.ApproximateCreationDateTime", _DELETE), "no time"),
        (edit("dynamodb.ApproximateCreationDateTime", "2026-11-22T06:00:00Z"), "time a string"),
        (edit("dynamodb.ApproximateCreationDateTime", T0 * 1000), "time in milliseconds"),
        (edit("dynamodb.ApproximateCreationDateTime", math.nan), "NaN time"),
        (edit("dynamodb.ApproximateCreationDateTime", math.inf), "infinite time"),
        (edit("dynamodb.NewImage", {"blob": {"X": "?"}}), "image of unknown type"),
        (edit("dynamodb.NewImage", {"blob": {"B": "not base64!"}}), "bad binary"),
        (edit("dynamodb.NewImage", {"n": {"N": "twelve"}}), "bad number"),
        (edit("dynamodb.NewImage", "image"), "image a string"),
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
    record = item_record(hybrid_item(), approx_s=T0)
    record["eventSource"] = "aws:kinesis"
    result = parse(record)
    assert isinstance(result, Skipped) and result.kind is SkipKind.FOREIGN


def test_images_of_every_type_are_sized_by_dynamodb_rules() -> None:
    image = {
        "s": {"S": "héllo"},
        "n": {"N": "123.45"},
        "b": {"B": "AAEC"},
        "t": {"BOOL": True},
        "z": {"NULL": True},
        "ss": {"SS": ["a", "bc"]},
        "ns": {"NS": ["1", "22"]},
        "bs": {"BS": ["AA=="]},
        "m": {"M": {"k": {"S": "v"}}},
        "l": {"L": [{"S": "v"}, {"N": "1"}]},
    }
    record = item_record(hybrid_item(), approx_s=T0)
    record["dynamodb"]["NewImage"] = image
    obs = parse(record)
    assert isinstance(obs, Observation)
    plain = {
        "s": "héllo",
        "n": 123.45,
        "b": b"\x00\x01\x02",
        "t": True,
        "z": None,
        "ss": {"a", "bc"},
        "ns": {1, 22},
        "bs": {b"\x00"},
        "m": {"k": "v"},
        "l": ["v", 1],
    }
    assert obs.size_bytes == item_size(plain)


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
