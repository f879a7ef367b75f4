"""The write tier end to end on one running local system: a sparse fleet published to the stream is
written by ingest as group items, read back whole through the API (entity pages, cross-entity pages,
latest, raw aggregates), compacted by the scheduled compaction function into cluster blocks, and read back
the same again, from the cluster blocks once the readers' watermark has moved.

Its readings lie in one hour, the current one or the end of the one before (a late one would go to
blocks), so compaction runs on a clock an hour and its settle time ahead, once publishing has stopped;
then the rollup function, on a clock a few minutes past compaction's, so its totals watermark passes
the hour: the fleet's totals and each device's aggregates come from compaction's figures
(docs/rollups.md), no mark having been written.
"""

from __future__ import annotations

import json
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from client import QueryClient
from infra.config import LambdaFunction
from keydesign import format_ts
from keydesign.writetier import CLUSTER_PK_PREFIX, GROUP_PK_PREFIX, SLICE_MS, WriteTier, cluster_of, slice_start
from local_runtime import LocalSystem
from tests.integration.local_runtime.conftest import (
    WAIT_S,
    ingest_only,
    local_config,
    publish_readings,
    stored,
    stored_items,
)

pytestmark = pytest.mark.integration

ENTITIES = 120
#: From the fleet's first reading to its last
SPAN_MS = (ENTITIES - 1) * 10 + 5_000


@dataclass(frozen=True)
class Fleet:
    system: LocalSystem
    sent: list[dict[str, Any]]
    low: int
    high: int


def _kinds(system: LocalSystem) -> Counter[str]:
    kinds: Counter[str] = Counter()
    for item in stored_items(system):
        pk, sk = item["pk"]["S"], item["sk"]["S"]
        if pk.startswith(GROUP_PK_PREFIX):
            kinds["dense mark" if sk.startswith("!") else "group item"] += 1
        else:
            kinds["cluster block" if pk.startswith(CLUSTER_PK_PREFIX) else "block"] += 1
    return kinds


@pytest.fixture(scope="module")
def fleet() -> Iterator[Fleet]:
    config = local_config()
    # Compaction's clock an hour and its settle time ahead: once publishing stops, the hour is settled.
    ahead_s = SLICE_MS / 1000 + config.ingest_timeout_s + 5 + 60
    options = ingest_only(
        query_api=True,
        compaction=True,
        compaction_every_s=86_400.0,
        compaction_ahead_s=ahead_s,
        rollups=True,
        rollup_every_s=86_400.0,
        # past the minute compaction moves its watermark in, by more than the rollup function's settle
        rollup_ahead_s=ahead_s + 300,
    )
    with LocalSystem(config, options) as system:
        # Readings from 20 s ago (once the system runs), within one hour: in the past (a reading ahead of the
        # query's clock is not yet its device's latest), and in a re-pack slice that ended less than the
        # grace (a minute) before ingest's batch starts (so in the write tier, not late)
        low = int(time.time() * 1000) - 20_000
        if slice_start(low + SPAN_MS) != slice_start(low):  # the last seconds of the hour before
            low = slice_start(low + SPAN_MS) - SPAN_MS - 1
        # Two readings of each device, 5 s apart, all within 10 s: no device sends 8 in a batch (none writes
        # blocks), and a group's readings of a batch fit one item
        sent = [
            {
                "entity_id": f"meter-{d:03d}",
                "event_id": f"m{d}-{n}",
                "timestamp": low + d * 10 + n * 5_000,
                "measures": {"kwh": round(d / 7 + n, 3), "count": d + n},
                "dimensions": {"site": f"s{d % 3}"},
            }
            for d in range(ENTITIES)
            for n in range(2)
        ]
        # No compaction state: its first run starts at the start item ingest puts with its first group items
        publish_readings(system, sent)
        assert system.wait_until_idle(WAIT_S)
        yield Fleet(system, sent, low, max(r["timestamp"] for r in sent) + 1)


def _expected(sent: list[dict[str, Any]], entity: str) -> list[tuple[str, str, str]]:
    return sorted(
        (format_ts(r["timestamp"]), r["event_id"], json.dumps(r["measures"], sort_keys=True))
        for r in sent
        if r["entity_id"] == entity
    )


def _answers_equal_what_was_sent(fleet: Fleet) -> None:
    client = QueryClient(str(fleet.system.endpoints.api_url))
    for entity in ("meter-000", "meter-041", f"meter-{ENTITIES - 1:03d}"):
        got = sorted(
            (r.timestamp, r.event_id, json.dumps(r.measures, sort_keys=True))
            for r in client.readings(entity, fleet.low, fleet.high)
        )
        assert got == _expected(fleet.sent, entity), entity
        latest = client.latest(entity).reading
        assert latest is not None and latest.event_id == _expected(fleet.sent, entity)[-1][1]
        hour = slice_start(fleet.low)
        series = client.aggregates(entity, hour, hour + SLICE_MS, "1h")
        assert series.readings == 2 and [i.readings for i in series.intervals] == [2], entity
    # Every entity's readings across entities, in pages of 50, once each
    everything = [(r.entity_id, r.event_id) for r in client.range_readings(fleet.low, fleet.high, limit=50)]
    assert sorted(everything) == sorted((r["entity_id"], r["event_id"]) for r in fleet.sent)


def test_a_sparse_fleet_is_written_as_group_items_and_read_back_whole(fleet: Fleet) -> None:
    # Then ingest wrote group items and no block: each reading once
    kinds = _kinds(fleet.system)
    assert kinds["group item"] > 0 and kinds["block"] == 0 and kinds["cluster block"] == 0, kinds
    assert kinds["group item"] < len(fleet.sent) / 2, kinds  # packed across entities
    assert sorted(r.event_id for r in stored(fleet.system)) == sorted(r["event_id"] for r in fleet.sent)
    # and the API answers every read from them, as sent
    _answers_equal_what_was_sent(fleet)


def test_compaction_packs_the_devices_hours_into_cluster_blocks_and_the_answers_do_not_change(fleet: Fleet) -> None:
    # When the scheduled compaction function runs (its clock past the hour's settle time)
    schedule = fleet.system.schedule_of(LambdaFunction.COMPACTION)
    assert schedule is not None
    summary = schedule.run_once()
    # Then its first run started at the hour ingest's start item names (not KEEP_MS back): it compacted
    # that hour (and the next, had the fleet's readings crossed into it), and every reading, into a block per
    # cluster of a group's devices and hour (at 32 groups, 120 devices share few clusters: the unit tests and
    # the benchmarks show the packing of a large fleet)
    assert summary is not None and summary["corrupt_items"] == 0, summary
    assert 1 <= summary["hours"] <= 2 and summary["groups"] <= 2 * fleet.system.config.write_tier_groups, summary
    assert summary["readings_compacted"] == len(fleet.sent), summary
    kinds = _kinds(fleet.system)
    tier = WriteTier(fleet.system.config.write_tier_groups)
    clusters = {
        (tier.group_of(r["entity_id"]), cluster_of(r["entity_id"]), slice_start(r["timestamp"])) for r in fleet.sent
    }
    assert kinds["cluster block"] == len(clusters), kinds
    # and every answer is what was sent, whether the readers' watermark has moved yet or not
    _answers_equal_what_was_sent(fleet)


def test_the_fleets_totals_and_each_devices_aggregates_come_from_compaction_exactly(fleet: Fleet) -> None:
    # Given the hour compacted (here too: a worker of its own may run this test alone; a second
    # compaction run finds nothing left to do); when the rollup function runs
    compaction = fleet.system.schedule_of(LambdaFunction.COMPACTION)
    assert compaction is not None
    compaction.run_once()
    schedule = fleet.system.schedule_of(LambdaFunction.ROLLUP)
    assert schedule is not None
    summary = schedule.run_once()
    # Then it applied no mark (a sparse fleet writes none), and its totals watermark passed the hour
    hour = slice_start(fleet.low)
    assert summary is not None and summary["marks"] == 0, summary
    assert summary["totals_through"] >= format_ts(hour + SLICE_MS), summary
    client = QueryClient(str(fleet.system.endpoints.api_url))
    window = {"from": format_ts(hour), "to": format_ts(hour + SLICE_MS)}
    # and every entity's totals per minute of the hour are the figures of what was sent
    totals = client.get("/aggregates", {**window, "interval": "1m"})
    minutes: dict[str, list[dict[str, Any]]] = {}
    for r in fleet.sent:
        minutes.setdefault(format_ts(r["timestamp"] - r["timestamp"] % 60_000), []).append(r)
    assert totals["readings"] == len(fleet.sent)
    got = {
        i["start"]: (i["readings"], round(i["measures"]["kwh"]["sum"], 6), i["measures"]["count"]["max"])
        for i in totals["intervals"]
    }
    assert got == {
        m: (len(rs), round(sum(r["measures"]["kwh"] for r in rs), 6), max(r["measures"]["count"] for r in rs))
        for m, rs in minutes.items()
    }
    # and a device's hour is answered from compaction's figures (its cluster's blocks), not raw
    for entity in ("meter-000", f"meter-{ENTITIES - 1:03d}"):
        series = client.get(f"/entities/{entity}/aggregates", {**window, "interval": "1h"})
        mine = [r for r in fleet.sent if r["entity_id"] == entity]
        assert series["source"] == "rollups" and series["readings"] == 2, series
        assert round(series["intervals"][0]["measures"]["kwh"]["sum"], 6) == round(
            sum(r["measures"]["kwh"] for r in mine), 6
        )
