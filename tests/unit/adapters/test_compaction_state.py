"""The compaction watermark as readers get it: the state item, read through a cache."""

from __future__ import annotations

import pytest

from adapters.compaction_state import NOTHING_COMPACTED, CachedWatermark
from doubles.memory_dynamo import MemoryDynamo
from keydesign.writetier import CompactionState, EarlierGroups

HOUR = 3_600_000
THROUGH = 1_795_327_200_000  # 2026-11-22T06:00:00Z, the end of an hour


def state(db: MemoryDynamo, through: object, **attributes: dict[str, str]) -> None:
    """The compaction state item, as compaction stores it: ``through``, and any other ``attributes``."""
    kind = "S" if isinstance(through, str) else "N"
    db.put_item(
        TableName="control",
        Item={"pk": {"S": "compactstate"}, "sk": {"S": "readings"}, "through": {kind: str(through)}, **attributes},
    )


def cached_watermark() -> tuple[MemoryDynamo, list[float], CachedWatermark]:
    """A stored watermark, read once through a cache of a minute on a clock the test moves (at 0 s)."""
    db, clock = MemoryDynamo(), [0.0]
    watermark = CachedWatermark(db, "control", "readings", 60_000, clock=lambda: clock[0])
    state(db, THROUGH)
    assert watermark.state().through == THROUGH
    return db, clock, watermark


def test_the_watermark_is_read_once_per_ttl_and_a_stale_copy_is_older() -> None:
    # Given a stored watermark, read through a cache of a minute
    db, clock, watermark = cached_watermark()

    # When compaction moves it on: the cached (older) copy holds until the minute is up, then the new one
    state(db, THROUGH + HOUR)
    clock[0] = 59.9
    assert watermark.state().through == THROUGH
    clock[0] = 60.0
    assert watermark.state().through == THROUGH + HOUR


def test_a_consistent_read_skips_the_cache_and_refreshes_it() -> None:
    # Given a cached copy of the watermark, and compaction moving it on within the minute
    db, _, watermark = cached_watermark()
    state(db, THROUGH + HOUR)
    calls: list[dict[str, object]] = []
    read = db.get_item
    db.get_item = lambda **kwargs: calls.append(kwargs) or read(**kwargs)  # type: ignore[method-assign]
    # When the rollup function plans a slot: the state as stored, read strongly consistent
    assert watermark.consistent().through == THROUGH + HOUR
    assert [c.get("ConsistentRead") for c in calls] == [True]
    # and the cache holds the newer copy from then on
    assert watermark.state().through == THROUGH + HOUR and len(calls) == 1
    assert NOTHING_COMPACTED.consistent().through == 0


def test_no_state_yet_is_nothing_compacted() -> None:
    watermark = CachedWatermark(MemoryDynamo(), "control", "readings", 60_000)
    assert watermark.state().through == 0 == NOTHING_COMPACTED.state().through


@pytest.mark.parametrize("through", [THROUGH + 1, "soon", -HOUR])
def test_a_watermark_that_is_not_an_hours_end_is_an_error_naming_it(through: object) -> None:
    db = MemoryDynamo()
    state(db, through)
    with pytest.raises(ValueError, match="through"):
        CachedWatermark(db, "control", "readings", 60_000).state()


def test_the_cached_state_holds_the_group_counts_compaction_recorded() -> None:
    db = MemoryDynamo()
    state(db, THROUGH, groups={"N": "8"}, previous={"S": f"4@{THROUGH + HOUR}"})
    got = CachedWatermark(db, "control", "readings", 60_000).state()
    assert got == CompactionState(THROUGH, 8, (EarlierGroups(4, THROUGH + HOUR),))


def test_a_malformed_earlier_group_count_is_an_error_naming_it() -> None:
    db = MemoryDynamo()
    state(db, THROUGH, previous={"N": "4"})  # no "@<until>"
    with pytest.raises(ValueError, match="previous"):
        CachedWatermark(db, "control", "readings", 60_000).state()
