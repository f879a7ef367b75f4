"""The CLI: every command has --help and --json, bad input exits 2 naming the field."""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest
from botocore.exceptions import ClientError

from infra.config import Context, load_cdk_json_context
from keydesign import Ingest
from simulator import SimWorkload
from tests.unit.tsctl.running import run_cli
from tsctl import seed
from tsctl.arguments import instant
from tsctl.cli import build_parser, main
from tsctl.commands import preview
from tsctl.commands.publish import _groups as publish_groups


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    """What ``tsctl <argv> --json`` prints, parsed; the command must succeed."""
    code, out, err = run_cli(capsys, *argv, "--json")
    assert code == 0, err
    return json.loads(out)


#: The seed article's workload: 50,000 readings/s over 10,000 sensors, one of them at 2,000/s, 16 keys.
SEED_PLAN = (
    "plan", "--peak-writes", "50000", "--entities", "10000", "--hot", "sensor-alpha-001=2000", "--shards", "16",
)  # fmt: skip


@pytest.mark.parametrize("command", ["plan", "keys", "preview", "demo", "serve", "query", "rejects"])
def test_every_command_has_help(command: str, capsys: pytest.CaptureFixture[str]) -> None:
    # Given a command, when asked for help, then argparse prints usage and exits 0
    with pytest.raises(SystemExit) as exc:
        main([command, "--help"])
    assert exc.value.code == 0
    assert f"usage: tsctl {command}" in capsys.readouterr().out


CDK_JSON = Path(__file__).resolve().parents[3] / "cdk.json"


def test_every_tool_sizes_batches_by_the_stacks_batching_window() -> None:
    # Given the window the stack deploys (cdk.json's ingest_batching_window_s)
    window = json.loads(CDK_JSON.read_text())["context"]["ingest_batching_window_s"]
    # Then the planner's default is it, and every tool takes its default from the planner's
    assert Ingest().batching_window_s == window
    parser = build_parser()
    assert parser.parse_args(["plan", "--peak-writes", "1"]).batching_window == window
    assert parser.parse_args(["simulate"]).batching_window == window
    assert SimWorkload(rate=1.0, entities=1, start_ms=0, duration_s=1).batching_window_s == window
    assert seed.workload().ingest.batching_window_s == window


def test_plan_sizes_the_seed_workload_in_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    # Given 50,000 readings/s over 10,000 sensors with one 2,000/s sensor, a 5 s window (the stack's is 10 s),
    # when planned as JSON
    data = run_json(capsys, *SEED_PLAN, "--batching-window", "5")
    plan = data["plan"]
    # Then a sensor's 24 readings a batch (4.8/s x 5 s) share a block (1 write unit: 0.2 WCU/s), the hot
    # sensor's 10,000 make ten blocks of 1,000, and the fleet's ~2,000 WCU/s need 4 shards at 500 a key,
    # plus 2 sub-shards so the hot sensor's 12 WCU/s do not push its full base key over that budget
    typical, hot = plan["blocks"]
    assert typical["readings_per_block"] == pytest.approx(24.0, abs=0.01) and typical["write_units_per_block"] == 1
    assert hot["entity"] == "sensor-alpha-001" and hot["readings_per_block"] == 1_000
    # (48,000 readings/s at 1/24 of a unit + 2,000 at 6/1,000) / 50,000
    assert plan["write_units_per_reading"] == pytest.approx(0.0402, abs=0.0001)
    assert plan["global_shards"] == 4 and plan["entity_shards"] == {"sensor-alpha-001": 2}
    # The seed article's N=16 fits: ~2,012 WCU/s over 16 keys (one reading an item it took 3,125 each)
    assert data["existing_design"]["mean_key_wcu"] == pytest.approx(125.7, abs=0.1)
    assert data["existing_design"]["throttles"] is False
    # The month, in parts that add up
    month = plan["monthly_ondemand"]
    assert set(month) == {
        "writes", "reads", "storage", "stream", "ingest_lambda", "compaction_lambda", "rollup_lambda", "total"
    }  # fmt: skip
    assert month["total"] == pytest.approx(sum(v for k, v in month.items() if k != "total"), abs=0.04)  # cents


def test_plan_with_a_longer_window_makes_larger_blocks(capsys: pytest.CaptureFixture[str]) -> None:
    # 5 readings/s a sensor: a block of 5, 25 or 50 readings (the default window), one write unit each
    argv = ["plan", "--peak-writes", "50000", "--entities", "10000"]
    one = run_json(capsys, *argv, "--batching-window", "1")["plan"]
    five = run_json(capsys, *argv, "--batching-window", "5")["plan"]
    ten = run_json(capsys, *argv)["plan"]  # the stack's window
    per_block = [p["blocks"][0]["readings_per_block"] for p in (one, five, ten)]
    assert per_block == pytest.approx([5.0, 25.0, 50.0])
    assert five["write_units_per_reading"] < one["write_units_per_reading"] / 4
    assert ten["write_units_per_reading"] < five["write_units_per_reading"]
    # A batch per shard per window: 50 shards make 50, 10 and 5 invocations a second
    assert [p["stream"]["invocations_per_s"] for p in (one, five, ten)] == [50, 10, 5]


def test_plan_prints_the_month_in_parts(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, "plan", "--peak-writes", "50000", "--entities", "10000")
    assert code == 0
    for line in ("write units per reading", "bytes stored per reading", "ingest invocations/s"):
        assert line in out
    for part in ("writes", "reads", "storage", "stream", "ingest lambda", "total"):
        assert f"\n{part} " in out


def test_plan_prices_seed_003_in_parts_the_re_pack_included(capsys: pytest.CaptureFixture[str]) -> None:
    # The command: 1 million devices, a reading each per ~259 s, kept 90 days
    argv = ["plan", "--peak-writes", "3858", "--entities", "1000000", "--retention-days", "90"]
    argv += ["--reading", '{"entity_id":"device-0000001","measures":{"value":21.53}}']
    code, out, _ = run_cli(capsys, *argv)
    assert code == 0
    head = "part (a month)  WU/reading  RU/reading  B/reading at rest  on-demand $  provisioned $"
    lines = out.splitlines()
    at = next(i for i, line in enumerate(lines) if re.sub(" +", "  ", line) == re.sub(" +", "  ", head))
    rows = {line.split("  ")[0]: line.split() for line in lines[at + 2 : lines.index("", at)]}
    # what this deployment pays for (the rollup-owned parts cost nothing: no entity writes blocks)
    assert list(rows) == [
        "group items", "compacted blocks", "sub-items (re-pack)", "slice partials (re-pack)", "group partials",
        "compaction's totals",
        "compaction's reads and state", "compaction Lambda", "rollup totals and state", "rollup Lambda", "stream",
        "ingest Lambda", "total",
    ]  # fmt: skip
    plan = run_json(capsys, *argv)["plan"]
    total = plan["monthly_ondemand"]["total"]
    # under the issue's $1,000, every part counted (docs/decisions.md, "Compacted blocks of several entities")
    assert total < 1_000 and float(rows["total"][-2].replace(",", "")) == total
    assert sum(sum(v[0] for v in p.values() if isinstance(v, list)) for p in plan["parts"]) == pytest.approx(
        total, abs=0.01
    )


def test_plan_prints_the_cdk_context_that_deploys_it(capsys: pytest.CaptureFixture[str]) -> None:
    # The seed 003 command: its keys, the layout the plan sized (1-day buckets, daily tables, G auto)
    argv = ["plan", "--peak-writes", "3858", "--entities", "1000000", "--retention-days", "90"]
    argv += ["--reading", '{"entity_id":"device-0000001","measures":{"value":21.53}}']
    context = run_json(capsys, *argv)["context"]
    assert context == {
        "shards": 8, "bucket": "1d", "table_period": "day", "retention": "90d", "ingest_batching_window_s": "10",
        "write_tier_groups": 512,
    }  # fmt: skip
    code, out, _ = run_cli(capsys, *argv)
    line = " ".join(f"-c {key}={value}" for key, value in context.items())
    assert code == 0 and out.rstrip().endswith(f"deploy with: npx aws-cdk@2 deploy {line}")
    # and the stack takes it as `-c` gives it (strings)
    config = Context.parse({key: str(value) for key, value in context.items()})
    assert (config.shards, config.write_tier_groups, config.retention_ms) == (8, 512, 90 * 86_400_000)
    assert (config.layout().bucket.width_ms, config.table_period) == (86_400_000, "day")
    # a provisioned stream: its mode and the shards it needs
    provisioned = run_json(capsys, *SEED_PLAN, "--kinesis-mode", "provisioned", "--stream-shards", "4")["context"]
    assert (provisioned["kinesis_mode"], provisioned["kinesis_shards"]) == ("provisioned", 6)
    assert (provisioned["bucket"], provisioned["table_period"]) == ("1h", "hour")  # a hot entity: the hour
    Context.parse({key: str(value) for key, value in provisioned.items()})


def test_plan_of_blocks_of_one_reading_reproduces_one_item_per_reading(capsys: pytest.CaptureFixture[str]) -> None:
    # --item-bytes: every block one reading of 500 B (1 WCU): the sizing of one item per reading
    data = run_json(capsys, *SEED_PLAN, "--item-bytes", "500")
    assert data["plan"]["global_shards"] == 96
    assert data["plan"]["entity_shards"] == {"sensor-alpha-001": 4}
    assert data["existing_design"]["mean_key_wcu"] == 3125.0
    assert data["existing_design"]["throttles"] is True


def test_plan_reproduces_the_aws_guide_daily_table(capsys: pytest.CaptureFixture[str]) -> None:
    plan = run_json(capsys, "plan", "--peak-writes", "600", "--item-bytes", "180", "--utilisation", "1")["plan"]
    assert 26 <= plan["fill_hours"] <= 27
    assert plan["table_period"] == "day"


def test_plan_measures_the_blocks_of_a_given_reading(capsys: pytest.CaptureFixture[str]) -> None:
    # Readings with a random 32-character event id each do not compress like three measures do
    argv = ["plan", "--peak-writes", "50000", "--entities", "100"]
    plain = run_json(capsys, *argv)["plan"]
    reading = '{"entity_id": "s-1", "event_id": "0123456789abcdef0123456789abcdef", "measures": {"temp": 21.5}}'
    with_ids = run_json(capsys, *argv, "--reading", reading)["plan"]
    assert with_ids["bytes_stored_per_reading"] > plain["bytes_stored_per_reading"] + 10


@pytest.mark.parametrize(
    ("argv", "field"),
    [
        (["plan", "--peak-writes", "0", "--entities", "10"], "peak_writes_per_s"),
        (["plan", "--peak-writes", "10"], "entities"),
        (["plan", "--peak-writes", "10", "--item-bytes", "500000"], "item_bytes"),
        (["plan", "--peak-writes", "10", "--item-bytes", "500", "--hot", "alpha"], "--hot"),
        (["plan", "--peak-writes", "10", "--entities", "10", "--batching-window", "301"], "ingest.batching_window_s"),
        (["plan", "--peak-writes", "10", "--entities", "10", "--reading", "{bad"], "--reading"),
        (["plan", "--peak-writes", "10", "--entities", "10", "--reading", '{"entity_id": "a"}'], "--reading"),
        (["plan", "--peak-writes", "10", "--entities", "10", "--write-tier-groups", "0"], "write_tier_groups"),
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


@pytest.mark.parametrize(
    "typed",
    ["\u0661\u0667\u0669\u0665" + "\u0660" * 9, "+1795000000000", "9" * 17, "1" * 5000],
    ids=["arabic-indic digits", "a sign", "17 digits", "5000 digits"],
)
def test_an_instant_option_takes_ascii_epoch_ms_or_rfc3339_as_the_api_does(typed: str) -> None:
    # Given the type of --from (archive; --start of publish is the same), as the API's from/to parse
    parse = instant("--from")
    assert parse("1795000000000") == 1_795_000_000_000
    assert parse("2026-11-22T06:00:00+02:00") == parse("2026-11-22T04:00:00Z")
    # Then text that is neither ASCII epoch milliseconds nor RFC 3339 gets the API's one-line refusal
    with pytest.raises(argparse.ArgumentTypeError, match="is not an RFC 3339 date-time"):
        parse(typed)


def test_keys_shows_the_block_and_a_plan_that_contains_it(capsys: pytest.CaptureFixture[str]) -> None:
    # Given a reading and a query range covering it
    result = run_json(
        capsys, "keys", "--entity", "sensor-alpha-001", "--timestamp", "2026-11-22T06:57:51Z",
        "--event-id", "e-1", "--from", "2026-11-22T05:30:00Z", "--to", "2026-11-22T08:00:00Z",
    )  # fmt: skip
    # Then its block's key is shard#bucket / entity#first ts#block id#write units, its position in reads
    # entity#ts#event, and the plan holds that partition
    assert result["key"]["pk"].endswith("#2026-11-22T06:00")
    assert re.fullmatch(r"sensor-alpha-001#2026-11-22T06:57:51\.000Z#[0-9a-f]{12}#1", result["key"]["sk"])
    assert result["position"] == "sensor-alpha-001#2026-11-22T06:57:51.000Z#e-1"
    assert result["write_units"] == 1 and 100 < result["item_bytes"] < 1_024
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
    result = run_json(
        capsys, "keys", "--shard-map", str(path), "--entity", "hot", "--timestamp", "2026-11-22T07:10:00Z",
        "--from", "2026-11-22T06:00:00Z", "--to", "2026-11-22T08:00:00Z",
    )  # fmt: skip
    # Then the reading goes to a sub-shard and the plan reads 1 partition before 07:00 and 4 after
    assert result["key"]["pk"].count("#") == 3
    assert result["query"]["partition_count"] == 5


def test_keys_refuses_a_malformed_shard_map(tmp_path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "map.json"
    path.write_text(json.dumps({"bucket": "1h", "global": [{"effective_from": "2026-01-01T00:30:00Z", "shards": 8}]}))
    code, _, err = run_cli(capsys, "keys", "--shard-map", str(path), "--entity", "a")
    assert code == 2
    assert "global[0]" in err


def test_preview_packs_a_batch_of_the_seed_into_blocks_splits_the_hot_sensor_and_finds_every_reading() -> None:
    # Given the seed scenario at a fixed instant, one ingest batch of the stack's 10 s window packed into blocks:
    # 500,000 readings, 20,000 of them sensor-alpha-001's
    report = preview.build_report(now_ms=1_795_330_671_123)  # 2026-11-22T06:57:51.123Z
    assert report["scenario"]["batching_window_s"] == report["scenario"]["batch_s"] == 10
    seed16, planned, split = report["key_load"]
    # Then every design stores 10,019 blocks: a block of ~48 readings for each of 9,999 sensors (a few cut
    # at 10 s) and twenty of 1,000 for the hot one
    assert seed16["blocks"] == planned["blocks"] == split["blocks"] == 10_019
    # The seed's N=16 runs every key at about 63 WCU/s (the batch's units over its 10 s; one reading an item
    # it ran them at 3,125), and the planned N=2 near its 500 budget; no key anywhere over 1,000
    assert (seed16["partition_keys"], planned["partition_keys"], split["partition_keys"]) == (16, 2, 4)
    assert seed16["keys_over_1000"] == planned["keys_over_1000"] == split["keys_over_1000"] == 0
    assert seed16["mean_wcu"] == pytest.approx(report["plan"]["peak_wcu"] / 16, rel=0.01)
    # The README quotes these figures; the scenario is deterministic, so they are exact (a key's units a
    # batch over 10 s: multiples of 0.1). The hottest planned key is sensor-alpha-001's base key: its 12 WCU/s
    # move to 2 sub-shards of their own from 07:00, the next boundary every writer's cache will have seen
    assert [row["hottest_wcu"] for row in report["key_load"]] == [74.0, 514.3, 502.3]
    assert report["split"]["sub_shards"] == 2
    assert report["split"]["effective_from"] == "2026-11-22T07:00:00.000Z"
    # Every reading, before and after the split, is in a partition its entity's plan reads
    assert report["all_readings_found_by_their_plan"] is True
    assert report["readings_checked"] == report["readings_found_by_their_plan"] == 1_000_000
    assert len(report["query_hot_sensor"]["partitions"]) == 3  # its base key before 07:00, 2 sub-shards after


def test_parser_lists_the_built_commands() -> None:
    parser = build_parser()
    help_text = parser.format_help()
    for command in ("plan", "keys", "preview", "demo", "serve", "query", "rejects"):
        assert command in help_text


def test_preview_writes_its_report_outside_the_demos_directory(
    tmp_path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given the preview (no server) of a seed a hundredth the size (the full scale is the test above's, and
    # takes some 20 s of CPU), When it runs with --json
    monkeypatch.setattr(seed, "SENSORS", 100)
    monkeypatch.setattr(seed, "GLOBAL_RATE", 500)
    monkeypatch.setattr(seed, "HOT_RATE", 20)
    report = run_json(capsys, "preview", "--out", str(tmp_path / "preview"))
    # Then it succeeds, prints its report and writes it where it was told (by default out/preview, so it
    # never overwrites the local demo's out/demo/report.json)
    assert report["all_readings_found_by_their_plan"] is True
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
    with pytest.raises(SystemExit) as exited:
        main(argv)
    err = capsys.readouterr().err
    assert exited.value.code == 2
    assert f"tsctl demo: error: argument {field}" in err
    assert "Traceback" not in err


class _MissingQueue:
    """An SQS client whose every call answers as SQS does for a queue that does not exist."""

    def __getattr__(self, operation: str) -> object:
        def call(**_: object) -> None:
            error = {"Error": {"Code": "AWS.SimpleQueueService.NonExistentQueue", "Message": "no such queue"}}
            raise ClientError(error, operation)

        return call


@pytest.mark.parametrize("command", ["rejects", "replay"])
def test_an_aws_error_exits_1_with_one_line_naming_the_command(
    command: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a queue URL that names no queue
    monkeypatch.setattr(f"tsctl.commands.{command}.aws_client", lambda *_: _MissingQueue())
    option = "--queue-url" if command == "rejects" else "--ingest-queue-url"
    # When a command reads it, Then it exits 1 with one line saying what AWS answered, no traceback
    code, out, err = run_cli(capsys, command, "list", option, "http://127.0.0.1:1/000000000000/missing")
    assert code == 1
    assert out == ""
    assert err.startswith(f"tsctl {command} list: An error occurred (AWS.SimpleQueueService.NonExistentQueue)")
    assert err.count("\n") == 1 and "Traceback" not in err


def test_publish_keys_readings_by_the_deployments_write_tier_groups() -> None:
    # Given the groups the stack deploys (cdk.json's write_tier_groups, or its default)
    groups = Context.parse(load_cdk_json_context(CDK_JSON)).write_tier_groups
    parser = build_parser()
    # Then publish's group keys are the write tier's partition keys, unless --groups says otherwise
    assert publish_groups(parser.parse_args(["publish", "--stream", "s"])) == groups > 0
    assert publish_groups(parser.parse_args(["publish", "--stream", "s", "--groups", "8"])) == 8
