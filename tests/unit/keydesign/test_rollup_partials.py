"""Compaction's side of the rollups (keydesign.rollup): group partials, its parts of the totals, redo
requests, and the compacted blocks an hour of the rollup function's is flagged on."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import ConfigError, Reading
from keydesign.periods import HOUR_MS
from keydesign.rollup import (
    Figures,
    Granularities,
    GroupPartial,
    RedoRequest,
    fleet_parts,
    parse_total_sk,
    partial_pk,
    remark_starts,
    total_sk,
)
from keydesign.tiering import compact_hour
from keydesign.writetier import ROLLUP_OWNED, WriteTier

from .strategies import PROPERTY
from .test_blocks import T0

HOUR = T0 - T0 % HOUR_MS
LEVELS = Granularities.parse("1m,1h,1d")


def reading(entity: str, ts: int, value: float, event: str = "e") -> Reading:
    return Reading.parse({"entity_id": entity, "timestamp": ts, "event_id": event, "measures": {"v": value}})


def test_a_partial_holds_the_figures_of_each_finest_interval_and_round_trips_as_an_item() -> None:
    readings = [reading("a", HOUR + 5, 1.5), reading("b", HOUR + 59_999, 2), reading("a", HOUR + 60_000, -1)]
    partial = GroupPartial.of(HOUR, 7, 32, readings, LEVELS.finest)
    assert sorted(partial.intervals) == [HOUR, HOUR + 60_000]
    assert partial.intervals[HOUR].readings == 2
    assert partial.intervals[HOUR].measures["v"].total == 3.5
    item = partial.item("ts", expires_at=123)
    assert (item["pk"], item["sk"]) == (partial_pk("ts", HOUR + 17), "0007")
    again = GroupPartial.from_item(item)
    assert (again.hour_ms, again.group, again.groups) == (HOUR, 7, 32)
    assert {s: f.item() for s, f in again.intervals.items()} == {s: f.item() for s, f in partial.intervals.items()}


def test_a_partial_refuses_a_reading_outside_its_hour_and_a_malformed_item() -> None:
    with pytest.raises(ValueError, match="not in the hour"):
        GroupPartial.of(HOUR, 0, 1, [reading("a", HOUR + HOUR_MS, 1)], LEVELS.finest)
    item = GroupPartial.of(HOUR, 0, 1, [reading("a", HOUR, 1)], LEVELS.finest).item("ts", 1)
    with pytest.raises(ValueError, match="malformed group partial"):
        GroupPartial.from_item({**item, "G": "many"})
    with pytest.raises(ValueError, match="malformed group partial"):
        GroupPartial.from_item({**item, "f": {"noon": {"n": 1}}})


@PROPERTY
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, HOUR_MS - 1), st.integers(-50, 50)), min_size=0, max_size=40),
    st.integers(1, 4),
)
def test_the_fleet_parts_equal_the_figures_of_every_reading_whatever_the_groups(
    entries: list[tuple[int, int, int]], groups: int
) -> None:
    readings = [reading(f"e{i}", HOUR + offset, value, f"x{n}") for n, (i, offset, value) in enumerate(entries)]
    partials = [
        GroupPartial.of(HOUR, g, groups, [r for n, r in enumerate(readings) if n % groups == g], LEVELS.finest)
        for g in range(groups)
    ]
    parts = fleet_parts(partials, LEVELS, HOUR)
    assert set(parts) == {60_000, HOUR_MS}  # the day is combined from the hours, not from partials
    assert len(parts[60_000]) == 60  # an empty minute too: a part that lost its readings is put empty
    for level, intervals in parts.items():
        for start, figures in intervals.items():
            inside = [r for r in readings if start <= r.ts_ms < start + level]
            expected = Figures()
            for r in inside:
                expected.add(r.measures)
            assert figures.item() == expected.item()


def test_totals_sort_keys_tell_compactions_part_from_the_rollup_functions() -> None:
    assert total_sk(HOUR) < total_sk(HOUR, fleet_part=True) < total_sk(HOUR + 1)
    assert parse_total_sk(total_sk(HOUR, fleet_part=True)) == (HOUR, True)
    assert parse_total_sk(total_sk(HOUR)) == (HOUR, False)


def test_a_redo_request_names_its_hour_group_and_entity() -> None:
    request = RedoRequest(HOUR, 12, "dev#1")
    pk, sk = request.key("ts")
    assert pk == "compactredo#ts"
    assert RedoRequest.parse(sk) == request


def test_granularities_must_divide_an_hour_or_be_whole_hours() -> None:
    Granularities.parse("1m,1h,1d").check_hour_aligned()
    Granularities.parse("5m,2h").check_hour_aligned()
    with pytest.raises(ConfigError, match="90m neither divides an hour"):
        Granularities.parse("30m,90m").check_hour_aligned()
    assert Granularities.parse("1m,1h,1d").within_hour() == (60_000, HOUR_MS)


def test_remarks_are_the_minutes_holding_readings() -> None:
    got = remark_starts([reading("a", HOUR + 61_000, 1), reading("a", HOUR + 60_000, 1), reading("a", HOUR, 1)], 60_000)
    assert got == [HOUR, HOUR + 60_000]


def test_compacted_blocks_of_dense_marked_entities_are_flagged_and_only_theirs() -> None:
    tier = [(3, [reading("a", HOUR + 1, 1), reading("b", HOUR + 2, 2)])]
    blocks = compact_hour(HOUR, tier, table="t", pk=WriteTier(4).cluster_pk(1, HOUR), dense={"b", "z"})
    flags = {e: (e in b.rollups, e in b.item().get(ROLLUP_OWNED, set())) for b in blocks for e in b.entities}
    assert flags == {"a": (False, False), "b": (True, True)}
