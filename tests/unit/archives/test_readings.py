"""``archives.readings`` on exports built by hand (blocks made by ``Layout.pack``, files laid out as DynamoDB
does), and ``tsctl archive``, the command over it."""

from __future__ import annotations

import base64
import gzip
import json
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from archives import (
    ArchiveError,
    CorruptItem,
    LocalStore,
    MissingManifest,
    NotAnExport,
    ReadStats,
    S3Store,
    Selection,
    read_readings,
)
from archives.readings import WINDOW_MS
from doubles.tier_items import TierWriter
from keydesign import Layout, Reading, ShardMap
from keydesign.blocks import encode_block, keyed_item
from keydesign.model import derive_event_id
from keydesign.varints import write_varint
from keydesign.writetier import MAX_COMPACTED_SPAN_MS, STATE_PK, WriteTier
from tests.legacy_items import legacy_item
from tests.unit.tsctl.exports import HYBRID, T0, block_items, data_file, dynamodb_json, folder, reading, write_export
from tests.unit.tsctl.running import run_archive

RANDOM = Layout.from_settings(kind="random", bucket="1h", table_prefix="timeseries-readings")


def read(root: Path, selection: Selection = Selection(), **options: Any) -> list[Reading]:  # noqa: B008
    return list(read_readings(LocalStore(root), selection, **options))


def two_batches() -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[Reading]]:
    """A batch (version 100) and a regrouped redelivery (version 200) that corrects a5..a9 and adds a10..a14:
    the items of each, and the readings a reader must return."""
    first = [reading("sensor-a", T0 + i * 1_000, float(i), f"a{i}") for i in range(10)]
    first += [reading("sensor-b", T0 + i * 500, 50.0 + i) for i in range(5)]
    second = [reading("sensor-a", T0 + i * 1_000, 100.0 + i, f"a{i}") for i in range(5, 15)]
    expected = sorted([*first[:5], *second, *first[10:]], key=lambda r: (r.entity_id, r.ts_ms, r.event_id))
    return block_items([(r, 100) for r in first]), block_items([(r, 200) for r in second]), expected


# -- reading back -------------------------------------------------------------------------------------


def test_each_reading_comes_out_once_the_copy_of_the_highest_version(tmp_path: Path) -> None:
    # Given a batch and its regrouped redelivery, in two data files (the newer one first)
    first, second, expected = two_batches()
    write_export(tmp_path, [second, first])
    stats = ReadStats()

    # When the export is read
    got = list(read_readings(LocalStore(tmp_path), stats=stats))

    # Then every reading comes out once, a5..a9 as corrected, in (entity, time, event id) order
    assert got == expected
    assert [r.measures["temp"] for r in got if r.event_id in {"a4", "a5", "a9"}] == [4.0, 105.0, 109.0]
    assert (stats.readings, stats.duplicates, stats.data_files, stats.exports) == (20, 5, 2, 1)


def test_copies_in_other_partitions_and_files_are_merged_under_the_random_layout(tmp_path: Path) -> None:
    # Given an entity whose blocks go to one of 8 partitions at random, its copies in three files
    entries = [reading("pump-7", T0 + i * 1_500, float(i), f"p{i}") for i in range(40)]
    again = [reading("pump-7", T0 + i * 1_500, -float(i), f"p{i}") for i in range(20, 40)]
    items = block_items([(r, 5) for r in entries], layout=RANDOM) + block_items([(r, 9) for r in again], layout=RANDOM)
    assert len({i["pk"]["S"] for i in items}) > 1
    write_export(tmp_path, [items[::3], items[1::3], items[2::3]])

    # Then the entity comes from the partition key, and the newer copies win
    got = read(tmp_path)
    assert [r.event_id for r in got] == [f"p{i}" for i in range(40)]
    assert [r.measures["temp"] for r in got] == [float(i) for i in range(20)] + [-float(i) for i in range(20, 40)]


@pytest.mark.parametrize("layout", [HYBRID, RANDOM], ids=["hybrid", "random"])
def test_items_from_before_blocks_come_out_beside_blocks_a_blocks_copy_winning(tmp_path: Path, layout: Layout) -> None:
    # Given the export of a table deployed before blocks: items of one reading each (one with a dimension
    # and a whole-number measure), blocks written since, and four old readings delivered again as a
    # block (two with other values), spread over two files
    shard_map = ShardMap.initial(layout.bucket, 8)
    old = [reading("sensor-a", T0 + i * 700, float(i), f"o{i}") for i in range(12)]
    old.append(
        Reading.parse({"entity_id": "sensor-z", "timestamp": T0 + 5, "measures": {"n": 3}, "dimensions": {"s": "p7"}})
    )
    new = [reading("sensor-a", T0 + 9_000 + i * 1_000, 50.0 + i, f"b{i}") for i in range(6)]
    again = [
        old[3],
        reading("sensor-a", old[4].ts_ms, -4.0, "o4"),
        old[5],
        reading("sensor-a", old[6].ts_ms, -6.0, "o6"),
    ]
    items = [legacy_item(r, layout, shard_map, ttl=1) for r in old]
    items += block_items([(r, 100) for r in new], layout=layout) + block_items([(r, 200) for r in again], layout=layout)
    write_export(tmp_path, [items[1::2], items[::2]])
    stats = ReadStats()

    got = list(read_readings(LocalStore(tmp_path), stats=stats))

    # Then each reading comes out once, in order, the old items as they were stored, o4 and o6 as the blocks have them
    newest = {(r.entity_id, r.ts_ms, r.event_id): r for r in [*old, *new, *again]}
    assert got == sorted(newest.values(), key=lambda r: (r.entity_id, r.ts_ms, r.event_id))
    assert [r.measures["temp"] for r in got if r.event_id in {"o3", "o4", "o6"}] == [3.0, -4.0, -6.0]
    assert got[-1].measures == {"n": 3} and got[-1].dimensions == {"s": "p7"}
    assert (stats.readings, stats.duplicates) == (19, 4)


def test_a_reading_sent_without_an_event_id_comes_back_as_the_producer_sent_it(tmp_path: Path) -> None:
    sent = {"entity_id": "sensor-c", "timestamp": "2026-11-22T06:00:01.250Z", "measures": {"rh": 41, "temp": 21.5}}
    write_export(tmp_path, [block_items([(Reading.parse(sent), 1)])])

    (got,) = read(tmp_path)

    assert got.to_json() == {**sent, "event_id": derive_event_id("sensor-c", T0 + 1_250, sent["measures"], {})}
    assert Reading.parse(got.to_json()) == Reading.parse(sent)


def test_dimensions_and_explicit_event_ids_survive(tmp_path: Path) -> None:
    sent = reading("sensor-d", T0, 1.5, "evt-1", site="plant-7")
    write_export(tmp_path, [block_items([(sent, 1)])])
    assert read(tmp_path) == [sent]


def test_entity_and_time_filters(tmp_path: Path) -> None:
    first, second, expected = two_batches()
    write_export(tmp_path, [first, second])

    only_a = read(tmp_path, Selection(frozenset({"sensor-a"}), T0 + 3_000, T0 + 7_000))

    assert [r.event_id for r in only_a] == ["a3", "a4", "a5", "a6"]
    assert read(tmp_path, Selection(frozenset({"nobody"}))) == []
    assert read(tmp_path, Selection(None, T0 + 14_000, None)) == [r for r in expected if r.ts_ms >= T0 + 14_000]


def test_a_reading_whose_copies_start_in_two_windows_comes_out_once(tmp_path: Path) -> None:
    # Given a reading just past a window boundary, in a block that starts in the window before (the newer
    # copy) and in one that starts at the reading itself
    at = T0 + WINDOW_MS + 100
    early = [reading("sensor-e", T0 + WINDOW_MS - 900, 1.0, "x"), reading("sensor-e", at, 2.0, "y")]
    late = [reading("sensor-e", at, 3.0, "y")]
    write_export(tmp_path, [block_items([(r, 2) for r in early]), block_items([(r, 1) for r in late])])

    assert [(r.event_id, r.measures["temp"]) for r in read(tmp_path)] == [("x", 1.0), ("y", 2.0)]


def test_memory_holds_at_most_the_bound_and_the_answer_is_the_same(tmp_path: Path) -> None:
    # Given 2,400 readings of 40 entities over a minute, each stored twice (a redelivery)
    batch = [reading(f"s{e:02d}", T0 + i * 1_000 + e, float(i), f"{e}-{i}") for e in range(40) for i in range(60)]
    write_export(tmp_path, [block_items([(r, 1) for r in batch]), block_items([(r, 2) for r in batch])])
    whole, bounded = ReadStats(), ReadStats()

    everything = list(read_readings(LocalStore(tmp_path), stats=whole))
    in_parts = list(read_readings(LocalStore(tmp_path), max_readings=50, stats=bounded))

    # Then a bound of 50 (an entity's 10 s window holds 10 readings, twice) holds no more than 50 at once
    assert whole.held_max == 4_800 and whole.spill_files == 1
    assert bounded.held_max <= 50 and bounded.spill_files > 64
    assert (
        sorted(in_parts, key=lambda r: (r.entity_id, r.ts_ms))
        == everything
        == sorted(batch, key=lambda r: (r.entity_id, r.ts_ms))
    )


def test_one_window_larger_than_the_bound_is_decoded_whole(tmp_path: Path) -> None:
    batch = [reading("hot", T0 + i * 5, float(i), f"h{i}") for i in range(1_000)]
    write_export(tmp_path, [block_items([(r, 1) for r in batch])])
    stats = ReadStats()
    assert len(list(read_readings(LocalStore(tmp_path), max_readings=10, stats=stats))) == 1_000
    assert stats.held_max == 1_000


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    budget=st.integers(min_value=1, max_value=120),
    files=st.integers(min_value=1, max_value=4),
)
def test_any_export_reads_as_the_newest_copy_of_each_reading(data: st.DataObject, budget: int, files: int) -> None:
    # Given batches of readings of 3 entities over 40 s (identities drawn from a small set, so they repeat),
    # each batch one version, its items spread over the data files at random
    identity = st.tuples(st.sampled_from(["e0", "e1", "e2"]), st.integers(0, 40_000), st.sampled_from("abc"))
    batches = data.draw(st.lists(st.lists(identity, min_size=1, max_size=40), min_size=1, max_size=5))
    versions = data.draw(st.permutations(range(1, len(batches) + 1)))
    model: dict[tuple[str, int, str], tuple[int, float]] = {}
    spread: list[list[dict[str, Any]]] = [[] for _ in range(files)]
    for number, (batch, version) in enumerate(zip(batches, versions, strict=True)):
        entries = []
        for position, (entity, offset, event) in enumerate(batch):
            value = float(number * 100 + position)
            entries.append((reading(entity, T0 + offset, value, event), version))
            key = (entity, T0 + offset, event)
            if key not in model or model[key][0] <= version:  # later in the same batch wins too
                model[key] = (version, value)
        for item in block_items(entries):
            spread[data.draw(st.integers(0, files - 1))].append(item)
    with tempfile.TemporaryDirectory() as scratch:
        root = write_export(Path(scratch), spread)

        # When it is read within the budget
        stats = ReadStats()
        got = list(read_readings(LocalStore(root), max_readings=budget, stats=stats))

    # Then each reading comes out once, with the value of its newest copy
    assert len(got) == len({(r.entity_id, r.ts_ms, r.event_id) for r in got}) == len(model)
    assert {(r.entity_id, r.ts_ms, r.event_id): r.measures["temp"] for r in got} == {
        key: value for key, (_, value) in model.items()
    }
    assert stats.readings == len(model)


# -- what is not a (whole) export -------------------------------------------------------------------


def test_a_directory_without_an_export_is_refused(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(NotAnExport, match=r"not a DynamoDB export.*AWSDynamoDB/<export id>/manifest-summary\.json"):
        read(tmp_path)
    with pytest.raises(NotAnExport, match="no such directory"):
        read(tmp_path / "missing")


def test_an_export_without_its_manifest_is_refused_unless_asked(tmp_path: Path) -> None:
    # Given what moto's export writes: a data file, no manifest
    first, _, _ = two_batches()
    data = tmp_path / "AWSDynamoDB" / "c0ffee" / "data" / "x.gz"
    data.parent.mkdir(parents=True)
    data.write_bytes(data_file(first))

    with pytest.raises(MissingManifest, match=r"AWSDynamoDB/c0ffee/: no manifest-summary\.json.*--without-manifest"):
        read(tmp_path)
    assert len(read(tmp_path, without_manifest=True)) == 15


def test_an_export_whose_files_manifest_is_missing_is_refused(tmp_path: Path) -> None:
    first, _, _ = two_batches()
    write_export(tmp_path, [first])
    (folder(tmp_path) / "manifest-files.json").unlink()
    with pytest.raises(MissingManifest, match=r"manifest-files\.json: missing"):
        read(tmp_path)


def test_a_data_file_the_manifest_lists_must_be_there_and_whole(tmp_path: Path) -> None:
    first, second, _ = two_batches()
    write_export(tmp_path, [first, second])
    data = folder(tmp_path) / "data" / "file001.json.gz"
    whole = data.read_bytes()

    data.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(ArchiveError, match=r"file001\.json\.gz: not a whole gzip file"):
        read(tmp_path)

    data.write_bytes(data_file(second[:-1]))
    with pytest.raises(
        ArchiveError, match=rf"file001\.json\.gz: holds {len(second) - 1} items but the manifest counts"
    ):
        read(tmp_path)

    data.unlink()
    with pytest.raises(ArchiveError, match=r"manifest-files\.json line 2: data file .*file001\.json\.gz is missing"):
        read(tmp_path)


def test_a_failed_export_beside_a_whole_one_is_skipped_and_reported(tmp_path: Path) -> None:
    first, _, _ = two_batches()
    write_export(tmp_path, [first])
    (tmp_path / "AWSDynamoDB" / "failed-one").mkdir()
    (tmp_path / "AWSDynamoDB" / "failed-one" / "_started").write_bytes(b"")
    stats = ReadStats()
    assert len(list(read_readings(LocalStore(tmp_path), stats=stats))) == 15
    assert stats.incomplete == ("AWSDynamoDB/failed-one/",)


def test_an_ion_export_is_refused_by_name(tmp_path: Path) -> None:
    first, _, _ = two_batches()
    write_export(tmp_path, [first])
    summary = folder(tmp_path) / "manifest-summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "outputFormat": "ION"}))
    with pytest.raises(ArchiveError, match="an ION export; this reads DYNAMODB_JSON"):
        read(tmp_path)


def corrupt(tmp_path: Path, line: int, edit: Any) -> Path:
    first, _, _ = two_batches()
    items = [json.loads(json.dumps(i)) for i in first]
    edit(items[line - 1])
    write_export(tmp_path, [items])
    return folder(tmp_path) / "data" / "file000.json.gz"


@pytest.mark.parametrize(
    ("edit", "reason"),
    [
        (
            lambda i: i["b"].update(B=i["b"]["B"][:-12] + "AAAAAAAAAAAA"),
            "block of sensor-b, pk '0006#2026-11-22T06:00' sk 'sensor-b#.*': the checksum does not match",
        ),
        (lambda i: i["b"].update(B="AQ=="), "block of sensor-b, pk .* sk .*: the payload ends inside its header"),
        (lambda i: i["b"].update(B="!!"), "the block of sensor-b is not base64"),
        (lambda i: i.pop("b"), "the item of sensor-b has no binary block 'b'"),
        (lambda i: i.update(sk={"S": "sensor-b#2026-11-22T06:00:00.000Z#evt"}), "are not a block's keys"),
        (lambda i: i.pop("pk"), "no string pk and sk"),
        (lambda i: (i.pop("b"), i.update(t={"S": "x"})), "without a block 'b' and without a string 'e'"),
        (
            lambda i: (i.pop("b"), i.update(e={"S": "sensor-b"}, t={"S": "yesterday"}, i={"S": "x"})),
            "an item without a block has 't' 'yesterday', not a fixed-width UTC time",
        ),
        (
            lambda i: (i.pop("b"), i.update(e={"S": "sensor-b"}, t={"S": "2026-11-22T06:00:00.000Z"}, i={"S": "x"})),
            "whose sort key is not its <e>#<t>#<i>",
        ),
    ],
)
def test_a_corrupt_block_is_named_by_file_and_line(tmp_path: Path, edit: Any, reason: str) -> None:
    data = corrupt(tmp_path, 2, edit)
    with pytest.raises(CorruptItem, match=rf"{data}.* line 2: .*{reason}") as caught:
        read(tmp_path)
    assert caught.value.line == 2


def test_a_line_that_is_not_an_item_is_named(tmp_path: Path) -> None:
    first, _, _ = two_batches()
    write_export(tmp_path, [first[:2]])
    data = folder(tmp_path) / "data" / "file000.json.gz"
    data.write_bytes(gzip.compress((json.dumps({"Item": first[0]}) + '\n{"oops": 1}\n').encode()))
    with pytest.raises(CorruptItem, match=r'file000\.json\.gz line 2: not a JSON object \{"Item"'):
        read(tmp_path)


def test_an_s3_source_is_a_bucket_and_a_prefix() -> None:
    assert S3Store.parse(None, "s3://exports/dynamodb-exports/t-1").where == "s3://exports/dynamodb-exports/t-1/"
    assert S3Store.parse(None, "s3://exports").prefix == ""
    with pytest.raises(NotAnExport, match="s3://bucket/prefix/"):
        S3Store.parse(None, "s3:///x")


# -- the command --------------------------------------------------------------------------------------


def test_the_command_writes_json_lines_to_a_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second, expected = two_batches()
    write_export(tmp_path / "export", [first, second])
    out = tmp_path / "readings.jsonl"

    assert run_archive([str(tmp_path / "export"), "-o", str(out), "--entity", "sensor-b"]) == 0

    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert lines == [r.to_json() for r in expected if r.entity_id == "sensor-b"]
    assert set(lines[0]) == {"entity_id", "timestamp", "event_id", "measures"}
    assert "5 readings from 1 blocks in 2 data files of 1 export(s); 0 older copies dropped" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export", "readings.jsonl"]


def test_the_command_prints_to_stdout_within_a_time_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    first, second, _ = two_batches()
    write_export(tmp_path, [first, second])

    assert run_archive([str(tmp_path), "--from", "2026-11-22T06:00:12Z", "--to", str(T0 + 14_000)]) == 0

    assert [json.loads(line)["event_id"] for line in capsys.readouterr().out.splitlines()] == ["a12", "a13"]


def test_the_command_fails_clearly_and_leaves_no_partial_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = corrupt(tmp_path / "export", 2, lambda i: i["b"].update(B="!!"))
    out = tmp_path / "readings.jsonl"

    assert run_archive([str(tmp_path / "export"), "-o", str(out)]) == 1

    assert f"tsctl archive: {data} line 2: the block of sensor-b is not base64" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["export"]


def malformed(entity: str, first_ms: int, span_ms: int) -> bytes:
    """A block of format 2 (no checksum) whose header is whole but whose second time delta is a string."""
    head = bytearray([2])
    for number in (2, first_ms, span_ms):
        write_varint(number, head)
    return bytes(head) + b"\x01\x07" + json.dumps([[0, str(span_ms)], {"temp": [1, 2]}]).encode()


def test_a_corrupt_block_can_be_reported_and_left_out_and_the_rest_is_read(tmp_path: Path) -> None:
    # Given an export in which one block fails its checksum, and another, spanning two windows, has a bad column
    first, second, expected = two_batches()
    items = [json.loads(json.dumps(i)) for i in first]
    b_item = next(i for i in items if i["sk"]["S"].startswith("sensor-b#"))
    b_item["b"]["B"] = b_item["b"]["B"][:-8] + "AAAAAAAA"
    a_item = next(i for i in items if i["sk"]["S"].startswith("sensor-a#"))
    a_item["b"]["B"] = base64.b64encode(malformed("sensor-a", T0 + WINDOW_MS - 500, 1_000)).decode()
    write_export(tmp_path, [items, second])
    reports: list[CorruptItem] = []
    stats = ReadStats()

    # When it is read telling a callback of each block that does not decode
    got = list(read_readings(LocalStore(tmp_path), stats=stats, on_corrupt_block=reports.append))

    # Then each damaged block is reported once, by file, line and key, and what is wrong ...
    assert stats.corrupt_blocks == 2
    assert sorted(r.line for r in reports) == sorted(items.index(i) + 1 for i in (a_item, b_item))
    messages = sorted(str(r) for r in reports)
    assert any(f"pk {b_item['pk']['S']!r} sk {b_item['sk']['S']!r}: the checksum does not match" in m for m in messages)
    assert any(f"pk {a_item['pk']['S']!r} sk {a_item['sk']['S']!r}: a time delta is not a whole" in m for m in messages)
    # ... and every reading of the other blocks comes out: the redelivery's copies of a5..a14, none of sensor-b
    assert got == [
        r for r in expected if r.entity_id == "sensor-a" and r.event_id not in {"a0", "a1", "a2", "a3", "a4"}
    ]
    assert stats.blocks == len(items) + len(second) - 2
    # And without a callback, the read fails naming the first of them
    with pytest.raises(CorruptItem, match=r"does not match|not a whole number"):
        read(tmp_path)


def test_the_command_names_each_corrupt_block_reads_the_rest_and_exits_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    first, second, expected = two_batches()
    items = [json.loads(json.dumps(i)) for i in first]
    b_item = next(i for i in items if i["sk"]["S"].startswith("sensor-b#"))
    b_item["b"]["B"] = b_item["b"]["B"][:-8] + "AAAAAAAA"
    write_export(tmp_path / "export", [items, second])
    out = tmp_path / "readings.jsonl"

    assert run_archive([str(tmp_path / "export"), "-o", str(out)]) == 1

    err = capsys.readouterr().err
    data = folder(tmp_path / "export") / "data" / "file000.json.gz"
    line = items.index(b_item) + 1
    assert f"tsctl archive: skipped {data} line {line}: block of sensor-b, pk {b_item['pk']['S']!r}" in err
    assert "15 readings from " in err and "; 1 corrupt blocks skipped (named above)" in err
    assert [json.loads(x) for x in out.read_text().splitlines()] == [
        r.to_json() for r in expected if r.entity_id != "sensor-b"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--entity", "a#b"], "must not contain '#'"),
        (["--from", "yesterday"], "--from"),
        (["--max-readings-in-memory", "0"], "must be at least 1"),
    ],
)
def test_bad_options_exit_2_naming_the_option(
    tmp_path: Path, argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exited:
        run_archive([str(tmp_path), *argv])
    assert exited.value.code == 2
    assert message in capsys.readouterr().err


def test_a_range_that_ends_before_it_starts_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_archive([str(tmp_path), "--from", str(T0 + 5_000), "--to", str(T0)]) == 2
    assert "--from must precede --to" in capsys.readouterr().err


def test_a_split_entity_is_read_from_its_own_partitions(tmp_path: Path) -> None:
    # Given a hot entity split into 4 sub-shards: its blocks lie in partitions of its own, its copies in several
    split = ShardMap.initial(HYBRID.bucket, 8).with_entity("hot", 4, T0, now_ms=T0 - 3_600_000)
    batch = [reading("hot", T0 + i * 100, float(i), f"h{i}") for i in range(50)]
    items = [block_items([(r, 1)], shard_map=split)[0] for r in batch]
    assert len({i["pk"]["S"] for i in items}) == 4 and all(
        i["pk"]["S"].endswith(("#000", "#001", "#002", "#003")) for i in items
    )
    write_export(tmp_path, [items])
    assert read(tmp_path) == batch


# -- the write tier -------------------------------------------------------------------------------------


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    data=st.data(),
    layout=st.sampled_from([HYBRID, RANDOM]),
    budget=st.integers(min_value=1, max_value=120),
)
def test_an_export_of_both_tiers_reads_as_the_newest_copy_of_each_reading(
    data: st.DataObject, layout: Layout, budget: int
) -> None:
    # Given batches stored as ingest stores them with the write tier on (group items, dense marks, blocks of
    # dense entities and of late readings), in publication order over two hours, the first hour compacted
    # once it settled, and the compaction state beside them
    shard_map = ShardMap.initial(layout.bucket, 4)
    writer = TierWriter(layout, WriteTier(2), shard_map, 30 * 86_400_000)
    identity = st.tuples(st.sampled_from(["e0", "e1", "e2", "e3"]), st.integers(0, 7_200_000), st.sampled_from("ab"))
    batches = data.draw(st.lists(st.lists(identity, min_size=1, max_size=20), min_size=1, max_size=8))
    model: dict[tuple[str, int, str], tuple[int, float]] = {}
    items: list[dict[str, Any]] = [dynamodb_json({"pk": STATE_PK, "sk": "timeseries-readings", "through": T0})]
    started, compacted = T0, False
    for version, batch in enumerate(batches, 1):
        started = max(started, T0 + max(offset for _, offset, _ in batch) + data.draw(st.sampled_from((1_000, 3e6))))
        if not compacted and started >= T0 + 3_780_000:
            items += [dynamodb_json(item) for _, item in writer.compact(T0)]
            compacted = True
        entries = []
        for position, (entity, offset, event) in enumerate(batch):
            value = float(version * 100 + position)
            entries.append((reading(entity, T0 + offset, value, event), version))
            model[entity, T0 + offset, event] = (version, value)
        items += [dynamodb_json(item) for _, item in writer.ingest(entries, int(started))]
    if not compacted:
        items += [dynamodb_json(item) for _, item in writer.compact(T0)]
    with tempfile.TemporaryDirectory() as scratch:
        root = write_export(Path(scratch), [items[::2], items[1::2]])

        # When it is read within the budget
        got = list(read_readings(LocalStore(root), max_readings=budget))

    # Then each reading comes out once, with the value of its newest copy, whichever tier holds it
    assert len(got) == len({(r.entity_id, r.ts_ms, r.event_id) for r in got}) == len(model)
    assert {(r.entity_id, r.ts_ms, r.event_id): r.measures["temp"] for r in got} == {
        key: value for key, (_, value) in model.items()
    }


def test_compacted_blocks_group_items_and_blocks_of_one_reading_come_out_once_the_newest(tmp_path: Path) -> None:
    # Given a reading in a group item (version 1), a correction of it in a late block (version 3), the
    # slice re-packed (sub-items: copies of the group items' readings) and the hour compacted into cluster
    # blocks (its other readings from the group items), with a dense mark and the state beside them; and an
    # hour before compacted into a per-entity compacted block (as compaction wrote before cluster blocks)
    writer = TierWriter(HYBRID, WriteTier(2), ShardMap.initial(HYBRID.bucket, 4), 30 * 86_400_000)
    first = [reading("sensor-a", T0 + i * 60_000, float(i), f"a{i}") for i in range(5)]
    dense = [reading("sensor-b", T0 + i * 100, 50.0 + i, f"b{i}") for i in range(10)]
    items = writer.ingest([(r, 1) for r in first], T0 + 240_000)
    items += writer.ingest([(r, 2) for r in dense], T0 + 240_000)
    items += writer.repack(T0)
    items += writer.ingest([(reading("sensor-a", T0 + 60_000, 99.0, "a1"), 3)], T0 + 3_700_000)
    items += writer.compact(T0)
    earlier = [reading("sensor-c", T0 - 3_000_000 + i * 60_000, 7.0, f"c{i}") for i in range(3)]
    encoded = encode_block(earlier, 1, span_limit_ms=MAX_COMPACTED_SPAN_MS)
    base = HYBRID.hybrid_base("sensor-c", T0 - 3_600_000, ShardMap.initial(HYBRID.bucket, 4))
    old, _, _ = keyed_item(f"{base}#c", HYBRID.block_sk_stem("sensor-c", encoded), encoded.payload, None)
    items.append((HYBRID.table_for(T0 - 3_600_000), old))
    kinds = {("mark" if str(i["sk"]).startswith("!") else str(i["pk"])[:2]) for _, i in items}
    assert {"w#", "s#", "c#", "mark"} <= kinds
    state = {"pk": STATE_PK, "sk": "timeseries-readings", "through": T0 + 3_600_000}
    write_export(tmp_path, [[dynamodb_json(i) for _, i in items], [dynamodb_json(state)]])

    # When the export is read
    got = read(tmp_path)

    # Then each reading comes out once, a1 as corrected, the dense entity's from its blocks (the sub-items
    # are skipped: their readings are the group items')
    assert [(r.event_id, r.measures["temp"]) for r in got] == [
        ("a0", 0.0),
        ("a1", 99.0),
        ("a2", 2.0),
        ("a3", 3.0),
        ("a4", 4.0),
        *((f"b{i}", 50.0 + i) for i in range(10)),
        *((f"c{i}", 7.0) for i in range(3)),
    ]
