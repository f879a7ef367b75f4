"""The pure detector: windowed load, thresholds, hysteresis, top-k, and the changes it schedules."""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hotkeys.detector import (
    DetectorConfig,
    EntityChange,
    Observation,
    WindowLoad,
    WindowTally,
    apply_decisions,
    decide,
    entity_target,
    tally,
)
from keydesign import Bucket, ConfigError, ShardMap, earliest_change_boundary, parse_timestamp
from keydesign.layouts import LayoutKind
from keydesign.shardmap import MAX_ENTITY_SHARDS
from simulator.adaptive import LoadTracker

HOUR = 3_600_000
T0 = parse_timestamp("2026-11-22T06:00:00Z")
BUCKET = Bucket.parse("1h")
CONFIG = DetectorConfig(window_ms=60_000)  # threshold 500, budget 400, scale-down at 320 per key
ALPHA = "sensor-alpha-001"


def base_key(shard: int, start: int = T0) -> str:
    return f"{shard:04d}#{BUCKET.label(BUCKET.start(start))}"


def window(
    start: int = T0,
    *,
    entities: dict[str, float] | None = None,
    on_key: dict[str, str] | None = None,
    width: int = 60_000,
) -> WindowLoad:
    """A window where each entity writes ``rate`` WCU/s to its key (a shared base key by default)."""
    w = WindowTally(start, width)
    for entity, rate in (entities or {}).items():
        key = (on_key or {}).get(entity, base_key(1, start))
        w.add(key, entity, round(rate * width / 1000), writes=round(rate * width / 1000), shared_key="#" not in key[5:])
    return w.load()


def judge(
    load: WindowLoad,
    shard_map: ShardMap,
    *,
    now: int | None = None,
    history: Iterable[WindowLoad] = (),
    kind: LayoutKind = "hybrid",
    config: DetectorConfig = CONFIG,
):  # type: ignore[no-untyped-def]
    now = load.end_ms + 30_000 if now is None else now
    change_from = earliest_change_boundary(BUCKET, now, 60_000, 360_000)
    return decide(load, shard_map, layout_kind=kind, config=config, change_from_ms=change_from, history=list(history))


# -- counting ----------------------------------------------------------------------------------


def obs(key: str, entity: str, units: int, t_ms: int, *, event: str = "INSERT") -> Observation:
    return Observation(
        partition_key=key,
        entity=entity,
        write_units=units,
        approx_time_ms=t_ms,
        event_name=event,
        shared_key=True,
    )


def test_a_window_adds_up_the_write_units_each_write_was_billed() -> None:
    # Given blocks billed 1, 2 and 37 write units in one window (the units their keys carry)
    loads = tally([obs("k", "e", 1, T0), obs("k", "e", 2, T0 + 1), obs("k", "e", 37, T0 + 2)], CONFIG)
    load = loads[T0].load()
    # Then the key and the entity carry exactly 40 write units over three writes
    assert load.keys["k"] == load.entities["e"]
    assert load.keys["k"].wcu == 40 and load.keys["k"].writes == 3
    assert load.entity_rate("e") == pytest.approx(40 / 60)


def test_user_deletes_count_as_writes_and_deletes() -> None:
    # (TTL deletions never reach the tally: parse_record skips them, test_records checks that)
    loads = tally(
        [
            obs("k", "e", 7, T0, event="REMOVE"),
            obs("k", "e", 7, T0, event="MODIFY"),
        ],
        CONFIG,
    )
    key = loads[T0].load().keys["k"]
    assert (key.wcu, key.writes, key.deletes) == (14, 2, 1)


def test_windows_are_aligned_to_their_width() -> None:
    loads = tally([obs("k", "e", 1, T0 + 59_999), obs("k", "e", 1, T0 + 60_000)], CONFIG)
    assert sorted(loads) == [T0, T0 + 60_000]


# -- splits -----------------------------------------------------------------------------------------


def test_a_hot_entity_is_split_to_what_its_rate_needs_from_the_change_boundary() -> None:
    # Given sensor-alpha-001 at 2,000 WCU/s on a base key shared with a quiet crowd
    shard_map = ShardMap.initial(BUCKET, 8)
    crowd = {f"sensor-{i:04d}": 5.0 for i in range(20)}
    load = window(entities={ALPHA: 2000.0, **crowd})
    now = T0 + 90_000
    # When the window is judged
    decisions = judge(load, shard_map, now=now)
    # Then its key is hot because of it, not because of the crowd
    (hot,) = decisions.hot_keys
    assert hot.key == base_key(1) and hot.entity == ALPHA and hot.crowded is False
    assert hot.wcu_per_s == pytest.approx(2100.0)
    # And it is split to ceil(2,000 / 400) = 5 sub-shards from the first boundary every writer will have seen
    change_from = earliest_change_boundary(BUCKET, now, 60_000, 360_000)
    assert decisions.splits == (EntityChange(ALPHA, 1, 5, change_from, 2000.0),)
    assert change_from == T0 + HOUR
    assert decisions.global_change is None
    # And applying it changes nothing before the boundary
    applied = apply_decisions(shard_map, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=change_from)
    assert applied.entity_shards_at(ALPHA, change_from - 1) is None
    assert applied.entity_shards_at(ALPHA, change_from) == 5
    assert applied.version == shard_map.version + 1


@pytest.mark.parametrize(
    ("threshold", "utilisation", "rate", "shards"),
    [(500, 0.4, 2000, 5), (500, 0.5, 2000, 4), (300, 0.5, 2000, 7), (500, 0.4, 2001, 6), (500, 0.4, 501, 2)],
)
def test_sub_shards_are_sized_by_the_budget(threshold: int, utilisation: float, rate: float, shards: int) -> None:
    config = DetectorConfig(window_ms=60_000, split_threshold_wcu=threshold, target_utilisation=utilisation)
    decisions = judge(window(entities={ALPHA: rate}), ShardMap.initial(BUCKET, 8), config=config)
    assert [s.to_shards for s in decisions.splits] == [shards]


def test_a_key_at_the_threshold_is_not_hot() -> None:
    decisions = judge(window(entities={ALPHA: 500.0}), ShardMap.initial(BUCKET, 8))
    assert decisions.hot_keys == () and decisions.splits == ()


def test_an_entity_already_split_enough_is_hot_but_not_split_again() -> None:
    # Given the split to 5 already scheduled at the next boundary
    shard_map = ShardMap.initial(BUCKET, 8).with_entity(ALPHA, 5, T0 + HOUR, now_ms=T0)
    # When the window before the boundary is judged
    decisions = judge(window(entities={ALPHA: 2000.0}), shard_map)
    # Then it is reported hot but nothing more is scheduled
    assert decisions.hot_entities == ((ALPHA, 2000.0),)
    assert decisions.splits == ()


def test_a_growing_entity_is_raised_at_the_boundary_already_scheduled() -> None:
    shard_map = ShardMap.initial(BUCKET, 8).with_entity(ALPHA, 5, T0 + HOUR, now_ms=T0)
    decisions = judge(window(entities={ALPHA: 2600.0}), shard_map, now=T0 + 120_000)
    (split,) = decisions.splits
    assert (split.from_shards, split.to_shards, split.effective_from_ms) == (5, 7, T0 + HOUR)
    applied = apply_decisions(shard_map, decisions, layout_kind="hybrid", now_ms=T0 + 120_000, change_from_ms=T0 + HOUR)
    assert [(c.effective_from_ms, c.shards) for c in applied.entity_history[ALPHA]] == [(T0 + HOUR, 7)]


def test_after_the_split_the_sub_shards_are_not_hot() -> None:
    shard_map = ShardMap.initial(BUCKET, 8).with_entity(ALPHA, 5, T0 + HOUR, now_ms=T0)
    subs = {f"{ALPHA}": 2000.0}
    after = WindowTally(T0 + HOUR, 60_000)
    for sub in range(5):
        after.add(f"0001#{BUCKET.label(T0 + HOUR)}#{ALPHA}#{sub:03d}", ALPHA, int(subs[ALPHA] * 60 / 5))
    decisions = judge(after.load(), shard_map)
    assert decisions.hot_keys == () and decisions.hot_entities == () and decisions.splits == ()


def test_an_entity_needing_more_than_the_limit_is_capped_and_reported() -> None:
    decisions = judge(window(entities={ALPHA: 450_000.0}), ShardMap.initial(BUCKET, 8))
    assert decisions.at_limit == (ALPHA,)
    assert decisions.splits[0].to_shards == MAX_ENTITY_SHARDS


@pytest.mark.parametrize("kind", ["random", "calculated"])
def test_suffix_layouts_raise_the_entitys_own_count_above_global_n(kind: LayoutKind) -> None:
    # Given an entity spread over the global N = 4 suffixes at 4,000 WCU/s (1,000 per key)
    shard_map = ShardMap.initial(BUCKET, 4)
    keyed = {ALPHA: f"{ALPHA}#0"}
    w = WindowTally(T0, 60_000)
    for n in range(4):
        w.add(f"{ALPHA}#{n}", ALPHA, 60_000)
    decisions = judge(w.load(), shard_map, kind=kind)
    assert keyed  # the keys are the entity's own: never "crowded"
    assert all(h.entity == ALPHA and not h.crowded for h in decisions.hot_keys)
    assert [(s.from_shards, s.to_shards) for s in decisions.splits] == [(4, 10)]
    assert decisions.global_change is None


# -- many entities on one key ------------------------------------------------------------------------


def test_a_crowded_base_key_recommends_a_larger_global_n() -> None:
    # Given 40 entities of 20 WCU/s each hashed onto one base key of N = 4 (800 WCU/s)
    shard_map = ShardMap.initial(BUCKET, 4)
    load = window(entities={f"sensor-{i:04d}": 20.0 for i in range(40)})
    decisions = judge(load, shard_map)
    # Then the key is hot because it is crowded, and no entity is to blame
    (hot,) = decisions.hot_keys
    assert hot.crowded and hot.entity is None
    assert decisions.splits == ()
    # And N = ceil(4 x 800 / 400) = 8 is recommended from the change boundary
    change = decisions.global_change
    assert change is not None and (change.from_shards, change.to_shards) == (4, 8)
    assert change.effective_from_ms == T0 + HOUR
    # And it is applied only when global changes are switched on
    now = T0 + 90_000
    unchanged = apply_decisions(shard_map, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=T0 + HOUR)
    assert unchanged is shard_map
    applied = apply_decisions(
        shard_map, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=T0 + HOUR, global_changes=True
    )
    assert applied.global_shards_at(T0 + HOUR - 1) == 4 and applied.global_shards_at(T0 + HOUR) == 8


def test_a_hot_entity_with_a_crowd_is_both_split_and_reported_crowded() -> None:
    crowd = {f"sensor-{i:04d}": 20.0 for i in range(40)}
    decisions = judge(window(entities={ALPHA: 2000.0, **crowd}), ShardMap.initial(BUCKET, 4))
    (hot,) = decisions.hot_keys
    assert hot.entity == ALPHA and hot.crowded
    assert decisions.splits and decisions.global_change is not None
    assert decisions.global_change.wcu_per_s == pytest.approx(800.0)


def test_global_n_already_scheduled_high_enough_is_not_recommended_again() -> None:
    shard_map = ShardMap.initial(BUCKET, 4).with_global(8, T0 + HOUR, now_ms=T0)
    decisions = judge(window(entities={f"sensor-{i:04d}": 20.0 for i in range(40)}), shard_map)
    assert decisions.hot_keys[0].crowded and decisions.global_change is None


# -- scaling down (hysteresis) --------------------------------------------------------------------------


def split_long_ago(shards: int = 5) -> ShardMap:
    return ShardMap.initial(BUCKET, 8).with_entity(ALPHA, shards, T0 - HOUR, now_ms=T0 - 2 * HOUR)


def quiet_span(rates: list[float], *, end: int = T0 + 10 * 60_000) -> list[WindowLoad]:
    """Consecutive windows ending at ``end``, the entity at ``rates`` on its own keys."""
    starts = [end - (len(rates) - i) * 60_000 for i in range(len(rates))]
    return [
        window(s, entities={ALPHA: r}, on_key={ALPHA: f"0001#x#{ALPHA}#000"})
        for s, r in zip(starts, rates, strict=True)
    ]


def test_scale_down_after_every_window_of_the_span_was_quiet() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=3)
    *history, load = quiet_span([1200.0, 1100.0, 1250.0])
    decisions = judge(load, split_long_ago(), history=history, config=config)
    # ceil(1,250 / (0.8 x 400)) = 4 sub-shards keep every key at or under 320 WCU/s
    (down,) = decisions.scale_downs
    assert (down.entity, down.from_shards, down.to_shards) == (ALPHA, 5, 4)
    assert down.effective_from_ms > load.end_ms


def test_one_busy_window_in_the_span_prevents_the_scale_down() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=3)
    *history, load = quiet_span([1200.0, 1700.0, 1200.0])
    assert judge(load, split_long_ago(), history=history, config=config).scale_downs == ()


def test_too_little_history_prevents_the_scale_down() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=3)
    *history, load = quiet_span([0.0, 0.0, 0.0])
    assert judge(load, split_long_ago(), history=history[1:], config=config).scale_downs == ()
    gap = [history[0]]  # the window just before the judged one is missing
    assert judge(load, split_long_ago(), history=gap, config=config).scale_downs == ()


def test_a_window_without_a_single_write_never_starts_a_scale_down() -> None:
    # Given a quiet span of history, then a judged window in which nothing was counted at all
    # (an idle table, or every stream shard's records still in flight)
    config = DetectorConfig(window_ms=60_000, scale_down_windows=3)
    *history, quiet = quiet_span([1200.0, 1100.0, 1250.0])
    empty = window(quiet.start_ms)
    assert not empty.keys
    # Then it proves nothing about quiet: no scale-down, where a quiet window with writes starts one
    assert judge(empty, split_long_ago(), history=history, config=config).scale_downs == ()
    assert judge(quiet, split_long_ago(), history=history, config=config).scale_downs != ()


def test_a_scheduled_scale_down_is_undone_when_the_load_comes_back() -> None:
    # Given 5 sub-shards in force, and a scale-down to 2 scheduled for 07:00
    shard_map = split_long_ago(5).with_entity(ALPHA, 2, T0 + HOUR, now_ms=T0)
    # When 1,500 WCU/s arrive before the boundary: fine on 5 keys, too much for 2
    decisions = judge(window(entities={ALPHA: 1500.0}, on_key={ALPHA: f"0001#x#{ALPHA}#000"}), shard_map)
    # Then the entity counts as hot and the scheduled change is raised to what the load needs
    (split,) = decisions.splits
    assert (split.from_shards, split.to_shards, split.effective_from_ms) == (2, 4, T0 + HOUR)
    applied = apply_decisions(shard_map, decisions, layout_kind="hybrid", now_ms=T0 + 90_000, change_from_ms=T0 + HOUR)
    assert applied.entity_shards_at(ALPHA, T0 + HOUR) == 4


def test_a_count_changed_inside_the_span_is_not_scaled_down() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=3)
    # Given the split took effect at 07:00, inside the span 06:59 .. 07:02
    *history, load = quiet_span([0.0, 0.0, 0.0], end=T0 + HOUR + 2 * 60_000)
    recent = ShardMap.initial(BUCKET, 8).with_entity(ALPHA, 5, T0 + HOUR, now_ms=T0)
    assert judge(load, recent, history=history, config=config).scale_downs == ()
    # And one window later the count has been in force for the whole span
    *history, load = quiet_span([0.0, 0.0, 0.0], end=T0 + HOUR + 3 * 60_000)
    assert [d.to_shards for d in judge(load, recent, history=history, config=config).scale_downs] == [1]


def test_a_silent_entity_goes_back_to_the_base_key_in_hybrid_and_to_global_n_in_the_others() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=2)
    *history, load = quiet_span([0.0, 0.0])
    hybrid = judge(load, split_long_ago(), history=history, config=config)
    assert [d.to_shards for d in hybrid.scale_downs] == [1]
    calculated = judge(load, split_long_ago(12), history=history, config=config, kind="calculated")
    assert [d.to_shards for d in calculated.scale_downs] == [8]


def test_a_load_between_the_two_levels_never_changes_the_count() -> None:
    # With 5 sub-shards: a split needs > 5 x 500 = 2,500; a scale-down needs <= 4 x 320 = 1,280.
    config = DetectorConfig(window_ms=60_000, scale_down_windows=2)
    shard_map = split_long_ago(5)
    for rate in range(1_290, 2_501, 30):
        *history, load = quiet_span([float(rate), float(rate)])
        decisions = judge(load, shard_map, history=history, config=config)
        assert not decisions.has_changes, rate


@settings(max_examples=200, deadline=None)
@given(
    shards=st.integers(min_value=1, max_value=40),
    rate=st.floats(min_value=0, max_value=20_000, allow_nan=False),
    threshold=st.integers(min_value=100, max_value=900),
    utilisation=st.floats(min_value=0.1, max_value=1.0),
    fraction=st.floats(min_value=0.1, max_value=0.95),
)
def test_a_change_never_calls_for_the_opposite_change_at_the_same_load(
    shards: int, rate: float, threshold: int, utilisation: float, fraction: float
) -> None:
    """Anti-flap: after any split or scale-down, the same steady load changes nothing more."""
    config = DetectorConfig(
        window_ms=60_000,
        split_threshold_wcu=threshold,
        target_utilisation=utilisation,
        scale_down_fraction=fraction,
        scale_down_windows=2,
        counters_per_window=1000,
    )
    shard_map = split_long_ago(shards)
    *history, load = quiet_span([rate, rate])
    decisions = judge(load, shard_map, history=history, config=config)
    after = apply_decisions(
        shard_map, decisions, layout_kind="hybrid", now_ms=load.end_ms + 30_000, change_from_ms=T0 + HOUR
    )
    settled = after.entity_history[ALPHA][-1].shards
    # The new count carries the load at or under the threshold per key...
    assert rate / settled <= threshold + 1e-6 or settled == MAX_ENTITY_SHARDS
    # ...and once in force for the span, the same load leaves it alone.
    later = [
        WindowLoad(w.start_ms + 2 * HOUR, w.width_ms, w.keys, w.entities, w.entity_keys, w.shared_keys)
        for w in (*history, load)
    ]
    again = judge(later[-1], after, history=later[:-1], config=config, now=later[-1].end_ms + 30_000)
    assert not again.has_changes


# -- applying ---------------------------------------------------------------------------------------------


def test_racing_splits_merge_to_the_larger_count_in_either_order() -> None:
    shard_map = ShardMap.initial(BUCKET, 8)
    now = T0 + 90_000
    five = judge(window(entities={ALPHA: 2000.0}), shard_map)
    seven = judge(window(entities={ALPHA: 2700.0}), shard_map)
    kw = {"layout_kind": "hybrid", "now_ms": now, "change_from_ms": T0 + HOUR}
    a = apply_decisions(apply_decisions(shard_map, five, **kw), seven, **kw)  # type: ignore[arg-type]
    b = apply_decisions(apply_decisions(shard_map, seven, **kw), five, **kw)  # type: ignore[arg-type]
    assert a.entity_history == b.entity_history
    assert entity_target(a, ALPHA, "hybrid") == 7


def test_a_scale_down_is_dropped_when_the_map_moved_since_it_was_decided() -> None:
    config = DetectorConfig(window_ms=60_000, scale_down_windows=2)
    *history, load = quiet_span([0.0, 0.0])
    decisions = judge(load, split_long_ago(5), history=history, config=config)
    assert decisions.scale_downs
    moved = split_long_ago(5).with_entity(ALPHA, 9, T0 + HOUR, now_ms=T0 + 11 * 60_000)
    now = T0 + 11 * 60_000
    assert apply_decisions(moved, decisions, layout_kind="hybrid", now_ms=now, change_from_ms=T0 + HOUR) is moved


def test_a_late_apply_moves_the_change_to_a_future_boundary_never_the_past() -> None:
    decisions = judge(window(entities={ALPHA: 2000.0}), ShardMap.initial(BUCKET, 8))
    assert decisions.splits[0].effective_from_ms == T0 + HOUR
    # Applied only after that boundary passed (a slow retry): the next one is used
    late = T0 + HOUR + 5_000
    change_from = earliest_change_boundary(BUCKET, late, 60_000, 360_000)
    applied = apply_decisions(
        ShardMap.initial(BUCKET, 8), decisions, layout_kind="hybrid", now_ms=late, change_from_ms=change_from
    )
    assert applied.entity_history[ALPHA][0].effective_from_ms == T0 + 2 * HOUR
    assert applied.entity_shards_at(ALPHA, late) is None


# -- metrics selection and counters ---------------------------------------------------------------------


def test_top_k_is_bounded_and_busiest_first() -> None:
    load = window(
        entities={f"sensor-{i:04d}": float(i) for i in range(1, 30)},
        on_key={f"sensor-{i:04d}": f"sensor-{i:04d}#0" for i in range(1, 30)},
    )
    decisions = judge(load, ShardMap.initial(BUCKET, 8), config=DetectorConfig(window_ms=60_000, top_k=3))
    assert [k for k, _ in decisions.top_keys] == ["sensor-0029#0", "sensor-0028#0", "sensor-0027#0"]
    assert [e for e, _ in decisions.top_entities] == ["sensor-0029", "sensor-0028", "sensor-0027"]


def test_select_keeps_the_busiest_and_every_split_entity() -> None:
    rates = {f"sensor-{i:04d}": float(i) for i in range(1, 11)}
    load = window(entities=rates, on_key={e: f"{e}#0" for e in rates})
    kept, dropped = load.select(3, always=["sensor-0001", "not-here"])
    assert sorted(kept.entities) == ["sensor-0001", "sensor-0008", "sensor-0009", "sensor-0010"]
    assert sorted(kept.keys) == ["sensor-0008#0", "sensor-0009#0", "sensor-0010#0"]
    assert kept.entity_keys["sensor-0001"] == frozenset({"sensor-0001#0"})
    assert dropped == (10 - 4) + (10 - 3)


# -- the in-memory tracker (simulator) -------------------------------------------------------------------


def test_tracker_closes_quiet_windows_and_keeps_contiguous_history() -> None:
    tracker = LoadTracker(DetectorConfig(window_ms=60_000, scale_down_windows=3))
    assert tracker.close_until(T0 + HOUR) == []  # nothing seen yet
    assert tracker.observe(obs("k", "e", 1, T0 + 5_000))
    assert tracker.close_until(T0 + 60_000, grace_ms=30_000) == []  # in its grace period
    closed = tracker.close_until(T0 + 4 * 60_000, grace_ms=30_000)
    assert [c.load.start_ms for c in closed] == [T0, T0 + 60_000, T0 + 120_000]
    assert closed[0].load.keys["k"].writes == 1 and not closed[1].load.keys
    assert [h.start_ms for h in closed[2].history] == [T0, T0 + 60_000]
    # A write for a closed window is late: counted as such, not in a window
    assert not tracker.observe(obs("k", "e", 1, T0 + 10_000))
    assert tracker.late == 1


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"window_ms": 500}, "window"),
        ({"window_ms": 1500}, "window"),
        ({"split_threshold_wcu": 0}, "split_threshold_wcu"),
        ({"split_threshold_wcu": 1001}, "split_threshold_wcu"),
        ({"target_utilisation": 0}, "target_utilisation"),
        ({"target_utilisation": 1.5}, "target_utilisation"),
        ({"scale_down_windows": 0}, "scale_down_windows"),
        ({"scale_down_fraction": 1.0}, "scale_down_fraction"),
        ({"top_k": 0}, "top_k"),
        ({"top_k": 11}, "top_k"),
        ({"split_threshold_wcu": 50, "counters_per_window": 19}, "counters_per_window"),
    ],
)
def test_a_bad_setting_is_named(kwargs: dict[str, float], field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        DetectorConfig(**kwargs)  # type: ignore[arg-type]
    assert raised.value.field == field
