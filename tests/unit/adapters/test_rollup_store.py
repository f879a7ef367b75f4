"""Reading an entity's rollups: keys BatchGetItem hands back unprocessed are asked again after a backoff
on the injected sleep (no real sleep), and rollups that stay unprocessed fail the read, never go missing."""

from __future__ import annotations

import pytest

from adapters.rollup_store import ReadCount, RollupStore
from keydesign.rollup import Figures
from tests.unit.adapters.conftest import ThrottledBatchGets

TABLE = "control"
HOUR = 3_600_000
STARTS = [1_795_000_000_000 + i * HOUR for i in range(150)]  # two BatchGetItem chunks (100 keys each at most)


def _store(per_call: int, sleeps: list[float]) -> tuple[RollupStore, ThrottledBatchGets]:
    maker = RollupStore(None, None, TABLE, "readings", 30 * 24 * HOUR)
    items = []
    for n, start in enumerate(STARTS):
        figures = Figures()
        figures.add({"temp": n})
        items.append(maker.rollup_write(HOUR, start, "sensor-1", figures).item)
    api = ThrottledBatchGets(TABLE, items, per_call)
    return RollupStore(api, None, TABLE, "readings", 30 * 24 * HOUR, sleep=sleeps.append), api


def test_unprocessed_rollups_are_asked_again_after_backoff_on_the_injected_sleep() -> None:
    # Given a table that reads 60 keys a call and hands the others back unprocessed
    sleeps: list[float] = []
    store, api = _store(per_call=60, sleeps=sleeps)
    cost = ReadCount()
    # When 150 hours of an entity's rollups are read (a chunk of 100 keys, then one of 50)
    found = store.entity_rollups(HOUR, STARTS, "sensor-1", cost)
    # Then only the unprocessed keys were asked again, after a full-jitter backoff (under 50 ms) on the
    # injected sleep, and every hour's figures came back, each call's cost counted
    assert api.asked == [100, 40, 50]
    assert len(sleeps) == 1 and 0 <= sleeps[0] <= 0.05
    assert sorted(found) == STARTS and [found[s].readings for s in STARTS] == [1] * 150
    assert (cost.calls, cost.items, cost.read_units) == (3, 150, 75.0)


def test_rollups_left_unprocessed_after_every_attempt_fail_the_read() -> None:
    # Given a table so throttled it reads no key at all
    sleeps: list[float] = []
    store, api = _store(per_call=0, sleeps=sleeps)
    # When an entity's rollups are read, the read fails rather than answer without them
    with pytest.raises(RuntimeError, match=r"^100 rollups still unprocessed after 8 BatchGetItem calls$"):
        store.entity_rollups(HOUR, STARTS, "sensor-1", ReadCount())
    # After 8 calls with a doubling full-jitter backoff between them (at most 2 s; none after the last)
    assert api.asked == [100] * 8
    bounds = [0.05, 0.1, 0.2, 0.4, 0.8, 1.6, 2.0]
    assert len(sleeps) == 7 and all(0 <= s <= bound for s, bound in zip(sleeps, bounds, strict=True))
