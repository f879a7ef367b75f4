"""The CLI: every command has --help and --json, bad input exits 2 naming the field."""

from __future__ import annotations

import json

import pytest

from tsctl.cli import build_parser, main
from tsctl.commands import preview


def run_cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.mark.parametrize("command", ["plan", "keys", "preview", "demo", "serve", "query", "rejects"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a command, when asked for help, then argparse prints usage and exits 0
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: tsctl {command}" in capsys.readouterr().out


def test_plan_sizes_the_seed_workload(capsys: pytest.CaptureFixture[str]) -> None:
    # Given 50,000 writes/s of 500 B with one 2,000/s sensor, when planned as JSON
    code, out, _ = run_cli(
        capsys, "plan", "--peak-writes", "50000", "--item-bytes", "500",
        "--entities", "10000", "--hot", "sensor-alpha-001=2000", "--shards", "16", "--json",
    )  # fmt: skip
    data = json.loads(out)
    # Then the spread traffic gets 96 shards, the hot sensor 4 of its own, and N=16 throttles
    assert code == 0
    assert data["plan"]["global_shards"] == 96
    assert data["plan"]["entity_shards"] == {"sensor-alpha-001": 4}
    assert data["existing_design"]["mean_key_wcu"] == 3125.0
    assert data["existing_design"]["throttles"] is True


def test_plan_reproduces_the_aws_guide_daily_table(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(
        capsys, "plan", "--peak-writes", "600", "--item-bytes", "180", "--utilisation", "1", "--json"
    )
    plan = json.loads(out)["plan"]
    assert code == 0
    assert 26 <= plan["fill_hours"] <= 27
    assert plan["table_period"] == "day"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["plan", "--peak-writes", "0", "--item-bytes", "500"], "peak_writes_per_s"),
        (["plan", "--peak-writes", "10", "--item-bytes", "500000"], "item_bytes"),
        (["plan", "--peak-writes", "10", "--item-bytes", "500", "--hot", "alpha"], "--hot"),
        (["keys", "--entity", "bad#id"], "entity_id"),
        (["keys", "--entity", "a", "--timestamp", "yesterday"], "timestamp"),
        (["keys", "--entity", "a", "--measures", "{bad"], "--measures"),
        (["keys", "--entity", "a", "--from", "2026-01-01T00:00:00Z"], "--to"),
        (["keys", "--entity", "a", "--bucket", "7m"], "bucket"),
    ],
)
def test_bad_input_exits_2_naming_the_field(argv: list[str], field: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run_cli(capsys, *argv)
    assert code == 2
    assert out == ""
    assert f": {field}:" in err
    assert "Traceback" not in err


def test_keys_shows_the_key_and_a_plan_that_contains_it(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a reading and a query range covering it
    code, out, _ = run_cli(
        capsys, "keys", "--entity", "sensor-alpha-001", "--timestamp", "2026-11-22T06:57:51Z",
        "--event-id", "e-1", "--from", "2026-11-22T05:30:00Z", "--to", "2026-11-22T08:00:00Z", "--json",
    )  # fmt: skip
    result = json.loads(out)
    # Then the hybrid key is shard#bucket / entity#ts#event and the plan holds that partition
    assert code == 0
    assert result["key"]["pk"].endswith("#2026-11-22T06:00")
    assert result["key"]["sk"] == "sensor-alpha-001#2026-11-22T06:57:51.000Z#e-1"
    assert result["query"]["partition_count"] == 3
    assert result["key"]["pk"] in {p["pk"] for p in result["query"]["partitions"]}


def test_keys_reads_a_shard_map_file(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a map where the entity has 4 sub-shards from 07:00
    shard_map = {
        "version": 1,
        "bucket": "1h",
        "global": [{"effective_from": "1970-01-01T00:00:00Z", "shards": 8}],
        "entities": {"hot": [{"effective_from": "2026-11-22T07:00:00Z", "shards": 4}]},
    }
    path = tmp_path / "map.json"
    path.write_text(json.dumps(shard_map))
    code, out, _ = run_cli(
        capsys, "keys", "--shard-map", str(path), "--entity", "hot", "--timestamp", "2026-11-22T07:10:00Z",
        "--from", "2026-11-22T06:00:00Z", "--to", "2026-11-22T08:00:00Z", "--json",
    )  # fmt: skip
    result = json.loads(out)
    # Then the reading goes to a sub-shard and the plan reads 1 partition before 07:00 and 4 after
    assert code == 0
    assert result["key"]["pk"].count("#") == 3
    assert result["query"]["partition_count"] == 5


def test_keys_refuses_a_malformed_shard_map(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"bucket": "1h", "global": [{"effective_from": "2026-01-01T00:30:00Z", "shards": 8}]}))
    code, _, err = run_cli(capsys, "keys", "--shard-map", str(path), "--entity", "a")
    assert code == 2
    assert "global[0]" in err


def test_preview_report_shows_the_split_removes_every_hot_key() -> None:
    # Given the seed scenario at a fixed instant
    report = preview.build_report(now_ms=1_795_330_671_123)  # 2026-11-22T06:57:51.123Z
    loads = {row["design"]: row for row in report["key_load"]}
    # Then the seed's N=16 runs every key over the limit, the sized map leaves only the
    # hot sensor's key over it, and after the split no key is over it
    seed16, before, after = report["key_load"]
    assert seed16["keys_over_1000"] == 16 and seed16["mean_wcu"] == 3125.0
    assert before["keys_over_1000"] == 1 and before["hottest_wcu"] > 2000
    assert after["keys_over_1000"] == 0
    # The README quotes these figures; the scenario is deterministic, so they are exact.
    assert [row["hottest_wcu"] for row in report["key_load"]] == [4972, 2576, 649]
    assert len(loads) == 3
    # 06:57:51 + 60 s cache -> the next 1h boundary
    assert report["split"]["effective_from"] == "2026-11-22T07:00:00.000Z"
    assert report["all_readings_found_by_their_plan"] is True
    assert report["readings_found_by_their_plan"] == 100_000


def test_parser_lists_the_built_commands() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for command in ("plan", "keys", "preview", "demo", "serve", "query", "rejects"):
        assert command in help_text


def test_preview_writes_its_report_outside_the_demos_directory(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    # Given the preview (no server), When it runs with --json
    code, out, _ = run_cli(capsys, "preview", "--out", str(tmp_path / "preview"), "--json")
    # Then it succeeds, prints its report and writes it where it was told (by default out/preview, so it
    # never overwrites the local demo's out/demo/report.json)
    assert code == 0
    assert json.loads(out)["all_readings_found_by_their_plan"] is True
    assert (tmp_path / "preview" / "report.json").exists()
    assert build_parser().parse_args(["preview"]).out.as_posix() == "out/preview"


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["demo", "--faults", "throttle"], "--faults"),
        (["demo", "--sensors", "0"], "--sensors"),
        (["demo", "--hot-rate", "-5"], "--hot-rate"),
    ],
)
def test_demo_refuses_bad_options_before_starting_anything(
    argv: list[str], field: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given a bad option, When the demo is asked to run, Then it exits 2 naming it (nothing was started)
    code, _, err = run_cli(capsys, *argv)
    assert code == 2
    assert f"{field}" in err
    assert "Traceback" not in err
