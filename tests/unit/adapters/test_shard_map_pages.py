"""The shard-map store's pages, against an in-memory table: how many there are, and when that changes.

Pages are made small here (``PAGE_BYTES`` patched) so a few dozen entities need several;
the store's DynamoDB calls are the three it makes, kept in a dict.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest
from botocore.exceptions import ClientError

from adapters import shard_map_store
from adapters.shard_map_store import ShardMapStore, ShardMapStoreError
from keydesign import Bucket, ShardMap, parse_timestamp

BUCKET = Bucket.parse("1h")
NOW = parse_timestamp("2026-11-22T06:10:00Z")
LATER = parse_timestamp("2026-12-01T00:00:00Z")


class Table:
    """GetItem, PutItem (with attribute_not_exists and version conditions) and DeleteItem on a dict."""

    def __init__(self) -> None:
        self.items: dict[tuple[str, str], dict[str, Any]] = {}
        self.puts = 0

    @staticmethod
    def _key(key: Mapping[str, Any]) -> tuple[str, str]:
        return key["pk"]["S"], key["sk"]["S"]

    def get_item(self, *, Key: Mapping[str, Any], **_: Any) -> dict[str, Any]:  # noqa: N803 - boto3's names
        item = self.items.get(self._key(Key))
        return {"Item": item} if item is not None else {}

    def put_item(self, *, Item: dict[str, Any], ConditionExpression: str, **kw: Any) -> dict[str, Any]:  # noqa: N803
        held = self.items.get(self._key(Item))
        expected = kw.get("ExpressionAttributeValues", {}).get(":expected", {}).get("N")
        refused = held is not None if expected is None else held is None or held["version"]["N"] != expected
        if refused:
            raise ClientError({"Error": {"Code": "ConditionalCheckFailedException", "Message": ""}}, "PutItem")
        self.puts += 1
        self.items[self._key(Item)] = Item
        return {}

    def delete_item(self, *, Key: Mapping[str, Any], **_: Any) -> dict[str, Any]:  # noqa: N803
        self.items.pop(self._key(Key), None)
        return {}

    def pages(self) -> int:
        return sum(1 for _, sk in self.items if sk.startswith("page#"))


@pytest.fixture(autouse=True)
def small_pages(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard_map_store, "PAGE_BYTES", 2_000)


def entities(count: int) -> dict[str, int]:
    return {f"sensor-{n:06d}": 2 + n % 7 for n in range(count)}


def with_entities(shard_map: ShardMap, wanted: dict[str, int]) -> ShardMap:
    """``shard_map`` with exactly ``wanted`` split from LATER (all in the future, so any set may be written)."""
    out = ShardMap(shard_map.bucket, shard_map.global_history, {}, shard_map.version)
    for entity, shards in wanted.items():
        out = out.with_entity(entity, shards, LATER, now_ms=NOW)
    return out


def test_the_page_count_grows_when_a_page_overflows_and_holds_while_the_pages_are_a_quarter_full() -> None:
    table = Table()
    store = ShardMapStore(table, "control", ShardMap.initial(BUCKET, 4), clock_ms=lambda: NOW)
    # A few entities fit in the head; more need pages, as many as keep each under PAGE_BYTES
    store.apply(lambda m: with_entities(m, entities(10)), reason="few")
    assert table.pages() == 0
    store.apply(lambda m: with_entities(m, entities(120)), reason="many")
    grown = table.pages()
    assert grown >= 4
    # Fewer entities, still more than a quarter of what the pages hold: the count stays
    store.apply(lambda m: with_entities(m, entities(60)), reason="fewer")
    assert table.pages() == grown
    # Under a quarter: the smallest count that fits
    store.apply(lambda m: with_entities(m, entities(12)), reason="far fewer")
    assert table.pages() < grown
    assert (
        store.load(bootstrap=False).entity_history
        == with_entities(ShardMap.initial(BUCKET, 4), entities(12)).entity_history
    )


def test_a_map_too_large_for_every_page_is_refused_before_anything_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(shard_map_store, "MAX_PAGES", 4)
    table = Table()
    store = ShardMapStore(table, "control", ShardMap.initial(BUCKET, 4), clock_ms=lambda: NOW)
    store.load()
    before = dict(table.items)
    with pytest.raises(ShardMapStoreError, match=r"do not fit in 4 pages of 2,000 bytes"):
        store.apply(lambda m: with_entities(m, entities(500)), reason="too many")
    assert table.items == before


def test_a_change_to_one_entity_rewrites_its_page_only() -> None:
    table = Table()
    store = ShardMapStore(table, "control", ShardMap.initial(BUCKET, 4), clock_ms=lambda: NOW)
    store.apply(lambda m: with_entities(m, entities(120)), reason="many")
    table.puts = 0
    store.apply(lambda m: m.with_entity("sensor-000007", 9, LATER, now_ms=NOW), reason="one")
    assert table.puts == 2  # its page, then the head


def test_a_page_put_whose_response_was_lost_is_used_not_left_behind() -> None:
    # Given a table whose first page put lands but answers as botocore's retry would: the condition failed
    class LostPageResponse(Table):
        lost = False

        def put_item(self, *, Item: dict[str, Any], ConditionExpression: str, **kw: Any) -> dict[str, Any]:  # noqa: N803
            response = super().put_item(Item=Item, ConditionExpression=ConditionExpression, **kw)
            if Item["sk"]["S"].startswith("page#") and not self.lost:
                self.lost = True
                super().put_item(Item=Item, ConditionExpression=ConditionExpression, **kw)  # the retry: refused
            return response

    table = LostPageResponse()
    store = ShardMapStore(table, "control", ShardMap.initial(BUCKET, 4), clock_ms=lambda: NOW)
    store.apply(lambda m: with_entities(m, entities(120)), reason="many")
    # When a change rewrites one page, and that page's answer is lost
    table.lost = False
    applied = store.apply(lambda m: m.with_entity("sensor-000007", 9, LATER, now_ms=NOW), reason="one")
    # Then it lands at the first attempt, naming that page, and every page stored is one the head names
    assert applied.attempts == 1
    head = table.items["shardmap", "current"]
    assert {sk for _, sk in table.items if sk != "current"} == {p["S"] for p in head["pages"]["L"]}
    assert ShardMapStore(table, "control", ShardMap.initial(BUCKET, 4)).load() == applied.shard_map
