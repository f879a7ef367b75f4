"""``tsctl serve``: starts, prints the endpoints, stops."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from local_runtime.environment import assert_loopback
from tsctl.cli import main

pytestmark = pytest.mark.integration


def test_serve_prints_loopback_endpoints_and_stops(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = tmp_path / "functions.log"
    argv = ["serve", "--stop-after", "0", "--json", "--function-log", str(log), "--context", "table_period=null"]
    assert main(argv) == 0
    endpoints = json.loads(capsys.readouterr().out)
    assert_loopback(endpoints["endpoint_url"])
    assert endpoints["stream_name"] == "TimeSeriesIngest-readings"
    assert endpoints["readings_tables"] == ["timeseries-readings"]
    assert endpoints["control_table"] == "timeseries-control"
    assert_loopback(endpoints["api_url"])
    assert endpoints["functions"] == [
        "TimeSeriesIngest-ingest",
        "TimeSeriesIngest-query",
        "TimeSeriesIngest-hotkeys",
        "TimeSeriesIngest-rollup",
        "TimeSeriesIngest-compaction",
    ]
    assert "AWS_ENDPOINT_URL" not in os.environ or os.environ["AWS_ENDPOINT_URL"] != endpoints["endpoint_url"]


def test_serve_starts_the_default_shape_with_the_rotators_tables_and_schedule(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Given the shipped defaults: hourly tables
    assert main(["serve", "--stop-after", "0", "--function-log", str(tmp_path / "f.log")]) == 0
    out = capsys.readouterr().out
    # Then the rotator ran at start: this hour's table and the next two, each with its phase
    assert out.count("(current)") == 1 and out.count("(upcoming)") == 2
    assert "every 15 min of the real clock (hour tables, 2 built ahead, kept 30d)" in out
    assert "TimeSeriesIngest-rotator" in out
    # And rollups on their schedule, with a route that reads them alone
    assert "1m,1h,1d, every 60 s of the real clock: a minute is applied 125 s after it ends" in out
    assert "TimeSeriesIngest-rollup" in out and 'curl "$API/aggregates?from=' in out


def test_serve_shows_how_to_use_it(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        [
            "serve",
            "--stop-after",
            "0",
            "--function-log",
            str(tmp_path / "f.log"),
            "--context",
            "table_period=day",
            "--context",
            "bucket=15m",
            "--faults",
            "invoke_errors=0.1",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "AWS endpoint (moto)" in out and "http://127.0.0.1:" in out
    assert "python -m tsctl publish --endpoint-url http://127.0.0.1:" in out
    assert "python -m tsctl rejects list --endpoint-url http://127.0.0.1:" in out
    assert "python -m tsctl query latest --api-url http://127.0.0.1:" in out
    assert "10% of invocations fail" in out
    assert out.count("timeseries-readings-") >= 3  # the current day's table and the next two
    # And the query API's URL with curl commands that need no signature, and the rotator's schedule
    assert "REST API" in out and "/v1   (no SigV4 locally" in out
    assert 'curl "$API/entities/sensor-alpha-001/readings?from=' in out
    assert "every 60 min of the real clock (day tables, 2 built ahead" in out
    assert "TimeSeriesIngest-rotator" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--faults", "throttle"], "--faults"),
        (["--context", "no_such_key=1"], "no_such_key"),
        (["--context", "novalue"], "--context"),
    ],
)
def test_bad_input_exits_2_naming_it(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code: object
    try:
        code = main(["serve", "--stop-after", "0", *argv])
    except SystemExit as exited:  # an option's type refuses it while the arguments are parsed
        code = exited.code
    assert code == 2
    assert message in capsys.readouterr().err
