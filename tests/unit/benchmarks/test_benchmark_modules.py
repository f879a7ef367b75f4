"""The benchmark modules' pure parts: environments, asset zips, importtime parsing, figure conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import before_blocks, cold_start, query_cpu, query_fanout, read_budget, rollups
from benchmarks.cold_start import HANDLERS, asset_files, handler_env, slowest_imports, zipped_size
from benchmarks.simulation import simulate
from doubles.lambda_context import FakeLambdaContext
from hotkeys.settings import HotKeySettings
from ingest.settings import IngestSettings
from query.settings import QuerySettings
from rollup.settings import RollupSettings
from rotator.settings import RotatorSettings


@pytest.mark.parametrize(
    ("name", "settings"),
    [
        ("ingest", IngestSettings),
        ("query", QuerySettings),
        ("hotkeys", HotKeySettings),
        ("rotator", RotatorSettings),
        ("rollup", RollupSettings),
    ],
)
def test_each_handler_gets_an_environment_its_settings_accept(name: str, settings: type) -> None:
    env = handler_env(name)
    settings.from_env(env)  # raises SettingsError naming the variable if the benchmark's env were wrong
    assert env["POWERTOOLS_SERVICE_NAME"] == name
    assert HANDLERS[name][0] == f"{name}.handler"


def test_the_asset_leaves_out_caches_and_tests(tmp_path: Path) -> None:
    for relative in ("pkg/__init__.py", "pkg/mod.py", "pkg/__pycache__/mod.cpython-311.pyc", "pkg/tests/test_x.py",
                     "pkg/stale.pyc", ".mypy_cache/x.json", "pkg/data.json"):  # fmt: skip
        path = tmp_path / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("x = 1\n" * 50)
    files = asset_files(tmp_path)
    assert [str(f.relative_to(tmp_path)) for f in files] == ["pkg/__init__.py", "pkg/data.json", "pkg/mod.py"]
    compressed, raw = zipped_size(tmp_path, files)
    assert raw == 3 * 300 and 0 < compressed < raw


def test_the_real_asset_holds_the_handlers_and_no_bytecode() -> None:
    names = {str(f.relative_to(cold_start.FUNCTIONS)) for f in asset_files(cold_start.FUNCTIONS)}
    assert {"ingest/handler.py", "query/handler.py", "hotkeys/handler.py", "rotator/handler.py"} <= names
    assert not any(n.endswith(".pyc") or "__pycache__" in n for n in names)


IMPORTTIME = """\
import time: self [us] | cumulative | imported package
import time:       100 |        100 |       botocore.compat
import time:       200 |        300 |     botocore
import time:      1000 |       1300 |   aws_xray_sdk.core
import time:        50 |       1350 | aws_lambda_powertools
import time:       400 |        400 |   boto3
import time:       500 |        900 | adapters.clients
import time:      3000 |       5250 | ingest.handler
"""


def test_importtime_is_attributed_to_packages_entered_from_outside() -> None:
    slowest = dict(slowest_imports(IMPORTTIME, count=10))
    assert slowest["ingest.handler body"] == 3.0
    assert slowest["aws_xray_sdk"] == 1.3 and slowest["boto3"] == 0.4
    assert slowest["botocore"] == 0.3  # entered from aws_xray_sdk; botocore.compat is inside it
    assert "adapters" not in slowest  # first-party: its time is the packages it imports
    assert max(slowest, key=lambda name: slowest[name]) == "ingest.handler body"


def test_query_fanout_figures_become_harness_figures() -> None:
    figures = {
        "latency_ms_per_query": 20.0,
        "page_size": 100,
        "repeats": 5,
        "cases": [
            {
                "shape": "entity_random",
                "partitions": 16,
                "parallel_ms": 24.0,
                "parallel_round_trips": 1.2,
                "queries_per_page": 16,
                "sequential_ms": 324.0,
                "sequential_round_trips": 16.2,
                "speedup": 13.5,
            }
        ],
    }
    result = query_fanout.to_result(figures)
    assert [(f.name, f.value, f.unit) for f in result.figures] == [
        ("entity_random, 16 partitions: parallel", 24.0, "ms/page"),
        ("entity_random, 16 partitions: sequential", 324.0, "ms/page"),
        ("entity_random, 16 partitions: speed-up", 13.5, "x"),
    ]
    assert "20 ms per Query call" in result.method and result.params["partitions"] == [16]


def test_the_read_budget_benchmark_measures_bounded_pages_against_unbounded_ones() -> None:
    figures = read_budget.run(latency_ms=1.0, quick=True)

    cases = {(case["case"], case["max_query_calls"]): case for case in figures["cases"] if not case["pruned"]}
    pruned = {case["case"]: case for case in figures["cases"] if case["pruned"]}
    capped, unbounded = cases[("range_1d", 200)], cases[("range_1d", read_budget.UNBOUNDED)]
    assert capped["first_page_queries"] == 200 and not capped["first_page_complete"]
    assert unbounded["first_page_queries"] == 2_400 and unbounded["first_page_complete"]
    # Followed to the end, the capped pages read every partition once and find the one reading
    assert (capped["walk_queries"], capped["walk_readings"]) == (2_400, 0)
    entity = cases[("entity_31d", 200)]
    assert (entity["walk_queries"], entity["walk_readings"]) == (744, 1)
    assert cases[("aggregate_31d", 200)]["answer"] == "413"
    # With occupancy records each read is one complete page of at most 50 calls, and the aggregate answers
    assert set(pruned) == {"range_1d", "range_31d", "entity_31d", "aggregate_31d"}
    for case in pruned.values():
        assert case["first_page_complete"] and case["first_page_queries"] <= 50, case
    assert (pruned["entity_31d"]["walk_pages"], pruned["entity_31d"]["walk_readings"]) == (1, 1)
    assert pruned["range_31d"]["walk_readings"] == 0
    names = [figure.name for figure in read_budget.to_result(figures).figures]
    assert "range_1d, cap 200: first page" in names and "entity_31d, unbounded: first page" in names
    assert "aggregate_31d, cap 200, occupancy: answer" in names
    # A day of one entity (an hour of data when quick): every reading returned, at a block's share of the units
    days = {(day["rate_per_s"], day["batch_s"]): day for day in figures["entity_day"]}
    assert set(days) == set(read_budget.DAY_CASES)
    for (rate, batch_s), day in days.items():
        assert day["readings"] == 3600 * rate and day["blocks"] == day["readings"] // (rate * batch_s)
        assert day["units_per_reading"] * day["readings"] == day["read_units"]
    assert days[10, 10]["units_per_reading"] < days[10, 1]["units_per_reading"] < days[1, 1]["units_per_reading"]
    assert "entity_day, 10/s in 1 s batches: read units per reading" in names
    # A seed 003 device (a tenth of its group when quick): both stores return its whole day; the write
    # tier's hour costs its group's items
    device = figures["device"]
    tier, blocks = device["write_tier"], device["blocks"]
    assert tier["day_readings"] == blocks["day_readings"] > 300
    assert tier["last_10_min_readings"] == blocks["last_10_min_readings"] >= 2
    assert tier["day"] > blocks["day"] and tier["latest"] > blocks["latest"]
    assert "device (seed 003), day, write tier: read units" in names
    # and with the hour's settled slices re-packed, the same readings for fewer units (its sub-group's)
    repacked = device["repacked"]
    assert repacked["day_readings"] == blocks["day_readings"] and repacked["day"] < tier["day"]
    assert "device (seed 003), day, repacked: read units" in names
    assert device["sub_items_written"] > 0 and 0 < device["sub_item_write_units_per_reading"] < 1
    # and with occupancy records, as the deployed reader has them, the device's empty block partitions
    # are not read: the same readings for fewer units still
    pruned = device["repacked_pruned"]
    assert pruned["day_readings"] == blocks["day_readings"] and pruned["day"] < repacked["day"]
    assert "day_blocks" not in pruned and repacked["day_blocks"] > 0
    assert "device (seed 003), day, repacked pruned: read units" in names
    # and as `tsctl plan` lays the issue's seed 003 out (daily tables, 1-day buckets): the same day, its
    # compacted hours one Query instead of 23
    planned = figures["device_planned"]
    assert planned["layout"] == {"table_period": "day", "bucket": "1d"} and planned["groups"] == 512
    assert planned["repacked_pruned"]["day_readings"] == planned["blocks_pruned"]["day_readings"] > 300
    assert planned["repacked_pruned"]["day_compacted"] <= 1.5 < pruned["day_compacted"]
    assert planned["one_item_day_floor"] > 0
    assert any(name.startswith("device (seed 003) as `tsctl plan` lays it out") for name in names)


def test_the_simulator_benchmark_simulates_the_seed_rate_under_every_default_layout() -> None:
    # Given two simulated seconds of the seed scenario (the benchmark runs 600 or 3,600)
    result = simulate(2)
    figures = {figure.name: figure.value for figure in result.figures}
    # Then about 50,000 readings a second were simulated, once for all five layouts side by side: the
    # seed article's N=16 and the planner's N, 2 in the stack's 10 s batches (about 1,000 WCU/s at 500 a key)
    assert figures["simulated readings"] == pytest.approx(2 * 50_000, rel=0.02)
    assert result.params["layouts"].split(", ") == ["random:1", "calculated:1", "hybrid:16", "hybrid:2", "adaptive:2"]


def test_the_rollups_benchmark_meets_the_issue_targets() -> None:
    figures = rollups.run(quick=True)
    writes, reads = figures["writes"], figures["reads"]
    # Rollups cost under 5% of the raw writes at the seed rate, and no key near 1,000 WCU/s
    assert writes["seed_overhead_percent"] <= 5
    assert writes["raw_items_reread_per_reading"] == 1.0
    assert writes["largest_burst_per_key_per_run"] < 1_000
    # (a) a day of sensor-alpha-001 at 1 minute reads at most 2,000 items; (b) seed 003 reads no raw item
    assert reads["a_alpha_24h_1m"]["rollups"]["items_read"] <= 2_000
    assert reads["a_alpha_24h_1m"]["raw"]["items_read"] == 172_800_000
    assert reads["b_every_sensor_7d_1h"]["source"] == "rollups"
    assert reads["b_every_sensor_7d_1h"]["rollups"]["items_read"] == 168
    # One run applies a busy minute in steps, one raw Query per entity-minute (its wall time is the figure)
    keep = figures["keep_up"]
    assert keep["raw_queries"] == keep["entities"] == 1_000 and keep["steps"] > 1


@pytest.mark.parametrize("per_block", [None, 14, query_cpu.CLUSTERED])
def test_the_wire_read_has_botocore_parse_every_item_of_a_page(per_block: int | None) -> None:
    # A real client's Query calls, answered by the before-send hook (none reaches the network: port 9 would
    # refuse them), parse every item of the page, or the benchmark refuses to give a figure
    assert before_blocks.wire_page(per_block, 1) > 0


def test_the_compacted_query_page_reads_the_devices_readings_from_its_cluster_blocks() -> None:
    # Given query-cpu's compacted shape: a device's readings in cluster blocks beside its cluster's 7 others
    app, event = query_cpu._api(query_cpu.CLUSTERED)
    # When its page is served
    answer = app.resolve(event, FakeLambdaContext(28_000, function_name="query"))  # type: ignore[arg-type]
    # Then it holds 1,000 of the device's readings, in time order, every one from the cluster blocks
    assert answer["statusCode"] == 200
    items = json.loads(answer["body"])["items"]
    assert len(items) == query_cpu.PAGE and {i["entity_id"] for i in items} == {"sensor-1"}
    assert [i["measures"]["v"] for i in items] == list(range(query_cpu.PAGE))
