"""The SnapStart runtime hooks: what a copy restored from a snapshot must not reuse from init.

A snapshot is played here by ``os.fork``: every child starts from the parent's memory as
it is, generators' states included, as every copy Lambda restores starts from the snapshot.
(Python reseeds the ``random`` module's own generator in a forked child; a restored
snapshot is no fork, so each child puts the parent's state back first.)
"""

from __future__ import annotations

import json
import os
import random
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from adapters import clients, snapstart
from adapters.occupancy import OccupancyReader, OccupancyStore
from adapters.retry import Backoff, Deadline, RetryLoop
from adapters.shard_map_source import CachedShardMap
from keydesign import Bucket, ShardMap
from keydesign.periods import DAY_MS
from query.cursor import CursorKeys
from tests.unit.adapters.conftest import CountingDynamoDB

NOW_MS = 1_795_000_000_000  # 2026-11-18


@pytest.fixture(autouse=True)
def fresh_clients() -> Iterator[None]:
    clients.reset_clients()
    yield
    clients.reset_clients()


def two_copies(draw: Callable[[], Any], *, restored: bool) -> list[Any]:
    """What ``draw()`` gives in two copies of this process taken from its present state (as Lambda restores
    copies of one snapshot), each running the after-restore hook first when ``restored``."""
    found = []
    snapshot = random.getstate()
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the copy: report, and leave without running the parent's clean-up
            os.close(read)
            code = 1
            try:
                random.setstate(snapshot)
                if restored:
                    snapstart.after_restore()
                os.write(write, json.dumps(draw()).encode())
                code = 0
            finally:
                os._exit(code)
        os.close(write)
        with os.fdopen(read) as output:
            reported = output.read()
        _, status = os.waitpid(pid, 0)
        assert status == 0, "the copy failed"
        found.append(json.loads(reported))
    return found


def test_copies_of_one_snapshot_draw_different_numbers_once_restored() -> None:
    # Given what init made: a generator of ours, and a retry loop with its default jitter
    rng = snapstart.generator()
    slept: list[float] = []
    loop = RetryLoop(Backoff(base_ms=1_000, max_delay_ms=8_000), sleep=slept.append, max_attempts=4)

    def draw() -> list[Any]:
        slept.clear()
        loop.run([1], lambda pending, attempt: (pending, "throttled"), Deadline.never(), lambda *_: None, unstarted="")
        return [random.random(), rng.random(), slept]

    # When two copies are made from it: without the hook they repeat each other (the hazard)...
    plain = two_copies(draw, restored=False)
    assert plain[0] == plain[1]
    # ...and restored, every source differs: botocore's jitter (the module's generator), ours, the retries'
    first, second = two_copies(draw, restored=True)
    assert [a != b for a, b in zip(first, second, strict=True)] == [True, True, True]
    assert len(first[2]) == 3  # three retries slept


class Day:
    """A control table holding one old day of occupancy and perhaps the ``since`` marker, counting the reads."""

    def __init__(self, since_ms: int | None = None) -> None:
        self.since_ms = since_ms
        self.queries = self.gets = 0

    def query(self, **kwargs: Any) -> dict[str, Any]:
        self.queries += 1
        return {"Items": [{"sk": {"S": "0003#00"}}], "ConsumedCapacity": {"CapacityUnits": 0.5}}

    def get_item(self, **kwargs: Any) -> dict[str, Any]:
        self.gets += 1
        return {} if self.since_ms is None else {"Item": {"since": {"N": str(self.since_ms)}}}

    def put_item(self, **kwargs: Any) -> dict[str, Any]:
        return {}


def test_after_restore_every_cache_loads_again_though_no_clock_has_moved() -> None:
    # Given caches that init filled, on clocks that stand still (a restored copy's clock may not have
    # counted the hours in the snapshot)
    still_s, still_ms = (lambda: 100.0), (lambda: 100_000)
    maps: list[ShardMap] = []

    def load_map() -> ShardMap:
        maps.append(ShardMap.initial(Bucket.parse("1h"), 4))
        return maps[-1]

    shard_map = CachedShardMap(load_map, ttl_ms=60_000, clock=still_s)
    fetched: list[str] = []
    keys = CursorKeys(lambda stage: fetched.append(stage) or b"k" * 40, ttl_ms=300_000, clock_ms=still_ms)
    day = Day()
    occupancy = OccupancyReader(OccupancyStore(day, "control", "readings"), clock=still_s, wall_ms=lambda: NOW_MS)
    old_day = NOW_MS - NOW_MS % DAY_MS - 5 * DAY_MS  # older than yesterday: cached

    def use_all() -> None:
        shard_map.current()
        keys.accepted()
        occupancy.day(old_day, "")

    use_all()
    use_all()
    assert (len(maps), fetched, day.queries) == (1, ["AWSCURRENT"], 1)  # the second use hit
    # When the copy is restored
    snapstart.after_restore()
    use_all()
    # Then each loaded again, as after a cold start
    assert (len(maps), fetched, day.queries) == (2, ["AWSCURRENT"] * 2, 2)


def test_the_snapshot_holds_no_connection_and_a_restored_copy_opens_its_own(
    dynamodb_endpoint: CountingDynamoDB,
) -> None:
    dynamodb = clients.client("dynamodb")
    dynamodb.list_tables()
    snapstart.before_snapshot()
    dynamodb.list_tables()  # a connection opened after the snapshot hook (by a later hook, say)
    snapstart.after_restore()
    dynamodb.list_tables()
    dynamodb.list_tables()
    assert dynamodb_endpoint.connections == 3


def test_a_priming_that_fails_is_logged_and_the_snapshot_is_taken_all_the_same(
    dynamodb_endpoint: CountingDynamoDB, caplog: pytest.LogCaptureFixture
) -> None:
    dynamodb = clients.client("dynamodb")
    dynamodb.list_tables()

    def prime() -> None:
        raise ConnectionError("the readings table is out of reach")

    snapstart.before_snapshot(prime)
    dynamodb.list_tables()
    assert "priming before the snapshot failed" in caplog.text
    assert dynamodb_endpoint.connections == 2  # the connection closed all the same


@pytest.mark.parametrize(("marker", "reads_after_restore"), [(NOW_MS - DAY_MS, 0), (None, 1)])
def test_after_restore_the_since_marker_is_read_again_only_if_it_was_absent(
    marker: int | None, reads_after_restore: int
) -> None:
    # The marker is written once (a conditional put) and never changes: only its absence can
    table = Day(since_ms=marker)
    occupancy = OccupancyReader(OccupancyStore(table, "control", "readings"), clock=lambda: 100.0)
    assert occupancy.since() == (marker, 1)
    snapstart.after_restore()
    assert occupancy.since()[0] == marker
    assert table.gets - 1 == reads_after_restore


def test_in_lambdas_runtime_both_hooks_are_registered_and_the_after_restore_one_mends(
    lambda_runtime: dict[str, list[Callable[[], None]]],
) -> None:
    assert snapstart.register_runtime_hooks()
    assert [len(hooks) for hooks in lambda_runtime.values()] == [1, 1]
    # What was registered does the work: a cache is loaded again after it runs
    loads: list[int] = []
    cache = CachedShardMap(lambda: loads.append(1) or ShardMap.initial(Bucket.parse("1h"), 4), 60_000)
    cache.current()
    lambda_runtime["before"][0]()
    lambda_runtime["after"][0]()
    cache.current()
    assert len(loads) == 2


def test_outside_lambda_nothing_is_registered(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", None)  # importing it raises ImportError
    assert not snapstart.register_runtime_hooks()
