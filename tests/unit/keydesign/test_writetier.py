"""The write tier's items and keys: group items hold many entities' readings and decode to exactly
them or fail; compacted blocks may span an hour; each reader refuses the other's payloads."""

from __future__ import annotations

import dataclasses
import json
import zlib
from collections.abc import Callable

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keydesign import BlockError, ConfigError, Reading, decode_block
from keydesign.blocks import (
    FORMAT_CLUSTER,
    MAX_BLOCK_SPAN_MS,
    Encoded,
    _seal,
    decode_group,
    encode_block,
    encode_cluster,
    encode_group,
    read_header,
)
from keydesign.hashing import stable_hash
from keydesign.periods import HOUR_MS
from keydesign.writetier import (
    FOREVER_MS,
    GRACE_MS,
    MAX_COMPACTED_SPAN_MS,
    MAX_GROUPS,
    REPACK_MS,
    SUBGROUPS,
    Clustered,
    CompactionState,
    EarlierGroups,
    WriteTier,
    cluster_of,
    clustered_tiers,
    compacted_pk,
    dense_mark_sk,
    earlier_tiers,
    group_sk_stem,
    hour_open,
    in_write_tier,
    repack_start,
    slice_start,
    state_key,
    sub_group_of,
    sub_sk_stem,
    tier_settle,
    tier_stamp,
)

from .strategies import ENTITIES
from .test_blocks import T0, mutate, mutations, raw_readings, same


def group_order(readings: list[Reading]) -> list[Reading]:
    unique = {(r.ts_ms, r.entity_id, r.event_id): r for r in readings}
    return [unique[k] for k in sorted(unique)]


Encoder = Callable[[list[Reading], int], Encoded]
#: Both payloads of many entities' readings: a write-tier group item (format 4) and a cluster block (format 5).
ENCODERS = pytest.mark.parametrize("encode", [encode_group, encode_cluster], ids=["group item", "cluster block"])


@st.composite
def many_entities(draw: st.DrawFn, span_ms: int = MAX_BLOCK_SPAN_MS) -> list[Reading]:
    raws = draw(st.lists(raw_readings("x", st.integers(T0, T0 + span_ms - 1)), min_size=1, max_size=30))
    entities = draw(st.lists(st.sampled_from(ENTITIES), min_size=len(raws), max_size=len(raws)))
    return group_order([Reading.parse({**raw, "entity_id": e}) for raw, e in zip(raws, entities, strict=True)])


@ENCODERS
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(readings=many_entities(), version=st.integers(0, 10**56))
def test_a_group_item_decodes_to_exactly_the_readings_of_every_entity_encoded(
    readings: list[Reading], version: int, encode: Encoder
) -> None:
    encoded = encode(readings, version)
    header, decoded = decode_group(encoded.payload)
    assert len(decoded) == len(readings) == header.count and header.version == version
    assert all(same(a, b) for a, b in zip(readings, decoded, strict=True))
    # the same readings and version make the same item (a redelivery overwrites its own)
    assert encode(readings, version).block_id == encoded.block_id
    assert encode(readings, version + 1).block_id != encoded.block_id


@ENCODERS
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(readings=many_entities(), edits=mutations, garbage=st.one_of(st.none(), st.binary(max_size=64)))
def test_any_damage_to_a_group_item_decodes_to_what_was_encoded_or_raises_block_error(
    readings: list[Reading], edits: list[tuple[str, int, int]], garbage: bytes | None, encode: Encoder
) -> None:
    payload = encode(readings, 7).payload
    damaged = garbage if garbage is not None else mutate(payload, edits)
    try:
        _, decoded = decode_group(damaged)
    except BlockError:
        return
    assert len(decoded) == len(readings) and all(same(a, b) for a, b in zip(readings, decoded, strict=True))


@ENCODERS
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(readings=many_entities(), edits=mutations, entity=st.sampled_from([*ENTITIES, "not-in-any-item"]))
def test_an_entitys_readings_of_a_group_item_are_its_readings_of_the_whole_item(
    readings: list[Reading], edits: list[tuple[str, int, int]], entity: str, encode: Encoder
) -> None:
    """A reader of one entity decodes only its rows: the same readings, in the same order, as the
    whole item has of it (none when the item does not list it), and damage still never decodes
    into readings that were not written."""
    payload = encode(readings, 7).payload
    mine = [r for r in readings if r.entity_id == entity]
    header, decoded = decode_group(payload, entity)
    assert header.count == len(readings)
    assert len(decoded) == len(mine) and all(same(a, b) for a, b in zip(mine, decoded, strict=True))
    try:
        _, decoded = decode_group(mutate(payload, edits), entity)
    except BlockError:
        return
    assert len(decoded) == len(mine) and all(same(a, b) for a, b in zip(mine, decoded, strict=True))


@ENCODERS
def test_a_reader_of_one_entity_takes_its_own_cells_of_every_kind_of_column(encode: Encoder) -> None:
    # "v" a column every reading has, "w" a sparse one, "site" a dimension: each entity's cells, no other's
    readings = group_order(
        [
            Reading.parse(
                {
                    "entity_id": entity,
                    "timestamp": T0 + 10 * n,
                    "measures": {"v": n, **({"w": -n} if n % 2 else {})},
                    "dimensions": {"site": f"s{n}"},
                }
            )
            for n, entity in enumerate(["a", "b", "c"] * 3)
        ]
    )
    payload = encode(readings, 1).payload
    for entity in "abc":
        mine = [r for r in readings if r.entity_id == entity]
        decoded = decode_group(payload, entity)[1]
        assert len(decoded) == 3 and all(same(a, b) for a, b in zip(mine, decoded, strict=True))


A, B = '[[0],{"v":[1]}]', '[[5],{"v":[2]}]'  # two entities' sections: a reading at 0 ms, one at 5


@pytest.mark.parametrize(
    ("names", "lengths", "sections", "count", "problem"),
    [
        (["a", "b"], [9, 9], [A, B], 2, "the sections do not fill the body"),
        (["a", "b"], [len(A)], [A], 1, "the sections' lengths are not a whole number an entity"),
        (["a", "a"], None, [A, B], 2, "the entities are not a list of distinct"),
        (["a", "b"], None, [A, '{"v":2}'], 2, "the section of 'b' is not the columns of a block"),
        (["a", "b"], None, [A, '[[9],{"v":[2]}]'], 2, "not non-negative within the header's span"),
        (["a", "b"], None, [A, '[[4],{"v":[2]}]'], 2, "the sections do not hold the readings"),
        (["a", "b"], None, [A, B], 3, "the sections do not hold the readings"),
        (["a", "b"], None, [A, '[[5],{"v":[2}]'], 2, "the section of 'b' is not UTF-8 JSON"),
        (["a", "b c"], None, [A, B], 2, "the entity 'b c' is not an entity id"),
    ],
)
def test_a_cluster_block_whose_sections_do_not_add_up_is_refused_naming_what_is_wrong(
    names: list[str], lengths: list[int] | None, sections: list[str], count: int, problem: str
) -> None:
    # (sealed with a good checksum: what the checksum cannot catch, a writer's bug, is checked too)
    head = json.dumps([names, lengths or [len(s) for s in sections]], separators=(",", ":"))
    payload = _seal(FORMAT_CLUSTER, (head + "".join(sections)).encode(), (count, T0, 5), 1)
    with pytest.raises(BlockError, match=problem.replace("(", r"\(")):
        decode_group(payload)
    with pytest.raises(BlockError, match="the body does not start with its entities"):
        decode_group(_seal(FORMAT_CLUSTER, b'{"a":1}', (1, T0, 0), 1))


def test_a_cluster_block_holds_a_section_an_entity_and_a_reader_of_one_parses_its_own() -> None:
    readings = group_order(
        [Reading.parse({"entity_id": e, "timestamp": T0 + 7 * n, "measures": {"v": n}}) for n, e in enumerate("abab")]
    )
    payload = encode_cluster(readings, 3).payload
    header = read_header(payload, group=True)
    assert header.format_version == FORMAT_CLUSTER and header.count == 4 and header.span_ms == 21
    stored = payload[header.body_at :]
    text = (zlib.decompress(stored, -15) if header.deflated else stored).decode()
    head, at = json.JSONDecoder().raw_decode(text)
    assert head[0] == ["a", "b"] and at + sum(head[1]) == len(text)
    # b's section: its deltas from the block's first reading, then its own
    assert json.loads(text[at + head[1][0] :]) == [[7, 14], {"v": [1, 3]}]
    # a damaged section of another entity is not parsed by a reader of one
    end_of_a = at + head[1][0]
    broken = _seal(FORMAT_CLUSTER, (text[: end_of_a - 1] + "!" + text[end_of_a:]).encode(), (4, T0, 21), 3)
    assert [r.measures["v"] for r in decode_group(broken, "b")[1]] == [1, 3]
    with pytest.raises(BlockError, match="the section of 'a'"):
        decode_group(broken)


def test_a_block_reader_refuses_a_group_item_and_a_group_reader_a_block() -> None:
    one = Reading.parse({"entity_id": "a", "timestamp": T0, "measures": {"v": 1}})
    with pytest.raises(BlockError, match="format is 4, not a block"):
        decode_block("a", encode_group([one], 1).payload)
    with pytest.raises(BlockError, match="format is 5, not a block"):
        decode_block("a", encode_cluster([one], 1).payload)
    with pytest.raises(BlockError, match=r"format is 3, not a group item or cluster block \(format 4 or 5\)"):
        decode_group(encode_block([one], 1).payload)


def test_group_readings_must_come_in_time_entity_event_order() -> None:
    a = Reading.parse({"entity_id": "b", "timestamp": T0, "measures": {"v": 1}})
    b = Reading.parse({"entity_id": "a", "timestamp": T0, "measures": {"v": 1}})
    with pytest.raises(ValueError, match="time, entity, event id"):
        encode_group([a, b], 1)
    assert [r.entity_id for r in decode_group(encode_group([b, a], 1).payload)[1]] == ["a", "b"]


def test_a_compacted_block_may_span_an_hour_and_only_its_reader_takes_it() -> None:
    early = Reading.parse({"entity_id": "a", "timestamp": T0, "measures": {"v": 1}})
    late = Reading.parse({"entity_id": "a", "timestamp": T0 + HOUR_MS - 1, "measures": {"v": 2}})
    with pytest.raises(ValueError, match="within 10000 ms"):
        encode_block([early, late], 1)
    payload = encode_block([early, late], 1, span_limit_ms=MAX_COMPACTED_SPAN_MS).payload
    assert [r.ts_ms for r in decode_block("a", payload, span_limit_ms=MAX_COMPACTED_SPAN_MS)[1]] == [
        early.ts_ms,
        late.ts_ms,
    ]
    with pytest.raises(BlockError, match="span is 3599999 ms"):
        read_header(payload)  # a compacted block in a block partition is not a block
    with pytest.raises(ValueError, match="within 3600000 ms"):
        encode_block([early, dataclasses.replace(late, ts_ms=T0 + HOUR_MS)], 1, span_limit_ms=HOUR_MS)


def test_keys_of_the_write_tier() -> None:
    tier = WriteTier(groups=1024)
    group = tier.group_of("device-0000001")
    assert 0 <= group < 1024 and tier.partition_key("device-0000001") == f"g{group:04d}"
    assert tier.group_pk(5, T0 + 1234) == "w#0005#2026-11-22T06:00"
    assert slice_start(T0 + HOUR_MS - 1) == T0
    mark = dense_mark_sk("d-1")
    assert mark == "!dense#d-1" and mark < "0000-01-01T00:00:00.000Z"  # below every item's sort key
    one = Reading.parse({"entity_id": "a", "timestamp": T0 + 5, "measures": {"v": 1}})
    encoded = encode_group([one], 1)
    assert group_sk_stem(encoded) == f"2026-11-22T06:00:00.005Z#{encoded.block_id}"
    assert compacted_pk("d-1", "0042#2026-11-22T06:00") == "0042#2026-11-22T06:00#c"
    assert compacted_pk("d-1", None) == "d-1#c"
    with pytest.raises(ValueError, match="not one of the 1024"):
        tier.group_pk(1024, T0)
    with pytest.raises(ConfigError, match="write_tier_groups"):
        WriteTier(groups=0)


def test_only_a_reading_whose_slice_had_not_ended_a_grace_before_its_batch_started_goes_to_the_write_tier() -> None:
    assert REPACK_MS == 5 * 60_000 and HOUR_MS % REPACK_MS == 0 and GRACE_MS == 60_000
    assert repack_start(T0 + REPACK_MS - 1) == T0 and repack_start(T0 + REPACK_MS) == T0 + REPACK_MS
    assert in_write_tier(T0, T0 + REPACK_MS - 1)
    assert in_write_tier(T0, T0 + REPACK_MS + 30_000)  # its slice ended 30 s before: within the grace
    assert in_write_tier(T0, T0 + REPACK_MS + GRACE_MS - 1)
    assert not in_write_tier(T0, T0 + REPACK_MS + GRACE_MS)  # late: its slice's grace had ended
    assert not in_write_tier(T0, T0 + REPACK_MS + 61_000)  # (its hour had not)
    assert in_write_tier(T0 + HOUR_MS - 1, T0 + HOUR_MS + 30_000)  # the hour before the batch's, in its grace
    assert in_write_tier(T0 + HOUR_MS + 5, T0)  # ahead of the batch (within max_future)
    # a block of it needs its entity's dense mark while its hour is in the write tier, late past its slice or not
    assert hour_open(T0, T0 + REPACK_MS + GRACE_MS) and hour_open(T0, T0 + HOUR_MS + GRACE_MS - 1)
    assert not hour_open(T0, T0 + HOUR_MS + GRACE_MS)
    # an hour or a slice settles its grace after its batches' settle; a batch may write the hour a grace back
    assert tier_settle(180_000) == 180_000 + GRACE_MS
    assert slice_start(tier_stamp(T0 + HOUR_MS + 30_000)) == T0
    assert slice_start(tier_stamp(T0 + HOUR_MS + GRACE_MS)) == T0 + HOUR_MS


def test_keys_of_the_sub_items() -> None:
    tier = WriteTier(groups=1024)
    assert tier.sub_pk(5, T0 + 1234) == "s#0005#2026-11-22T06:00"
    with pytest.raises(ValueError, match="not one of the 1024"):
        tier.sub_pk(1024, T0)
    one = Reading.parse({"entity_id": "a", "timestamp": T0 + 5, "measures": {"v": 1}})
    encoded = encode_group([one], 1)
    assert sub_sk_stem(3, encoded) == f"03#2026-11-22T06:00:00.005Z#{encoded.block_id}"
    # the sub-group: the hash's high half mod 16, whatever G; every sub-group of a group is used
    names = [f"device-{n:07d}" for n in range(4_000)]
    assert all(sub_group_of(name) == (stable_hash(name) >> 32) % SUBGROUPS for name in names)
    for groups in (7, 16):
        members = [name for name in names if WriteTier(groups).group_of(name) == 1]
        assert {sub_group_of(name) for name in members} == set(range(SUBGROUPS))


def test_a_sub_item_may_span_its_slice_and_only_a_reader_told_so_takes_it() -> None:
    early = Reading.parse({"entity_id": "a", "timestamp": T0, "measures": {"v": 1}})
    late = Reading.parse({"entity_id": "b", "timestamp": T0 + REPACK_MS - 1, "measures": {"v": 2}})
    with pytest.raises(ValueError, match="within 10000 ms"):
        encode_group([early, late], 1)
    payload = encode_group([early, late], 1, span_limit_ms=REPACK_MS).payload
    assert decode_group(payload, span_limit_ms=REPACK_MS)[1] == [early, late]
    assert decode_group(payload, "b", span_limit_ms=REPACK_MS)[1] == [late]
    with pytest.raises(BlockError, match="span is 299999 ms"):
        decode_group(payload)  # a sub-item in a group partition is not a group item


def test_the_watermark_is_the_end_of_an_hour_or_nothing_yet() -> None:
    assert CompactionState.from_item(None).through == 0
    assert (
        CompactionState.from_item({"through": T0}).through
        == T0
        == CompactionState.from_item({"through": str(T0)}).through
    )
    for bad in (True, T0 + 1, "soon", None, -HOUR_MS):
        with pytest.raises(ValueError, match="through"):
            CompactionState.from_item({"through": bad})
    assert state_key("readings") == {"pk": "compactstate", "sk": "readings"}


# -- the compaction state: the watermark, the G it runs with, the earlier G's ----------------------

STATES = st.builds(
    CompactionState,
    st.integers(0, 10_000).map(lambda hours: T0 + hours * HOUR_MS),
    st.one_of(st.none(), st.integers(1, MAX_GROUPS)),
    st.lists(
        st.builds(EarlierGroups, st.integers(1, MAX_GROUPS), st.integers(0, 10_000).map(lambda h: T0 + h * HOUR_MS)),
        max_size=4,
    ).map(tuple),
    st.integers(0, MAX_GROUPS),
    st.integers(0, MAX_GROUPS),
    st.integers(0, 10**9),
).flatmap(
    lambda state: st.one_of(
        st.just(state),
        st.tuples(st.integers(0, 10**6), st.integers(0, 100), st.integers(0, MAX_GROUPS)).map(
            lambda slices: dataclasses.replace(
                state,
                repack_from=T0 + slices[0] * REPACK_MS,
                repacked=T0 + (slices[0] + slices[1]) * REPACK_MS,
                repack_group=slices[2],
            )
        ),
        st.lists(st.lists(st.integers(1, MAX_GROUPS), min_size=1, max_size=3), min_size=1, max_size=4).map(
            lambda counts: dataclasses.replace(
                state,
                clustered=tuple(Clustered(tuple(c), T0 + n * HOUR_MS) for n, c in enumerate(counts)),
            )
        ),
    )
)


@given(STATES)
def test_a_state_reads_back_as_it_was_stored(state: CompactionState) -> None:
    stored = {name: str(value) if isinstance(value, int) else value for name, value in state.item().items()}
    assert CompactionState.from_item(state.item()) == state == CompactionState.from_item(stored)


def test_an_item_of_before_the_group_count_was_recorded_reads_as_no_change_known() -> None:
    assert CompactionState.from_item(None) == CompactionState()
    assert CompactionState.from_item({"through": T0, "group": 4}) == CompactionState(T0, None, (), 4, 0)


@pytest.mark.parametrize(
    ("field", "bad"),
    [
        ("through", T0 + 1),
        ("through", None),
        ("groups", 0),
        ("groups", MAX_GROUPS + 1),
        ("groups", "eight"),
        ("group", -1),
        ("group_tier", True),
        ("previous", "8"),
        ("previous", f"8@{T0 + 1}"),
        ("previous", f"0@{T0}"),
        ("previous", f"x@{T0}"),
        ("previous", 8),
        ("repack", T0 + 1),
        ("repack", T0 + REPACK_MS),  # after "repacked"
        ("repack_group", MAX_GROUPS + 1),
        ("repack_group", "x"),
        ("clustered", "8"),
        ("clustered", f"8@{T0 + 1}"),
        ("clustered", f"0@{T0}"),
        ("clustered", f"8+x@{T0}"),
        ("clustered", f"8@{T0 + HOUR_MS},4@{T0}"),  # not in order of their hours
        ("clustered", 8),
    ],
)
def test_a_malformed_state_is_refused_naming_the_field(field: str, bad: object) -> None:
    item: dict[str, object] = {"through": T0, "groups": 8, "previous": f"4@{T0 + HOUR_MS}", "repacked": T0}
    if field == "repack":  # the re-packed slices' bounds: whole slices, in order
        item["repack_from"] = bad
    else:
        item[field] = bad
    with pytest.raises(ValueError, match=field):
        CompactionState.from_item(item)


def test_the_re_pack_takes_each_settled_slice_of_the_newest_hour_and_skips_hours_that_settled() -> None:
    settle = 3 * 60_000
    # Given compaction through T0 (the hour before it compacted) and nothing re-packed yet
    state = CompactionState(T0, 8)
    # nothing has settled 7 minutes into the hour; the first slice has at 8 minutes
    assert state.repack_next(T0 + 7 * 60_000, settle) is None
    assert state.repack_next(T0 + 8 * 60_000, settle) == T0
    state = state.repack_starting(T0).repack_advanced()
    assert (state.repack_from, state.repacked) == (T0, T0 + REPACK_MS)
    assert state.repacked_in(T0) == (T0, T0 + REPACK_MS) and state.repacked_in(T0 + HOUR_MS) is None
    # a run 20 minutes later re-packs the slices in turn, each extending the range
    now = T0 + 28 * 60_000
    while (start := state.repack_next(now, settle)) is not None:
        state = state.repack_starting(start).repack_advanced()
    assert state.repacked_in(T0) == (T0, T0 + 5 * REPACK_MS)
    # the hour's last slice settles with the hour, and is due until the next one settles
    assert state.repack_next(T0 + HOUR_MS + settle - 1, settle) == T0 + 5 * REPACK_MS  # (behind: catching up)
    assert state.repack_next(T0 + HOUR_MS + settle, settle) is None  # behind once it settled: compacted instead
    caught_up = dataclasses.replace(state, repacked=T0 + HOUR_MS - REPACK_MS)
    assert caught_up.repack_next(T0 + HOUR_MS + settle - 1, settle) is None
    assert caught_up.repack_next(T0 + HOUR_MS + settle, settle) == T0 + HOUR_MS - REPACK_MS
    whole = caught_up.repack_starting(T0 + HOUR_MS - REPACK_MS).repack_advanced()
    assert whole.repacked_in(T0) == (T0, T0 + HOUR_MS)  # read from sub-items until it is compacted
    # the next hour's first slice extends the range once it settles
    assert whole.repack_next(T0 + HOUR_MS + REPACK_MS + settle, settle) == T0 + HOUR_MS
    on = whole.repack_starting(T0 + HOUR_MS).repack_advanced()
    assert on.repacked_in(T0) == (T0, T0 + HOUR_MS) and on.repacked_in(T0 + HOUR_MS) == (
        T0 + HOUR_MS,
        T0 + HOUR_MS + REPACK_MS,
    )
    # a run that missed the last slice's turn skips it: a new range, the hour read from group items
    start = caught_up.repack_next(T0 + HOUR_MS + REPACK_MS + settle, settle)
    assert start == T0 + HOUR_MS
    skipped = caught_up.repack_starting(start).repack_advanced()
    assert skipped.repacked_in(T0 + HOUR_MS) == (T0 + HOUR_MS, T0 + HOUR_MS + REPACK_MS)
    assert skipped.repacked_in(T0) is None
    # After five hours down, the re-pack skips to the newest hour's settled slices; the others are compacted
    down = state.repack_next(T0 + 5 * HOUR_MS + 20 * 60_000, settle)
    assert down == T0 + 5 * HOUR_MS
    assert state.repack_starting(down).repack_advanced().repacked_in(T0) is None
    # and never an hour compaction has done
    done = CompactionState(T0 + HOUR_MS, 8, repack_from=T0, repacked=T0 + 6 * REPACK_MS)
    assert done.repack_next(T0 + HOUR_MS + settle, settle) is None


def test_a_change_of_groups_keeps_the_earlier_one_until_the_watermark_passes_the_hours_it_may_have_written() -> None:
    # Given compaction that ran with 4 groups, in the middle of the hour at T0 (group 2 of 4 done)
    state = CompactionState(T0, 4, (), 2, 4)
    assert state.changed_to(4, T0 + 5 * HOUR_MS, 0) == state  # no change, nothing else moves
    # When it runs with 8 at T0 + 2h 55m, with a settle time and max_future of 8 minutes in all
    now = T0 + 2 * HOUR_MS + 55 * 60_000
    changed = state.changed_to(8, now, 8 * 60_000)
    # Then 4 may hold every hour up to the end of the one holding now + 8 minutes (T0 + 4h), and the
    # hour at the watermark starts again (its groups are now 8's and 4's)
    assert changed == CompactionState(T0, 8, (EarlierGroups(4, T0 + 4 * HOUR_MS),), 0, 0)
    assert changed.earlier_for(WriteTier(8)) == (EarlierGroups(4, T0 + 4 * HOUR_MS),)
    # a reader still on 4 reads 8's partitions of every uncompacted hour (8 is what compaction records)
    assert changed.earlier_for(WriteTier(4)) == (EarlierGroups(8, FOREVER_MS),)
    assert changed.earlier_for(None) == ()
    # the re-packed range empties (the version before may have re-packed without the new G's partitions)
    repacking = dataclasses.replace(state, repack_from=T0, repacked=T0 + 2 * REPACK_MS)
    assert repacking.changed_to(4, now, 0).repacked_in(T0) == (T0, T0 + 2 * REPACK_MS)
    emptied = repacking.changed_to(8, now, 8 * 60_000)
    assert emptied.repacked_in(T0) is None and emptied.repacked == T0 + 2 * REPACK_MS
    # a second change before the first is compacted: both kept, newest first
    twice = changed.changed_to(16, T0 + 3 * HOUR_MS, 0)
    assert twice.previous == (EarlierGroups(8, T0 + 4 * HOUR_MS), EarlierGroups(4, T0 + 4 * HOUR_MS))
    # and back to 4: 4 is the deployed G again, 16 and 8 are earlier ones
    assert {e.groups for e in twice.changed_to(4, T0 + 3 * HOUR_MS, 0).earlier_for(WriteTier(4))} == {16, 8}
    # The watermark moving on drops an entry once it passes the entry's last hour
    assert changed.advanced(7) == CompactionState(T0 + HOUR_MS, 8, changed.previous, advanced_at=7)
    assert changed.advanced(1).advanced(2).advanced(3).advanced(4) == CompactionState(
        T0 + 4 * HOUR_MS, 8, advanced_at=4
    )
    assert CompactionState.from_item(changed.advanced(9).item()).advanced_at == 9
    assert earlier_tiers(changed.previous, T0 + 3 * HOUR_MS) == [WriteTier(4)]
    assert earlier_tiers(changed.previous, T0 + 4 * HOUR_MS) == []


def test_the_state_records_the_gs_each_compacted_hour_was_compacted_under_and_forgets_them_past_retention() -> None:
    # Given a deployment upgraded to cluster blocks: hours before T0 compacted into per-entity blocks
    state = CompactionState(T0, 8)
    assert clustered_tiers(state.clustered, T0 - HOUR_MS) is None
    # When compaction compacts three hours under 8 groups, one under 8 and 4 (a change of G), then 4 again
    for groups in ((8,), (8,), (8,), (8, 4), (4,)):
        state = state.advanced(T0, groups)
    # Then an entry is kept for each change, from the first hour compacted under it
    assert state.clustered == (
        Clustered((8,), T0),
        Clustered((8, 4), T0 + 3 * HOUR_MS),
        Clustered((4,), T0 + 4 * HOUR_MS),
    )
    assert CompactionState.from_item(state.item()) == state
    assert clustered_tiers(state.clustered, T0 - HOUR_MS) is None  # before cluster blocks
    assert clustered_tiers(state.clustered, T0 + 2 * HOUR_MS) == [WriteTier(8)]
    assert clustered_tiers(state.clustered, T0 + 3 * HOUR_MS) == [WriteTier(8), WriteTier(4)]
    assert clustered_tiers(state.clustered, T0 + 9 * HOUR_MS) == [WriteTier(4)]
    # And once an entry's successor starts more than retention ago, the entry is dropped (its hours expired)
    later = state.advanced(T0 + 3 * HOUR_MS + 10 * HOUR_MS, (4,), retention_ms=10 * HOUR_MS)
    assert later.clustered == (Clustered((8, 4), T0 + 3 * HOUR_MS), Clustered((4,), T0 + 4 * HOUR_MS))
    # the newest is kept whatever its age: it covers every hour since
    assert state.advanced(T0 + 1000 * HOUR_MS, (4,), retention_ms=HOUR_MS).clustered == (
        Clustered((4,), T0 + 4 * HOUR_MS),
    )


def test_keys_of_the_cluster_blocks() -> None:
    tier = WriteTier(8)
    assert tier.cluster_pk(3, T0) == "c#0003#2026-11-22T06:00"
    with pytest.raises(ValueError, match="not one of the 8 groups"):
        tier.cluster_pk(8, T0)
    # a cluster is the high half of the stable hash mod 256; its sub-group the same mod 16
    assert all(cluster_of(e) == (stable_hash(e) >> 32) % 256 for e in ENTITIES)
    assert all(cluster_of(e) % 16 == sub_group_of(e) for e in ENTITIES)
