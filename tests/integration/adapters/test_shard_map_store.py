"""The shard-map store against moto: bootstrap, optimistic concurrency, refusal of bad entries."""

from __future__ import annotations

import functools
import json
import random
import threading
from collections.abc import Callable
from types import MappingProxyType
from typing import Any

import boto3
import pytest
from botocore.exceptions import ClientError, ConnectionClosedError

from adapters.observability import metrics
from adapters.settings import CommonSettings, SettingsError
from adapters.shard_map_source import CachedShardMap
from adapters.shard_map_store import (
    PAGE_BYTES,
    SHARD_MAP_KEY,
    Compaction,
    MalformedShardMap,
    PastRewrite,
    ShardMapConflict,
    ShardMapStore,
)
from doubles.clocks import ManualClock
from hotkeys.detector import Decisions, EntityChange, apply_decisions
from keydesign import Bucket, Layout, ShardMap, parse_timestamp, shard_of
from keydesign.shardmap import Change
from tests.integration.hotkeys.conftest import CONTROL, Aws

pytestmark = pytest.mark.integration

HOUR = 3_600_000
NOW = parse_timestamp("2026-11-22T06:10:00Z")
NEXT = parse_timestamp("2026-11-22T07:00:00Z")
BUCKET = Bucket.parse("1h")
ALPHA = "sensor-alpha-001"


def store(
    aws: Aws, *, shards: int = 4, client: Any = None, attempts: int = 8, clock: ManualClock[int] | None = None
) -> ShardMapStore:
    return ShardMapStore(
        client or aws.dynamodb,
        CONTROL,
        ShardMap.initial(BUCKET, shards),
        clock_ms=clock or ManualClock(NOW),
        sleep=lambda _s: None,
        max_attempts=attempts,
    )


def raw_item(aws: Aws) -> dict[str, Any] | None:
    item: dict[str, Any] | None = aws.dynamodb.get_item(
        TableName=CONTROL, Key=dict(SHARD_MAP_KEY), ConsistentRead=True
    ).get("Item")
    return item


def split(entity: str, shards: int, at: int = NEXT) -> Callable[[ShardMap], ShardMap]:
    """A detector's change: raise ``entity`` to ``shards`` (max-merge, as apply_decisions does)."""
    decisions = Decisions(NOW - 90_000, NOW - 30_000, splits=(EntityChange(entity, 1, shards, at, 0.0),))

    def change(current: ShardMap) -> ShardMap:
        return apply_decisions(current, decisions, layout_kind="hybrid", now_ms=NOW, change_from_ms=at)

    return change


# -- bootstrap ------------------------------------------------------------------------------------


def test_a_read_only_caller_gets_the_initial_map_without_writing(aws: Aws) -> None:
    assert store(aws, shards=4).load(bootstrap=False) == ShardMap.initial(BUCKET, 4)
    assert raw_item(aws) is None


def test_an_absent_map_is_bootstrapped_once_and_then_pinned(aws: Aws) -> None:
    # Given an empty control table, when the first reader loads the map
    first = store(aws, shards=4).load()
    # Then the initial map is stored, version 0
    item = raw_item(aws)
    assert item is not None and item["version"] == {"N": "0"}
    assert first == ShardMap.initial(BUCKET, 4)
    assert json.loads(item["map"]["S"]) == first.to_dict()
    # And a later deployment with another SHARDS reads the stored map, not its setting
    assert store(aws, shards=8).load().global_shards_at(NOW) == 4
    assert store(aws, shards=8).peek() == first


class Barrier:
    """Makes ``parties`` threads all finish their first ``method`` call before any goes on."""

    def __init__(self, inner: Any, barrier: threading.Barrier, method: str) -> None:
        self._inner = inner
        self._barrier = barrier
        self._method = method
        self._local = threading.local()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._inner, name)
        if name != self._method:
            return attr

        def call(**kwargs: Any) -> Any:
            result = attr(**kwargs)
            if not getattr(self._local, "waited", False):
                self._local.waited = True
                self._barrier.wait(timeout=10)
            return result

        return call


def in_threads(*work: Callable[[], Any]) -> list[Any]:
    results: list[Any] = [None] * len(work)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        try:
            results[i] = work[i]()
        except BaseException as exc:  # re-raised in the test thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(work))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    if errors:
        raise errors[0]
    return results


def test_concurrent_cold_starts_agree_on_one_bootstrapped_map(aws: Aws) -> None:
    # Given two cold starts that both read "absent" before either writes
    gate = threading.Barrier(2)
    a = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    b = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    # When both bootstrap, one conditional put fails and that one reads the other's map
    maps = in_threads(a.load, b.load)
    assert maps[0] == maps[1] == ShardMap.initial(BUCKET, 4)
    item = raw_item(aws)
    assert item is not None and item["version"] == {"N": "0"}


# -- changing -------------------------------------------------------------------------------------


def test_apply_writes_a_new_version_and_a_no_op_writes_nothing(aws: Aws) -> None:
    s = store(aws)
    applied = s.apply(split(ALPHA, 5), reason="test split")
    assert applied.changed and applied.attempts == 1
    assert applied.shard_map.version == 1
    item = raw_item(aws)
    assert item is not None and item["version"] == {"N": "1"} and item["reason"] == {"S": "test split"}
    assert s.load().entity_shards_at(ALPHA, NEXT) == 5
    # The same change again changes nothing and writes nothing
    again = s.apply(split(ALPHA, 5), reason="again")
    assert not again.changed and again.shard_map.version == 1
    assert raw_item(aws) == item


def test_two_detectors_racing_on_one_entity_leave_one_consistent_map(aws: Aws) -> None:
    # Given a stored map, and two detectors that both read version 0 before either writes
    store(aws).load()
    gate = threading.Barrier(2)
    a = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    b = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    # When one raises sensor-alpha-001 to 5 and the other to 7
    results = in_threads(lambda: a.apply(split(ALPHA, 5), reason="a"), lambda: b.apply(split(ALPHA, 7), reason="b"))
    # Then one write lost its condition, re-read and re-judged against the winner's map
    assert sorted(r.attempts for r in results) == [1, 2]
    final = store(aws).load()
    # And the map holds the larger count once, at the boundary, with no duplicate entry
    assert [(c.effective_from_ms, c.shards) for c in final.entity_history[ALPHA]] == [(NEXT, 7)]
    # (version 2 when 5 landed first and 7 replaced it; 1 when 7 landed first and 5 was then a no-op)
    assert final.version == max(r.shard_map.version for r in results)


def test_two_detectors_racing_on_different_entities_keep_both_changes(aws: Aws) -> None:
    store(aws).load()
    gate = threading.Barrier(2)
    a = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    b = store(aws, client=Barrier(aws.dynamodb, gate, "get_item"))
    in_threads(lambda: a.apply(split(ALPHA, 5), reason="a"), lambda: b.apply(split("sensor-beta-002", 3), reason="b"))
    final = store(aws).load()
    assert final.version == 2
    assert final.entity_shards_at(ALPHA, NEXT) == 5
    assert final.entity_shards_at("sensor-beta-002", NEXT) == 3


class Interleaving:
    """Before the first ``put_item`` goes through, a competitor applies its own change."""

    def __init__(self, inner: Any, competitor: Callable[[], Any], times: int = 1) -> None:
        self._inner = inner
        self._competitor = competitor
        self._times = times
        self.puts = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def put_item(self, **kwargs: Any) -> Any:
        self.puts += 1
        if self.puts <= self._times:
            self._competitor()
        return self._inner.put_item(**kwargs)


def test_a_conflict_is_retried_on_the_competitors_map(aws: Aws) -> None:
    store(aws).load()
    competitor = store(aws)
    wrapped = Interleaving(aws.dynamodb, lambda: competitor.apply(split("sensor-beta-002", 3), reason="competitor"))
    applied = store(aws, client=wrapped).apply(split(ALPHA, 5), reason="ours")
    assert applied.attempts == 2 and wrapped.puts == 2
    final = store(aws).load()
    assert final.version == 2
    assert (final.entity_shards_at(ALPHA, NEXT), final.entity_shards_at("sensor-beta-002", NEXT)) == (5, 3)


def test_endless_conflicts_give_up_with_a_clear_error_and_a_consistent_map(aws: Aws) -> None:
    store(aws).load()
    competitor = store(aws)
    counter = iter(range(2, 100))
    wrapped = Interleaving(
        aws.dynamodb, lambda: competitor.apply(split(f"sensor-{next(counter)}", 2), reason="competitor"), times=99
    )
    with pytest.raises(ShardMapConflict, match="3 attempts"):
        store(aws, client=wrapped, attempts=3).apply(split(ALPHA, 5), reason="ours")
    final = store(aws).load()
    assert final.version == 3 and ALPHA not in final.entity_history


def test_a_throttled_write_propagates_and_writes_nothing(aws: Aws) -> None:
    store(aws).load()
    before = raw_item(aws)

    class Throttled:
        def __getattr__(self, name: str) -> Any:
            return getattr(aws.dynamodb, name)

        def put_item(self, **kwargs: Any) -> Any:
            raise ClientError(
                {"Error": {"Code": "ProvisionedThroughputExceededException", "Message": "slow down"}}, "PutItem"
            )

    with pytest.raises(ClientError, match="ProvisionedThroughputExceeded"):
        store(aws, client=Throttled()).apply(split(ALPHA, 5), reason="ours")
    assert raw_item(aws) == before


# -- refusing ---------------------------------------------------------------------------------------


def good_item() -> dict[str, Any]:
    shard_map = ShardMap.initial(BUCKET, 4).with_entity(ALPHA, 5, NEXT, now_ms=NOW)
    return {**SHARD_MAP_KEY, "map": {"S": json.dumps(shard_map.to_dict())}, "version": {"N": "1"}}


def tampered(**changes: Any) -> dict[str, Any]:
    item = good_item()
    for name, value in changes.items():
        if value is None:
            item.pop(name)
        else:
            item[name] = value
    return item


def with_map(**edits: Any) -> dict[str, Any]:
    data = json.loads(good_item()["map"]["S"])
    data.update({name.rstrip("_"): value for name, value in edits.items()})  # global_ -> "global"
    return tampered(map={"S": json.dumps(data)})


@pytest.mark.parametrize(
    ("item", "reason"),
    [
        (tampered(map={"S": "{not json"}), "not JSON"),
        (tampered(map={"N": "1"}), "'map' must be a string"),
        (tampered(map=None), "'map' must be a string"),
        (tampered(version=None), "'version' must be a number"),
        (tampered(version={"N": "7"}), "does not match the map's own version 1"),
        (tampered(version={"N": "1.5"}), "not a whole number"),
        (with_map(bucket="15m"), "uses 15m buckets but BUCKET is 1h"),
        (with_map(bucket="7m"), "bucket"),
        (with_map(global_=[]), "global"),
        (with_map(entities={ALPHA: [{"effective_from": "2026-11-22T07:30:00Z", "shards": 5}]}), "bucket boundary"),
        (with_map(entities={ALPHA: [{"effective_from": "2026-11-22T07:00:00Z", "shards": 0}]}), "shard count"),
        (with_map(entities={"bad#id": [{"effective_from": "2026-11-22T07:00:00Z", "shards": 2}]}), "'#'"),
        (with_map(version=-1), "non-negative"),
    ],
    ids=lambda v: v if isinstance(v, str) else "",
)
def test_a_malformed_map_is_refused_with_a_clear_error_and_nothing_applied(
    aws: Aws, item: dict[str, Any], reason: str
) -> None:
    aws.dynamodb.put_item(TableName=CONTROL, Item=item)
    # Reading refuses it, naming the table and what is wrong
    with pytest.raises(MalformedShardMap) as raised:
        store(aws).load()
    assert CONTROL in str(raised.value) and reason in str(raised.value)
    # Changing refuses it too, and nothing is written over the bad entry
    with pytest.raises(MalformedShardMap):
        store(aws).apply(split("sensor-beta-002", 3), reason="must not land")
    assert raw_item(aws) == item
    # A reader's cache surfaces the error instead of serving a half-parsed map
    with pytest.raises(MalformedShardMap):
        CachedShardMap(store(aws).load, 60_000).current()


def test_a_change_that_rewrites_the_past_is_refused_before_writing(aws: Aws) -> None:
    s = store(aws)
    s.apply(split(ALPHA, 5), reason="split")
    before = raw_item(aws)

    def rewrite_global(current: ShardMap) -> ShardMap:
        return ShardMap(current.bucket, ShardMap.initial(BUCKET, 8).global_history, current.entity_history, 9)

    def backdate_entity(current: ShardMap) -> ShardMap:
        history = dict(current.entity_history)
        history["sensor-beta-002"] = ShardMap.initial(BUCKET, 3).global_history  # effective from 1970
        return ShardMap(current.bucket, current.global_history, history, current.version + 1)

    def forget_entity(current: ShardMap) -> ShardMap:
        return ShardMap(current.bucket, current.global_history, {}, current.version + 1)

    for change in (rewrite_global, backdate_entity):
        with pytest.raises(PastRewrite):
            s.apply(change, reason="bad")
    # Once the split is in force, forgetting the entity would hide its readings from readers
    later = store(aws, clock=ManualClock(NEXT + HOUR))
    with pytest.raises(PastRewrite):
        later.apply(forget_entity, reason="bad")
    assert raw_item(aws) == before


def test_readers_see_a_change_within_their_cache_ttl(aws: Aws) -> None:
    clock = ManualClock(0)
    reader = CachedShardMap(store(aws).load, 60_000, clock=lambda: clock() / 1000)
    assert reader.current().entity_shards_at(ALPHA, NEXT) is None
    store(aws).apply(split(ALPHA, 5), reason="split")
    assert reader.current().entity_shards_at(ALPHA, NEXT) is None  # still cached
    clock.advance(60_000)
    assert reader.current().entity_shards_at(ALPHA, NEXT) == 5


def test_from_settings_needs_a_control_table() -> None:
    common = CommonSettings.from_env({"TABLE_PREFIX": "readings", "SHARDS": "4"})
    with pytest.raises(SettingsError, match="CONTROL_TABLE"):
        ShardMapStore.from_settings(common)


# -- a map of a fleet: pages, and what a refresh reads ---------------------------------------------

DAY = 24 * HOUR
#: Seed 003's fleet: a million devices, named as the synthetic producer names them.
FLEET = 1_000_000
#: Devices whose history needs a few pages.
PAGED = 1_500


def fleet_map(changed: int = 10_000, *, still_split: int | None = None, version: int = 7) -> ShardMap:
    """``changed`` devices of the fleet changed within retention: every one split, and all but
    ``still_split`` of them (default: every other one) scaled down again a day later."""
    rng = random.Random(3)
    histories: dict[str, tuple[Change, ...]] = {}
    for n, device in enumerate(rng.sample(range(FLEET), changed)):
        split = NEXT - 30 * DAY + (n % 700) * HOUR
        up = Change(split, rng.randint(2, 40))
        down = n % 2 == 1 if still_split is None else n >= still_split
        histories[f"sensor-{device:06d}"] = (up, Change(split + DAY, 1)) if down else (up,)
    initial = ShardMap.initial(BUCKET, 4)
    return ShardMap(BUCKET, initial.global_history, MappingProxyType(histories), version)


def seeded(aws: Aws, shard_map: ShardMap) -> None:
    """Store ``shard_map`` as the detector would have, writing before its first change took effect."""
    store(aws, clock=ManualClock(NEXT - 31 * DAY)).apply(lambda _: shard_map, reason="test: the history")


class Counting:
    """Counts GetItem calls and the bytes they return (what a reader pays for a refresh)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.gets = 0
        self.bytes = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_item(self, **kwargs: Any) -> Any:
        response = self.inner.get_item(**kwargs)
        self.gets += 1
        self.bytes += len(json.dumps(response.get("Item", {})))
        return response


def shard_map_items(aws: Aws) -> list[dict[str, Any]]:
    return aws.control_items("shardmap")


def test_a_fleet_map_is_stored_in_pages_no_item_near_the_limit_and_a_refresh_reads_what_changed(aws: Aws) -> None:
    # Given seed 003's fleet with 10,000 devices changed within retention (a map of about 1 MB of JSON)
    fleet = fleet_map()
    assert len(json.dumps(fleet.to_dict())) > 1_000_000
    seeded(aws, fleet)
    writer = store(aws)
    # Then it is a head and pages, none of them more than PAGE_BYTES of JSON (400 KB is DynamoDB's limit)
    # (the figures docs/hotkeys.md quotes: 32 pages of at most 42 KB, a head of 1.5 KB)
    items = shard_map_items(aws)
    head = raw_item(aws)
    assert head is not None and len(head["pages"]["L"]) == len(items) - 1 == 32
    assert max(len(json.dumps(i)) for i in items) < 43_000 < PAGE_BYTES
    assert len(json.dumps(head)) < 1_600
    assert json.loads(head["map"]["S"])["entities"] == {}
    # And a reader's first load reads every page, and assembles exactly the map
    counting = Counting(aws.dynamodb)
    reader = store(aws, client=counting)
    assert reader.load(bootstrap=False).entity_history == fleet.entity_history
    assert counting.gets == len(items)
    # When the detector changes one device
    applied = writer.apply(split("sensor-000042", 6), reason="test: one more")
    assert applied.changed
    # Then one page is rewritten and the one it replaced is gone
    before_keys, after_keys = {i["sk"]["S"] for i in items}, {i["sk"]["S"] for i in shard_map_items(aws)}
    assert len(after_keys - before_keys) == len(before_keys - after_keys) == 1
    # And the reader's refresh reads the head and that page only
    counting.gets = counting.bytes = 0
    refreshed = reader.load(bootstrap=False)
    assert refreshed.entity_shards_at("sensor-000042", NEXT) == 6 and refreshed.version == applied.shard_map.version
    assert counting.gets == 2 and counting.bytes < 43_000 + 1_600
    # And a refresh with nothing new reads the head alone
    counting.gets = counting.bytes = 0
    assert reader.load(bootstrap=False) == refreshed
    assert counting.gets == 1 and counting.bytes < 1_600


def test_a_small_map_stays_one_item_and_a_paged_map_shrinks_back_into_it(aws: Aws) -> None:
    # Given a fleet map in pages, of which 20 devices are still split
    fleet = fleet_map(still_split=20)
    seeded(aws, fleet)
    assert len(shard_map_items(aws)) > 1
    # When the others' changes have all aged out and are folded away
    compacted = compacting(aws, NEXT + 60 * DAY).apply(lambda current: current, reason="compaction").shard_map
    # Then the map is one item again, with the 20, and no page is left behind
    assert len(compacted.entity_history) == 20
    (only,) = shard_map_items(aws)
    assert "pages" not in only and json.loads(only["map"]["S"])["entities"] == compacted.to_dict()["entities"]


def test_a_lost_race_leaves_no_page_behind(aws: Aws) -> None:
    seeded(aws, fleet_map(PAGED))
    competitor = store(aws)
    wrapped = Interleaving(aws.dynamodb, lambda: competitor.apply(split("sensor-beta-002", 3), reason="competitor"))
    # When our first attempt's head put loses to the competitor's
    applied = store(aws, client=wrapped).apply(split(ALPHA, 5), reason="ours")
    # Then it is retried on their map, and every page stored is one the head names
    assert applied.attempts == 2
    final = store(aws).load()
    assert (final.entity_shards_at(ALPHA, NEXT), final.entity_shards_at("sensor-beta-002", NEXT)) == (5, 3)
    head = raw_item(aws)
    assert head is not None
    named = {p["S"] for p in head["pages"]["L"]}
    assert {i["sk"]["S"] for i in shard_map_items(aws)} == named | {"current"}


class ReplacedWhileReading:
    """Between a reader's GetItem of the head and of its first page, a writer replaces that page."""

    def __init__(self, inner: Any, writer: Callable[[], Any]) -> None:
        self.inner = inner
        self.writer: Callable[[], Any] | None = writer

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def get_item(self, **kwargs: Any) -> Any:
        if kwargs["Key"]["sk"]["S"].startswith("page#") and self.writer is not None:
            writer, self.writer = self.writer, None
            writer()
        return self.inner.get_item(**kwargs)


def test_a_reader_whose_page_was_replaced_under_it_reads_the_new_head(aws: Aws) -> None:
    seeded(aws, fleet_map(PAGED))
    every_page = [f"sensor-{n:06d}" for n in range(0, 200)]  # changes spread over every page

    def rewrite_all() -> None:
        store(aws).apply(lambda m: functools.reduce(lambda a, e: split(e, 4)(a), every_page, m), reason="w")

    reader = store(aws, client=ReplacedWhileReading(aws.dynamodb, rewrite_all))
    loaded = reader.load(bootstrap=False)
    assert loaded.entity_shards_at("sensor-000000", NEXT) == 4
    assert loaded == store(aws).load()


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (lambda head, page: {**page, "entities": {"S": "[1, 2"}}, "is not JSON"),
        (lambda head, page: {**page, "entities": {"S": "[1, 2]"}}, "must be an object"),
        (lambda head, page: {**page, "entities": {"N": "1"}}, "'entities' must be a string"),
        (lambda head, page: None, "kept vanishing"),
    ],
    ids=["page-not-json", "page-not-an-object", "page-not-a-string", "page-missing"],
)
def test_a_bad_page_is_refused_naming_it(
    aws: Aws, edit: Callable[[dict[str, Any], dict[str, Any]], dict[str, Any] | None], reason: str
) -> None:
    seeded(aws, fleet_map(PAGED))
    head = raw_item(aws)
    assert head is not None
    first = {"pk": {"S": "shardmap"}, "sk": head["pages"]["L"][0]}
    page = aws.dynamodb.get_item(TableName=CONTROL, Key=first)["Item"]
    edited = edit(head, page)
    if edited is None:
        aws.dynamodb.delete_item(TableName=CONTROL, Key=first)
    else:
        aws.dynamodb.put_item(TableName=CONTROL, Item=edited)
    with pytest.raises(MalformedShardMap, match=reason):
        store(aws).load()
    with pytest.raises(MalformedShardMap):
        store(aws).apply(split("sensor-beta-002", 3), reason="must not land")


@pytest.mark.parametrize(
    ("pages", "reason"),
    [
        ({"S": "page#1"}, "'pages' must be a list"),
        ({"L": [{"S": "current"}]}, "'pages' must be a list"),
        ("twice", "is in two pages"),
        ("inline too", "must not hold entities in the head too"),
    ],
)
def test_a_head_naming_pages_badly_is_refused(aws: Aws, pages: Any, reason: str) -> None:
    seeded(aws, fleet_map(PAGED))
    head = raw_item(aws)
    assert head is not None
    if pages == "twice":
        head["pages"] = {"L": [*head["pages"]["L"], {"S": "page#copy"}]}
        copy_of = aws.dynamodb.get_item(TableName=CONTROL, Key={"pk": {"S": "shardmap"}, "sk": head["pages"]["L"][0]})
        aws.dynamodb.put_item(TableName=CONTROL, Item={**copy_of["Item"], "sk": {"S": "page#copy"}})
    elif pages == "inline too":
        data = json.loads(head["map"]["S"])
        data["entities"] = {ALPHA: [{"effective_from": "2026-11-22T07:00:00.000Z", "shards": 5}]}
        head["map"] = {"S": json.dumps(data)}
    else:
        head["pages"] = pages
    aws.dynamodb.put_item(TableName=CONTROL, Item=head)
    with pytest.raises(MalformedShardMap, match=reason):
        store(aws).load()


# -- compaction ---------------------------------------------------------------------------------------

RETENTION = 30 * DAY
COMPACTION = Compaction(keep_ms=RETENTION + HOUR, entity_default=1)


def compacting(aws: Aws, now_ms: int) -> ShardMapStore:
    return ShardMapStore(
        aws.dynamodb, CONTROL, ShardMap.initial(BUCKET, 4), compaction=COMPACTION, clock_ms=lambda: now_ms
    )


def test_every_write_folds_what_retention_has_passed_and_keeps_what_is_still_read(aws: Aws) -> None:
    # Given the fleet's history, written 30 days ago and since
    seeded(aws, fleet_map())
    before = store(aws).load()
    # When the detector judges a window 40 days on (no change of its own: only what aged out goes)
    later = NEXT + 40 * DAY
    applied = compacting(aws, later).apply(lambda m: m, reason="compaction")
    # Then every device back on its base key has left the map, the ones still split stay
    after = applied.shard_map
    assert applied.changed and after.version == before.version + 1
    assert 0 < len(after.entity_history) < len(before.entity_history)
    horizon = COMPACTION.horizon(later)
    for entity, history in before.entity_history.items():
        assert after.entity_shards_at(entity, horizon) in (before.entity_shards_at(entity, horizon), None)
        if history[-1].shards == 1:
            assert entity not in after.entity_history
    # And the map's items hold only that (the pages no head names are gone)
    stored = raw_item(aws)
    assert len(shard_map_items(aws)) == 1 + len(stored["pages"]["L"] if stored and "pages" in stored else [])
    assert stored is not None and "folded" in stored["reason"]["S"]
    # And a plan for any range still inside retention is the one the whole history gave
    layout = Layout.from_settings(kind="hybrid", bucket="1h", table_prefix="readings")
    for entity in [*list(before.entity_history)[:5], ALPHA]:
        assert layout.plan_entity(entity, horizon, later, after) == layout.plan_entity(entity, horizon, later, before)
    assert layout.plan_range(later - HOUR, later, after) == layout.plan_range(later - HOUR, later, before)
    # And judging again folds nothing more, and writes nothing
    again = compacting(aws, later + 60_000).apply(lambda m: m, reason="compaction")
    assert not again.changed


def test_compaction_still_refuses_a_change_to_what_is_inside_retention(aws: Aws) -> None:
    seeded(aws, fleet_map(100))
    later = NEXT + 40 * DAY
    kept = compacting(aws, later).apply(lambda m: m, reason="compaction").shard_map
    victim = next(iter(kept.entity_history))

    def forget(current: ShardMap) -> ShardMap:
        entities = {e: h for e, h in current.entity_history.items() if e != victim}
        return ShardMap(current.bucket, current.global_history, MappingProxyType(entities), current.version)

    with pytest.raises(PastRewrite, match=victim):
        compacting(aws, later).apply(forget, reason="bad")


# -- a head put whose outcome is lost, a malformed map: readers and the detector carry on -------------


def named_pages(aws: Aws) -> set[str]:
    head = raw_item(aws)
    assert head is not None
    return {p["S"] for p in head.get("pages", {"L": []})["L"]}


def assert_every_named_page_is_there_and_no_other(aws: Aws) -> None:
    assert {i["sk"]["S"] for i in shard_map_items(aws)} == named_pages(aws) | {"current"}


class LoseHeadResponses:
    """botocore acts as if the response to an applied head put never came back (a 500, a dropped
    connection): its own retry machinery sends the put again, which meets the condition the
    applied put changed. ``meanwhile`` runs between the lost response and the retry."""

    def __init__(self, dynamodb: Any, meanwhile: Callable[[], Any] = lambda: None) -> None:
        self.client = boto3.client("dynamodb", region_name=dynamodb.meta.region_name)
        self.client.meta.events.register_first("needs-retry.dynamodb.PutItem", self._lose)
        self.meanwhile = meanwhile
        self.lost = 0

    def _lose(self, response: Any, request_dict: dict[str, Any], **_: Any) -> float | None:
        if self.lost or response is None or response[0].status_code != 200:
            return None
        if json.loads(request_dict["body"])["Item"]["sk"]["S"] != "current":
            return None
        self.lost += 1
        self.meanwhile()
        return 0  # retry at once


def test_a_head_put_applied_whose_response_was_lost_is_a_success_and_its_pages_stay(aws: Aws) -> None:
    # Given a paged map, and a client whose first head put lands but whose answer is lost
    seeded(aws, fleet_map(PAGED))
    lossy = LoseHeadResponses(aws.dynamodb)
    # When the detector changes the map: botocore's retry meets ConditionalCheckFailed (its own put's work)
    applied = store(aws, client=lossy.client).apply(split(ALPHA, 5), reason="ours")
    # Then that is the success it is, and every page the stored head names is there
    assert lossy.lost == 1
    assert applied.changed and applied.attempts == 1
    assert_every_named_page_is_there_and_no_other(aws)
    # And every reader, old or new, reads it
    assert store(aws).load(bootstrap=False) == applied.shard_map
    assert store(aws, client=lossy.client).load(bootstrap=False).entity_shards_at(ALPHA, NEXT) == 5


@pytest.mark.parametrize(
    "error",
    [
        ClientError({"Error": {"Code": "InternalServerError", "Message": "try again"}}, "PutItem"),
        ConnectionClosedError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com"),
    ],
    ids=["500", "connection-closed"],
)
def test_a_head_put_applied_that_then_raised_is_a_success(aws: Aws, error: Exception) -> None:
    # Given a client that applies the head put and then raises (no retry left to meet the condition)
    seeded(aws, fleet_map(PAGED))

    class AppliedThenRaises:
        def __getattr__(self, name: str) -> Any:
            return getattr(aws.dynamodb, name)

        def put_item(self, **kwargs: Any) -> Any:
            response = aws.dynamodb.put_item(**kwargs)
            if kwargs["Item"]["sk"]["S"] == "current":
                raise error
            return response

    applied = store(aws, client=AppliedThenRaises()).apply(split(ALPHA, 5), reason="ours")
    assert applied.changed and applied.shard_map.version == 2
    assert_every_named_page_is_there_and_no_other(aws)
    assert store(aws).load(bootstrap=False).entity_shards_at(ALPHA, NEXT) == 5


def test_a_head_put_that_failed_keeps_its_pages_until_a_head_shows_they_cannot_be_named(aws: Aws) -> None:
    # Given a head put that raises and did not land (so its request could still be in flight)
    seeded(aws, fleet_map(PAGED))
    before = {i["sk"]["S"] for i in shard_map_items(aws)}

    class Fails:
        def __init__(self) -> None:
            self.failing = True

        def __getattr__(self, name: str) -> Any:
            return getattr(aws.dynamodb, name)

        def put_item(self, **kwargs: Any) -> Any:
            if self.failing and kwargs["Item"]["sk"]["S"] == "current":
                raise ConnectionClosedError(endpoint_url="https://dynamodb.eu-west-1.amazonaws.com")
            return aws.dynamodb.put_item(**kwargs)

    client = Fails()
    writer = store(aws, client=client)
    with pytest.raises(ConnectionClosedError):
        writer.apply(split(ALPHA, 5), reason="ours")
    # Then the stored map is unchanged and read as before, and the page put for it is kept
    written = {i["sk"]["S"] for i in shard_map_items(aws)} - before
    assert len(written) == 1
    assert store(aws).load(bootstrap=False).entity_history == fleet_map(PAGED).entity_history
    # When the next change lands, that page (its version reached, unnamed) goes
    client.failing = False
    assert writer.apply(split("sensor-beta-002", 3), reason="next").changed
    assert not written & {i["sk"]["S"] for i in shard_map_items(aws)}
    assert_every_named_page_is_there_and_no_other(aws)


def test_a_competitor_building_on_a_head_whose_response_was_lost_keeps_the_pages_it_names(aws: Aws) -> None:
    # Given a paged map, and the entity a competitor changes, on another page than ours
    seeded(aws, fleet_map(PAGED))
    count = len(named_pages(aws))
    theirs = next(
        e for e in (f"sensor-beta-{n:03d}" for n in range(100)) if shard_of(e, count) != shard_of(ALPHA, count)
    )
    competitor = store(aws)
    # When our head lands, its answer is lost, and the competitor changes the map on top of ours before the retry
    lossy = LoseHeadResponses(aws.dynamodb, lambda: competitor.apply(split(theirs, 3), reason="competitor"))
    ours = store(aws, client=lossy.client)
    applied = ours.apply(split(ALPHA, 5), reason="ours")
    # Then the competitor's head (which reuses the page we wrote for ALPHA) is stored and whole
    assert lossy.lost == 1
    final = store(aws).load(bootstrap=False)
    assert (final.entity_shards_at(ALPHA, NEXT), final.entity_shards_at(theirs, NEXT)) == (5, 3)
    assert final.version == 3 and applied.shard_map == final
    assert any(sk.startswith("page#0000000002#") for sk in named_pages(aws))  # ours, in their head
    assert_every_named_page_is_there_and_no_other(aws)


def broken_head(aws: Aws) -> dict[str, Any]:
    """The stored head with its map's JSON cut short (its version and pages left as they were)."""
    head = raw_item(aws)
    assert head is not None
    head["map"] = {"S": head["map"]["S"][:20]}
    aws.dynamodb.put_item(TableName=CONTROL, Item=head)
    return head


def fallbacks() -> float:
    emitted = metrics.serialize_metric_set()
    value = emitted.get("ShardMapFallbacks", 0)
    return float(sum(value) if isinstance(value, list) else value)


def test_a_reader_works_from_its_last_good_map_when_the_stored_one_breaks_and_a_cold_one_refuses(aws: Aws) -> None:
    # Given a reader that has read the map, and a change it has not read yet
    seeded(aws, fleet_map(PAGED))
    reader = CachedShardMap(store(aws).load, 0)  # every call refreshes
    good = reader.current()
    store(aws).apply(split(ALPHA, 5), reason="a change")
    # When the stored head breaks
    broken_head(aws)
    metrics.clear_metrics()
    # Then the reader keeps the last good map it read, counting each fallback (alarmed)
    assert reader.current() == good
    assert reader.current() == good
    assert fallbacks() == 2
    metrics.clear_metrics()
    # And one without a good map fails, naming the fault
    with pytest.raises(MalformedShardMap, match="not JSON"):
        store(aws).load(bootstrap=False)
    with pytest.raises(MalformedShardMap, match="not JSON"):
        store(aws).load()


def test_the_detector_replaces_a_malformed_map_from_its_last_good_one_of_that_version(aws: Aws) -> None:
    # Given the detector wrote version 2, and then the stored head broke (its version still 2)
    seeded(aws, fleet_map(PAGED))
    detector = store(aws)
    detector.apply(split(ALPHA, 5), reason="split")
    broken = broken_head(aws)
    assert broken["version"] == {"N": "2"}
    # When it judges its next window: its read falls back, and its change replaces the broken head
    assert detector.load().version == 2
    applied = detector.apply(split("sensor-beta-002", 3), reason="next")
    # Then the map is whole again, every change kept, and no page of the broken head is left
    assert applied.changed and applied.shard_map.version == 3
    reread = store(aws).load(bootstrap=False)
    assert (reread.entity_shards_at(ALPHA, NEXT), reread.entity_shards_at("sensor-beta-002", NEXT)) == (5, 3)
    assert reread.entity_history.keys() == fleet_map(PAGED).entity_history.keys() | {ALPHA, "sensor-beta-002"}
    head = raw_item(aws)
    assert head is not None and "replaces a malformed map" in head["reason"]["S"]
    assert_every_named_page_is_there_and_no_other(aws)
    # And even with nothing to change, the next one replaces a broken head
    broken_head(aws)
    again = detector.apply(lambda m: m, reason="compaction")
    assert again.changed and again.shard_map.version == 4
    assert store(aws).load(bootstrap=False).entity_history == reread.entity_history


def test_a_detector_whose_good_map_is_older_than_the_broken_head_replaces_nothing(aws: Aws) -> None:
    # Given a detector that read version 1, and version 2 (written by another) that then broke
    seeded(aws, fleet_map(PAGED))
    stale = store(aws)
    stale.load()
    store(aws).apply(split(ALPHA, 5), reason="split by another")
    broken = broken_head(aws)
    # When the stale detector judges: it may work from its map, but never writes it over version 2
    assert stale.load().version == 1
    with pytest.raises(MalformedShardMap, match=r"not replaced: it is version 2, newer than .* \(1\)"):
        stale.apply(split("sensor-beta-002", 3), reason="must not land")
    assert raw_item(aws) == broken
    # And one that holds no map at all refuses too
    with pytest.raises(MalformedShardMap, match="not replaced: this writer holds no good map"):
        store(aws).apply(split("sensor-beta-002", 3), reason="must not land")


def test_a_detector_replaces_nothing_over_a_head_whose_version_cannot_be_read(aws: Aws) -> None:
    seeded(aws, fleet_map(PAGED))
    detector = store(aws)
    detector.apply(split(ALPHA, 5), reason="split")
    head = raw_item(aws)
    assert head is not None
    del head["version"]
    aws.dynamodb.put_item(TableName=CONTROL, Item=head)
    assert detector.load().version == 2
    with pytest.raises(MalformedShardMap, match="not replaced: its version cannot be read"):
        detector.apply(split("sensor-beta-002", 3), reason="must not land")
    assert raw_item(aws) == head
