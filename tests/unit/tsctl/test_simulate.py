"""``tsctl simulate``: --help, a table, --json, a PNG chart, and bad input naming the option."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.unit.tsctl.running import run_cli
from tsctl.cli import build_parser, main
from tsctl.commands.simulate import build, function_settings

# 40 sensors write a block a second each; sensor-alpha-001 eight blocks of 1,000 readings, 48 WCU/s. In 1 s
# batches, not the default 5 s: the detector's settings below (a 40 WCU/s threshold) are sized for that load.
SMALL = [
    "simulate", "--rate", "8060", "--entities", "41", "--hot", "sensor-alpha-001=8000", "--duration", "2m",
    "--batching-window", "1",
    "--start", "2026-11-22T06:58:00Z", "--bucket", "1m", "--window", "10s", "--grace", "2s",
    "--cache-ttl", "5s", "--margin", "5s", "--split-threshold", "40", "--target-utilisation", "0.02",
    "--read-windows", "1m,1h", "--cross-window", "90s", "--layouts", "random:3,calculated,hybrid:4,adaptive:4",
]  # fmt: skip


def test_simulate_has_help(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["simulate", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "usage: tsctl simulate" in out and "--chart PATH" in out and "--json" in out


def test_the_table_names_every_layout_and_read(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run_cli(capsys, *SMALL)
    assert code == 0
    for label in ("random:3", "calculated:1", "hybrid:4", "adaptive:4"):
        assert f"\n{label} " in out
    assert "throttled key-s" in out and "read units" in out
    assert "sensor-alpha-001, last 1m" in out and "all entities, last 90s" in out
    assert "N/A" in out and "split 1 -> 3 partitions" in out


def test_json_and_chart(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    chart = tmp_path / "sim.png"
    code, out, _ = run_cli(capsys, *SMALL, "--json", "--chart", str(chart))
    assert code == 0
    document = json.loads(out)
    assert [layout["layout"] for layout in document["layouts"]] == [
        "random:3",
        "calculated:1",
        "hybrid:4",
        "adaptive:4",
    ]
    adaptive = document["layouts"][3]
    assert adaptive["changes"][0]["kind"] == "split" and adaptive["changes"][0]["to"] == 3
    assert {"hottest_wcu", "p99_wcu", "throttled_key_seconds", "imbalance"} <= set(adaptive["writes"])
    assert document["chart"] == str(chart)
    assert chart.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_defaults_are_the_seed_scenario_and_the_hot_key_functions_settings() -> None:
    args = build_parser().parse_args(["simulate"])
    workload, specs, adaptive, reads = build(args)
    # The window is the stack's (keydesign.Ingest's default, held equal to cdk.json's by tests/unit/tsctl)
    assert (workload.rate, workload.entities, workload.batching_window_s) == (50_000, 10_000, 10)
    assert sorted(workload.sample.measures) == ["pressure", "rh", "temp"]
    assert [(h.entity_id, h.rate) for h in workload.hot] == [("sensor-alpha-001", 2_000.0)]
    # In blocks of 10 s batches the hot sensor needs no suffixes, and the plan's N is 2 (~1,000 WCU/s)
    assert [s.label for s in specs] == ["random:1", "calculated:1", "hybrid:16", "hybrid:2", "adaptive:2"]
    # The detector's settings are the function's own defaults (its settings model), not restated here
    function = function_settings()
    assert adaptive.detector == function.detector
    assert (adaptive.grace_ms, adaptive.cache_ttl_ms, adaptive.margin_ms) == (
        function.window_grace_ms,
        function.shard_map_cache_ttl_ms,
        function.change_margin_ms,
    )
    assert adaptive.to_dict()["margin_s"] == 360 and adaptive.to_dict()["window_s"] == 60
    assert reads.entities == ("sensor-alpha-001",) and reads.cross_window_ms == 3_600_000


@pytest.mark.parametrize(
    ("extra", "field"),
    [
        (["--rate", "0"], "--rate"),
        (["--hot", "a=0"], "--hot"),
        (["--hot", "alpha"], "--hot"),
        (["--hot", "a=1@10m"], "--hot"),
        (["--hot", "a=fast"], "--hot"),
        (["--layouts", "sharded"], "--layouts"),
        (["--layouts", "hybrid:0"], "--layouts"),
        (["--duration", "forever"], "--duration"),
        (["--start", "yesterday"], "--start"),
        (["--split-threshold", "5000"], "--split-threshold"),
        (["--read-entity", "nobody"], "--read-entity"),
        (["--read-windows", "0s"], "--read-windows"),
        (["--read-windows", "1s", "--cross-window", "2s", "--start", "1970-01-01T00:00:00Z"], "--cross-window"),
        (["--utilisation", "2"], "--utilisation"),
        (["--bucket", "7m"], "--bucket"),
        (["--window", "7s"], "--window"),
        (["--batching-window", "301"], "--batching-window"),
    ],
)
def test_bad_input_exits_2_naming_the_field(capsys: pytest.CaptureFixture[str], extra: list[str], field: str) -> None:
    code, out, err = run_cli(capsys, "simulate", "--duration", "1s", *extra)
    assert code == 2 and out == ""
    assert err.startswith(f"tsctl simulate: {field}: ") and err.count("\n") == 1


def test_a_sample_reading_sets_the_shape_of_every_reading(capsys: pytest.CaptureFixture[str]) -> None:
    # Given one measure instead of three (and no timestamp: only the shape counts)
    reading = '{"entity_id": "sensor-alpha-001", "measures": {"temp": 21.5}}'
    code, out, _ = run_cli(capsys, *SMALL, "--reading", reading, "--json")
    one = json.loads(out)
    code_default, default_out, _ = run_cli(capsys, *SMALL, "--json")
    default = json.loads(default_out)
    # Then the run packs readings of that shape: smaller blocks, fewer write units
    assert code == code_default == 0
    assert one["workload"]["sample"]["measures"] == {"temp": 21.5}
    hybrid = [layout["writes"]["total_wcu"] for layout in (one["layouts"][2], default["layouts"][2])]
    assert hybrid[0] < hybrid[1]


def test_a_bad_sample_reading_names_the_option(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, err = run_cli(capsys, "simulate", "--reading", '{"entity_id": "a"}')
    assert code == 2 and err.startswith("tsctl simulate: --reading: measures: is required")


def test_a_fixed_shard_map_is_simulated_as_its_own_layout(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "map.json"
    path.write_text(
        json.dumps(
            {
                "version": 1,
                "bucket": "1m",
                "global": [{"effective_from": "1970-01-01T00:00:00Z", "shards": 4}],
                "entities": {"sensor-alpha-001": [{"effective_from": "2026-11-22T06:00:00Z", "shards": 3}]},
            }
        )
    )
    code, out, _ = run_cli(capsys, *SMALL, "--layouts", "hybrid:4", "--shard-map", str(path), "--json")
    layouts = {layout["layout"]: layout for layout in json.loads(out)["layouts"]}
    assert code == 0 and set(layouts) == {"hybrid:4", "hybrid:map"}
    reads = {r["read"]: r["partitions"] for r in layouts["hybrid:map"]["reads"]}
    assert reads["sensor-alpha-001, last 1m"] == 3  # its 3 sub-shards, from the map
    assert layouts["hybrid:map"]["writes"]["keys_written"] == 2 * (4 + 3)  # two 1-minute buckets

    bad = tmp_path / "bad.json"
    bad.write_text('{"version": 1, "bucket": "1m", "global": []}')
    code, _, err = run_cli(capsys, "simulate", "--duration", "1s", "--shard-map", str(bad))
    assert code == 2 and err.startswith("tsctl simulate: --shard-map: ")
