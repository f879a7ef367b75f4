"""The shard map: serialisation, validation, and changes that never rewrite the past."""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from keydesign import (
    Bucket,
    ConfigError,
    KeyDesignError,
    Layout,
    Reading,
    ShardMap,
    earliest_change_boundary,
    parse_timestamp,
)
from keydesign.shardmap import MAX_ENTITY_SHARDS, MAX_GLOBAL_SHARDS

from .strategies import ANCHORS, BUCKETS, DAY, ENTITIES, PROPERTY, Step, layouts, offsets_near, shard_map_histories

HOUR = 3_600_000
T0 = parse_timestamp("2026-11-22T06:00:00Z")


@st.composite
def histories(draw: st.DrawFn) -> tuple[ShardMap, list[Step]]:
    layout: Layout = draw(layouts())
    return draw(shard_map_histories(layout, draw(st.sampled_from(ANCHORS))))


def counts(shard_map: ShardMap, ts_ms: int) -> tuple[int, dict[str, int | None]]:
    return shard_map.global_shards_at(ts_ms), {
        e: shard_map.entity_shards_at(e, ts_ms) for e in shard_map.entity_history
    }


# -- round trip ----------------------------------------------------------------------


@PROPERTY
@given(history=histories())
def test_to_dict_and_from_dict_round_trip_through_json(history: tuple[ShardMap, list[Step]]) -> None:
    shard_map, _ = history
    data = json.loads(json.dumps(shard_map.to_dict()))
    again = ShardMap.from_dict(data)
    assert again == shard_map
    assert again.to_dict() == data
    assert again.version == shard_map.version


# -- changes never rewrite the past ------------------------------------------------------


@PROPERTY
@given(history=histories())
def test_a_change_never_alters_any_count_at_or_before_now(history: tuple[ShardMap, list[Step]]) -> None:
    _, steps = history
    for step in steps:
        # Counts are step functions: equal on [0, now] iff equal at 0, at now and
        # at every change point of either map up to now.
        points = {0, step.now_ms} | {
            c.effective_from_ms
            for m in (step.before, step.after)
            for h in (m.global_history, *m.entity_history.values())
            for c in h
            if c.effective_from_ms <= step.now_ms
        }
        for ts in points:
            before_global, before_entities = counts(step.before, ts)
            after_global, after_entities = counts(step.after, ts)
            assert before_global == after_global, (ts, step)
            for entity_id, count in after_entities.items():
                assert before_entities.get(entity_id) == count, (ts, entity_id, step)
        # ... and from its boundary on, the new count holds
        assert step.after.bucket.is_boundary(step.effective_from_ms)
        assert step.effective_from_ms > step.now_ms
        for ts in (step.effective_from_ms, step.effective_from_ms + 30 * DAY):
            if step.target == "global":
                assert step.after.global_shards_at(ts) == step.shards
            else:
                assert step.after.entity_shards_at(step.target, ts) == step.shards
        # ... and the version moves exactly when the map does
        changed = step.after != step.before
        assert step.after.version == step.before.version + (1 if changed else 0)


def test_scheduling_the_count_already_in_force_changes_nothing() -> None:
    shard_map = ShardMap.initial(Bucket.parse("1h"), 4)
    assert shard_map.with_global(4, T0 + HOUR, now_ms=T0) is shard_map
    scheduled = shard_map.with_global(8, T0 + HOUR, now_ms=T0)
    # Re-scheduling the same future change is a no-op; replacing it is allowed.
    assert scheduled.with_global(8, T0 + HOUR, now_ms=T0 + 1) is scheduled
    replaced = scheduled.with_global(6, T0 + HOUR, now_ms=T0 + 1)
    assert replaced.global_shards_at(T0 + HOUR) == 6
    assert len(replaced.global_history) == 2
    # Replacing it by the count in force drops it.
    assert scheduled.with_global(4, T0 + HOUR, now_ms=T0 + 1).global_history == shard_map.global_history


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda m: m.with_global(8, T0, now_ms=T0), "global"),  # at now: not the future
        (lambda m: m.with_global(8, T0 - HOUR, now_ms=T0), "global"),  # the past
        (lambda m: m.with_global(8, T0 + HOUR + 1, now_ms=T0), "global"),  # not a boundary
        (lambda m: m.with_global(8, T0 + HOUR, now_ms=T0 + 2 * HOUR), "global"),  # in the past by now
        (lambda m: m.with_global(8, T0 + 2 * HOUR, now_ms=T0), "global"),  # precedes the scheduled 3h change
        (lambda m: m.with_global(0, T0 + 5 * HOUR, now_ms=T0), "shards"),
        (lambda m: m.with_global(True, T0 + 5 * HOUR, now_ms=T0), "shards"),
        (lambda m: m.with_global(MAX_GLOBAL_SHARDS + 1, T0 + 5 * HOUR, now_ms=T0), "shards"),
        (lambda m: m.with_entity("hot-1", 2, T0, now_ms=T0), "entities.hot-1"),
        (lambda m: m.with_entity("hot-1", 2, T0 + 30 * 60_000, now_ms=T0), "entities.hot-1"),
        (lambda m: m.with_entity("hot-1", 0, T0 + HOUR, now_ms=T0), "entities.hot-1"),
        (lambda m: m.with_entity("hot-1", MAX_ENTITY_SHARDS + 1, T0 + HOUR, now_ms=T0), "entities.hot-1"),
        (lambda m: m.with_entity("hot-1", 2.0, T0 + HOUR, now_ms=T0), "entities.hot-1"),
        (lambda m: m.with_entity("bad#id", 2, T0 + HOUR, now_ms=T0), "entity_id"),
    ],
)
def test_changes_refuse_the_past_non_boundaries_and_bad_counts(change: Callable[[ShardMap], Any], field: str) -> None:
    shard_map = ShardMap.initial(Bucket.parse("1h"), 4).with_global(6, T0 + 3 * HOUR, now_ms=T0 - HOUR)
    with pytest.raises(KeyDesignError) as caught:
        change(shard_map)
    assert caught.value.field == field


@PROPERTY
@given(
    spec=st.sampled_from(BUCKETS),
    now=st.integers(0, 10**13),
    ttl=st.one_of(st.just(0), st.integers(0, 2 * DAY), st.sampled_from([60_000, HOUR, DAY])),
    margin=st.integers(0, 60_000),
)
def test_earliest_change_boundary_is_the_first_boundary_strictly_after_every_cache(
    spec: str, now: int, ttl: int, margin: int
) -> None:
    bucket = Bucket.parse(spec)
    # Also the case where now + ttl + margin is itself a boundary: the change must wait one more bucket.
    on_boundary = bucket.start(now) + 3 * bucket.width_ms - ttl - margin
    for at in (now, *([on_boundary] if on_boundary >= 0 else [])):
        boundary = earliest_change_boundary(bucket, at, ttl, margin)
        assert bucket.is_boundary(boundary)
        assert boundary > at + ttl + margin
        assert boundary - bucket.width_ms <= at + ttl + margin


# -- from_dict refuses anything malformed ------------------------------------------------

VALID: dict[str, Any] = {
    "version": 3,
    "bucket": "1h",
    "global": [
        {"effective_from": "1970-01-01T00:00:00.000Z", "shards": 4},
        {"effective_from": "2026-11-22T08:00:00.000Z", "shards": 8},
    ],
    "entities": {"hot-1": [{"effective_from": "2026-11-22T09:00:00.000Z", "shards": 3}]},
}


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], Any]:
    def edit(data: dict[str, Any]) -> Any:
        target: Any = data
        for step in path[:-1]:
            target = target[step]
        if value is _DELETE:
            del target[path[-1]]
        else:
            target[path[-1]] = value
        return data

    return edit


_DELETE = object()


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda d: [d], "shard_map"),
        (_set(("version",), -1), "shard_map.version"),
        (_set(("version",), True), "shard_map.version"),
        (_set(("version",), "3"), "shard_map.version"),
        (_set(("bucket",), _DELETE), "bucket"),
        (_set(("bucket",), "7m"), "bucket"),
        (_set(("global",), _DELETE), "global"),
        (_set(("global",), []), "global"),
        (_set(("global",), {"effective_from": "1970-01-01T00:00:00.000Z", "shards": 4}), "global"),
        (_set(("global", 0, "effective_from"), "2026-01-01T00:00:00.000Z"), "global"),
        (_set(("global", 1, "shards"), _DELETE), "global[1]"),
        (_set(("global", 1, "effective_from"), _DELETE), "global[1]"),
        (_set(("global", 1, "note"), "extra"), "global[1]"),
        (_set(("global", 1), "8 from 08:00"), "global[1]"),
        (_set(("global", 1, "effective_from"), "2026-11-22T08:30:00.000Z"), "global[1]"),
        (_set(("global", 1, "effective_from"), "tomorrow"), "global[1]"),
        (_set(("global", 1, "effective_from"), "1970-01-01T00:00:00.000Z"), "global[1]"),
        (_set(("global", 0, "shards"), 0), "global[0]"),
        (_set(("global", 0, "shards"), -2), "global[0]"),
        (_set(("global", 0, "shards"), True), "global[0]"),
        (_set(("global", 0, "shards"), 4.0), "global[0]"),
        (_set(("global", 0, "shards"), "4"), "global[0]"),
        (_set(("global", 1, "shards"), MAX_GLOBAL_SHARDS + 1), "global[1]"),
        (_set(("entities",), [["hot-1", 3]]), "entities"),
        (_set(("entities", "bad#id"), [{"effective_from": "2026-11-22T09:00:00.000Z", "shards": 3}]), "entities"),
        (_set(("entities", ""), [{"effective_from": "2026-11-22T09:00:00.000Z", "shards": 3}]), "entities"),
        (_set(("entities", "hot 1"), [{"effective_from": "2026-11-22T09:00:00.000Z", "shards": 3}]), "entities"),
        (_set(("entities", "hot-1"), []), "entities.hot-1"),
        (_set(("entities", "hot-1", 0, "shards"), MAX_ENTITY_SHARDS + 1), "entities.hot-1[0]"),
        (_set(("entities", "hot-1", 0, "effective_from"), "2026-11-22T09:00:00.001Z"), "entities.hot-1[0]"),
    ],
)
def test_from_dict_refuses_malformed_maps_naming_the_field(edit: Callable[[dict[str, Any]], Any], field: str) -> None:
    # Given a valid serialised map with one defect
    data = edit(copy.deepcopy(VALID))
    # When it is parsed, Then it is refused, naming the field
    with pytest.raises(ConfigError) as caught:
        ShardMap.from_dict(data)
    assert caught.value.field == field


def test_from_dict_accepts_the_valid_map_it_is_derived_from() -> None:
    shard_map = ShardMap.from_dict(copy.deepcopy(VALID))
    assert shard_map.version == 3
    assert shard_map.global_shards_at(parse_timestamp("2026-11-22T07:59:59.999Z")) == 4
    assert shard_map.global_shards_at(parse_timestamp("2026-11-22T08:00:00Z")) == 8
    assert shard_map.entity_shards_at("hot-1", parse_timestamp("2026-11-22T08:59:59.999Z")) is None
    assert shard_map.entity_shards_at("hot-1", parse_timestamp("2026-11-22T09:00:00Z")) == 3
    assert list(shard_map.split_entities_at(parse_timestamp("2026-11-22T09:00:00Z"))) == [("hot-1", 3)]


def test_from_dict_refuses_an_unknown_field_so_a_typo_cannot_drop_splits() -> None:
    # Given a serialised map whose "entities" key is misspelt
    data = ShardMap.initial(Bucket.parse("1h"), 4).to_dict()
    data["entites"] = {"hot": [{"effective_from": "2026-11-22T07:00:00Z", "shards": 4}]}
    # Then it is refused, naming the field, instead of silently losing the split
    with pytest.raises(ConfigError) as exc:
        ShardMap.from_dict(data)
    assert exc.value.field == "shard_map.entites"


@pytest.mark.parametrize("kind", ["random", "calculated", "hybrid"])
def test_a_layout_refuses_a_shard_map_on_another_bucket_grid(kind: str) -> None:
    # Given a 1h layout and a map on 5m buckets (its changes could fall mid-bucket)
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    shard_map = ShardMap.initial(Bucket.parse("5m"), 4)
    reading = Reading.parse({"entity_id": "e", "timestamp": 1_795_330_671_123, "measures": {"v": 1}})
    # Then writing and planning both refuse it, naming the field
    calls = [
        lambda: layout.pack([(reading, 1)], shard_map),
        lambda: layout.plan_entity("e", 0, 3_600_000, shard_map),
    ]
    if kind == "hybrid":
        calls.append(lambda: layout.plan_range(0, 3_600_000, shard_map))
    for call in calls:
        with pytest.raises(ConfigError) as exc:
            call()
        assert exc.value.field == "shard_map.bucket"


def test_with_entity_names_a_bad_entity_id_as_a_config_error() -> None:
    shard_map = ShardMap.initial(Bucket.parse("1h"), 4)
    with pytest.raises(ConfigError) as exc:
        shard_map.with_entity("bad#id", 2, 3_600_000, now_ms=0)
    assert exc.value.field == "entity_id"


# -- compaction: what is past retention is folded away, and no plan inside it changes ------------


@st.composite
def compactions(draw: st.DrawFn) -> tuple[Layout, ShardMap, int, int, int]:
    """A layout, a map grown by changes, a horizon among them, and a range from the horizon on."""
    layout: Layout = draw(layouts())
    anchor = draw(st.sampled_from(ANCHORS))
    shard_map, steps = draw(shard_map_histories(layout, anchor))
    changes = sorted({s.effective_from_ms for s in steps} | {anchor})
    width = layout.bucket.width_ms
    horizon = draw(
        st.one_of(
            st.integers(anchor - 2 * DAY, anchor + 12 * DAY),
            st.builds(lambda c, d: c + d, st.sampled_from(changes), st.sampled_from((-1, 0, 1))),
        )
    )
    from_ms = horizon + draw(offsets_near(width, min(2 * DAY, 150 * width)))
    to_ms = from_ms + 1 + draw(offsets_near(width, min(2 * DAY, 150 * width)))
    return layout, shard_map, horizon, from_ms, to_ms


def _default(layout: Layout) -> int | None:
    return 1 if layout.can.shared_partitions else None


@PROPERTY
@given(case=compactions())
def test_compaction_changes_no_plan_for_a_range_inside_retention(case: tuple[Layout, ShardMap, int, int, int]) -> None:
    layout, shard_map, horizon, from_ms, to_ms = case
    # Given a map compacted at a horizon (the oldest instant any reading may still be written or read at)
    compacted = shard_map.compacted(horizon, entity_default=_default(layout))
    # Then every plan for a range from the horizon on is the same as with the whole history
    for entity in ENTITIES:
        assert layout.plan_entity(entity, from_ms, to_ms, compacted) == layout.plan_entity(
            entity, from_ms, to_ms, shard_map
        ), entity
    if layout.can.range_reads:
        assert layout.plan_range(from_ms, to_ms, compacted) == layout.plan_range(from_ms, to_ms, shard_map)
    # And compacting again folds nothing more; the result is a valid stored map
    assert compacted.compacted(horizon, entity_default=_default(layout)) is compacted
    assert ShardMap.from_dict(json.loads(json.dumps(compacted.to_dict()))) == compacted


@PROPERTY
@given(case=compactions())
def test_compaction_keeps_only_the_changes_after_the_horizon_and_the_counts_in_force(
    case: tuple[Layout, ShardMap, int, int, int],
) -> None:
    layout, shard_map, horizon, _, _ = case
    compacted = shard_map.compacted(horizon, entity_default=_default(layout))
    for history in (compacted.global_history, *compacted.entity_history.values()):
        assert sum(1 for c in history if c.effective_from_ms <= horizon) <= 1
    for entity, history in shard_map.entity_history.items():
        after = [c for c in history if c.effective_from_ms > horizon]
        assert [c for c in compacted.entity_history.get(entity, ()) if c.effective_from_ms > horizon] == after
        if entity in compacted.entity_history:
            continue
        # An entity leaves the map only when, from the horizon on, it had nothing but the default
        assert not after
        count = shard_map.entity_shards_at(entity, horizon)
        assert count in (None, 1) if layout.can.shared_partitions else count == shard_map.global_shards_at(horizon)
    assert compacted.version == shard_map.version


def test_compaction_drops_an_entity_back_on_its_base_key_and_keeps_one_still_split() -> None:
    bucket = Bucket.parse("1h")
    shard_map = (
        ShardMap.initial(bucket, 4)
        .with_global(8, T0 + HOUR, now_ms=T0)
        .with_entity("calm", 5, T0 + HOUR, now_ms=T0)
        .with_entity("calm", 1, T0 + 3 * HOUR, now_ms=T0 + 2 * HOUR)
        .with_entity("busy", 5, T0 + HOUR, now_ms=T0)
        .with_entity("late", 3, T0 + 5 * HOUR, now_ms=T0)
    )
    compacted = shard_map.compacted(T0 + 4 * HOUR, entity_default=1)
    assert [(c.effective_from_ms, c.shards) for c in compacted.global_history] == [(0, 8)]
    assert set(compacted.entity_history) == {"busy", "late"}
    assert [(c.effective_from_ms, c.shards) for c in compacted.entity_history["busy"]] == [(T0 + HOUR, 5)]
    # In the layouts whose default is the global N, a count of 1 is a count of its own
    assert set(shard_map.compacted(T0 + 4 * HOUR, entity_default=None).entity_history) == {"calm", "busy", "late"}
    # Nothing is folded before the first change takes effect
    assert shard_map.compacted(T0, entity_default=1) is shard_map


def test_an_own_count_equal_to_global_n_is_kept_while_global_n_changes_before_the_entitys_next_change() -> None:
    # Given (calculated layout) an entity with its own 4 suffixes, equal to N = 4 at the horizon,
    # and N going to 8 after it: from then on the entity's own 4 differs from N
    layout = Layout.from_settings(kind="calculated", bucket="1h", table_prefix="readings")
    shard_map = (
        ShardMap.initial(layout.bucket, 2)
        .with_entity("pump-7", 4, T0 + HOUR, now_ms=T0)
        .with_global(4, T0 + 2 * HOUR, now_ms=T0)
        .with_global(8, T0 + 5 * HOUR, now_ms=T0 + 3 * HOUR)
    )
    compacted = shard_map.compacted(T0 + 3 * HOUR, entity_default=None)
    # Then it keeps its count, and the plan after N changes still reads its 4 suffixes, not 8
    assert compacted.entity_shards_at("pump-7", T0 + 6 * HOUR) == 4
    late = (T0 + 6 * HOUR, T0 + 7 * HOUR)
    assert layout.plan_entity("pump-7", *late, compacted) == layout.plan_entity("pump-7", *late, shard_map)
    # And once N stays 4 for good, the entity's own 4 says nothing N does not
    steady = ShardMap.initial(layout.bucket, 2).with_entity("pump-7", 4, T0 + HOUR, now_ms=T0)
    steady = steady.with_global(4, T0 + 2 * HOUR, now_ms=T0)
    assert steady.compacted(T0 + 3 * HOUR, entity_default=None).entity_history == {}
