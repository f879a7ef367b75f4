"""A deployment's state over simulated months on a moved clock, on moto: the rotator run every hour
over hourly tables, and the hot-key detector's shard map churned every day by new hot devices of
seed 003's fleet (a million devices), each split and scaled down again a day later, with a reader
refreshing its copy. Once a retention has passed, the state must stay inside bounds that depend on
retention, never on how long the deployment has run: tables, alarms, calls per rotator run, the shard
map's items and bytes, what a reader's refresh reads.

``make test`` runs 4 days at a retention of 1 day and 1,000 devices changed within it. The figures
in docs/rotation.md and docs/hotkeys.md are the shipped shape (30 days, 10,000 devices):
``YEAR_DAYS=34 YEAR_RETENTION_DAYS=30 YEAR_CHANGED=10000 pytest -s tests/integration/rotator/test_year.py``
(9 minutes); a year of it would take 96 (0.66 s a run, nearly all moto's), so the year runs with
tables per day (28 calls a run where hourly tables take 69 at 1 day of retention, and few tables to
list): ``YEAR_PERIOD=day YEAR_DAYS=365`` and the rest as above.
The detector applies a day's decisions at once (it judges every minute in AWS; the map after a day is
the same), because parsing a 10,000-device map takes a quarter second on moto's side.
"""

from __future__ import annotations

import json
import math
import os
import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

import pytest

from adapters.shard_map_store import PAGE_BYTES, Compaction, ShardMapStore
from doubles.clocks import ManualClock
from hotkeys.detector import Decisions, EntityChange, apply_decisions
from keydesign import Bucket, ShardMap
from tests.integration.adapters.test_shard_map_store import Counting
from tests.integration.mocked_aws import create_readings_table
from tests.integration.rotator.conftest import DAY, HOUR, World, at
from tests.integration.rotator.test_scale import HOURLY

pytestmark = pytest.mark.integration

#: Simulated days, the retention they run at (shipped: 30) and the devices changed within it.
DAYS = int(os.environ.get("YEAR_DAYS", "4"))
RETENTION_DAYS = int(os.environ.get("YEAR_RETENTION_DAYS", "1"))
CONTROL = "control"
FLEET = 1_000_000
#: Devices changed within retention, at any time (issue 29: seed 003's fleet, 10,000 of them).
CHANGED_WITHIN_RETENTION = int(os.environ.get("YEAR_CHANGED", "1000"))
#: The tables' period: "hour" (the shipped shape), or "day" for a year in less time (a day's table is
#: created, dialled down and dropped as an hour's is; the rotator still runs every hour).
PERIOD = os.environ.get("YEAR_PERIOD", "hour")
#: Open tables at most (the current hour, two ahead, three in grace + dial-down delay), 3 alarms each.
MAX_ALARMS = 18
#: A steady run's calls besides ListTables (tests/integration/rotator/test_scale.py: 54), plus the ones
#: a table's turn adds in some hours (build one ahead, dial one down, review its class, drop one).
#: Measured: 69 at 1 day of retention (fewer closed tables to audit in turn), 74 at 30 days.
MAX_CALLS_BESIDES_LISTING = 80


@dataclass
class Observed:
    """The largest figures seen after each simulated hour, from ``since_ms`` on."""

    tables: int = 0
    alarms: int = 0
    calls: int = 0
    listing: int = 0
    map_items: int = 0
    map_bytes: int = 0
    largest_item: int = 0
    map_entities: int = 0
    refresh_bytes: int = 0
    refresh_gets: int = 0
    by_day: list[tuple[int, int, int]] = field(default_factory=list)

    def keep(self, **figures: int) -> None:
        for name, value in figures.items():
            setattr(self, name, max(getattr(self, name), value))


def churn(entity_ids: list[str], split_at: int, cooling: list[tuple[str, int]], now: int) -> Decisions:
    """A window's decisions: ``entity_ids`` hot (split at ``split_at``), ``cooling`` scaled back to 1."""
    return Decisions(
        now - 90_000,
        now - 30_000,
        splits=tuple(EntityChange(e, 1, 2 + n % 39, split_at, 600.0) for n, e in enumerate(entity_ids)),
        scale_downs=tuple(EntityChange(e, shards, 1, split_at, 1.0) for e, shards in cooling),
    )


def control_items(world: World) -> list[dict[str, Any]]:
    pages = world.dynamodb.get_paginator("scan").paginate(TableName=CONTROL, ConsistentRead=True)
    return [item for page in pages for item in page["Items"]]


def test_months_of_hourly_rotation_and_hot_key_churn_keep_the_state_bounded_by_retention(world: World) -> None:
    # Given the shipped hourly shape (RETENTION and MAX_AGE cut to the simulated retention) and a
    # detector whose map forgets what retention + a margin has passed, as HotKeyMonitor wires it
    retention = RETENTION_DAYS * DAY
    clock = ManualClock(at("2026-01-01T00:05:00Z"))
    period_ms = {"hour": HOUR, "day": DAY}[PERIOD]
    settings = {
        **HOURLY,
        "TABLE_PERIOD": PERIOD,
        "RETENTION": f"{RETENTION_DAYS}d",
        "MAX_AGE": f"{min(RETENTION_DAYS, 3)}d",
    }
    rotator, clients = world.rotator(clock, **settings)
    create_readings_table(world.dynamodb, CONTROL)
    bucket = Bucket.parse("1h")
    detector = ShardMapStore(
        world.dynamodb,
        CONTROL,
        ShardMap.initial(bucket, 100),
        compaction=Compaction(keep_ms=retention + 6 * 60_000, entity_default=1),
        clock_ms=clock,
        sleep=lambda _s: None,
    )
    reads = Counting(world.dynamodb)
    reader = ShardMapStore(reads, CONTROL, ShardMap.initial(bucket, 100), clock_ms=clock)
    per_day = math.ceil(CHANGED_WITHIN_RETENTION * DAY / retention)
    devices = iter(random.Random(3).sample(range(FLEET), min(FLEET, per_day * DAYS)))
    cooling: list[tuple[str, int]] = []  # split a day ago: scaled down today
    # (a device scaled down stays in the map a retention after: from then on, the map is steady)
    steady_from = clock.now + retention + 2 * DAY
    seen = Observed()

    # When, every hour for DAYS days, the rotator runs; and once a day the detector splits `per_day` new
    # hot devices at the next boundary and scales down those it split the day before
    for _day in range(DAYS):
        for _hour in range(24):
            clients.log.clear()
            summary = rotator.run()
            assert summary.errors == [], summary.errors
            calls = Counter(clients.log.operations)
            if clock.now >= steady_from:
                seen.keep(
                    tables=len(world.ours()),
                    alarms=len(world.alarm_names()),
                    calls=sum(calls.values()) - calls["ListTables"],
                    listing=calls["ListTables"],
                )
            clock.advance(HOUR)
        now = clock.now
        boundary = now - now % HOUR + HOUR
        decisions = churn([f"sensor-{next(devices):06d}" for _ in range(per_day)], boundary, cooling, now)
        cooling = [(c.entity, c.to_shards) for c in decisions.splits]

        def change(current: ShardMap, decisions: Decisions = decisions, now: int = now, at: int = boundary) -> ShardMap:
            return apply_decisions(current, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=at)

        assert detector.apply(change, reason="year: hot devices").changed
        reads.gets = reads.bytes = 0
        entities = len(reader.load(bootstrap=False).entity_history)
        if now < steady_from:
            continue
        items = control_items(world)
        seen.keep(
            map_items=len(items),
            map_bytes=sum(len(json.dumps(i)) for i in items),
            largest_item=max(len(json.dumps(i)) for i in items),
            map_entities=entities,
            refresh_gets=reads.gets,
            refresh_bytes=reads.bytes,
        )
        seen.by_day.append((len(world.ours()), entities, sum(len(json.dumps(i)) for i in items)))

    print(f"\n{DAYS} days of tables per {PERIOD}, retention {RETENTION_DAYS} d, {per_day} devices split a day: {seen}")
    # Then from one retention on, the tables are the retention's periods, the current one, the two
    # built ahead and the few a run has not dropped yet (MAX_DELETES_PER_RUN a run)
    periods = retention // period_ms
    assert periods <= seen.tables <= periods + 6
    # and only the open tables have alarms; a run's calls do not grow with the tables (but ListTables')
    assert seen.alarms <= MAX_ALARMS
    assert seen.calls <= MAX_CALLS_BESIDES_LISTING and seen.listing == math.ceil(seen.tables / 100)
    # And the shard map holds the devices changed within retention (split, or scaled down within it),
    # not every device ever split; no item nears DynamoDB's 400 KB, and a refresh reads at most the map
    assert seen.map_entities <= per_day * (RETENTION_DAYS + 2)
    assert seen.largest_item < PAGE_BYTES
    assert seen.refresh_bytes <= seen.map_bytes and seen.refresh_gets <= seen.map_items
    # And day after day in the steady state, nothing grows: the last day's map is no larger than the first's
    (first, *_, last) = seen.by_day
    assert last[0] <= first[0] and last[1] <= first[1] and last[2] <= first[2] * 1.02
