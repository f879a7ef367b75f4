"""A small demo, end to end, with and without faults: nothing lost, nothing duplicated, all accounted for."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from local_runtime import LocalFaults
from local_runtime.demo import HOT_SENSOR, NOT_RUN, DemoOptions, render, run_demo

pytestmark = pytest.mark.integration

FAULTS = "throttle=2,rate=0.05,partial=3,partial_rate=0.2,fraction=0.5,invoke_errors=0.2,seed=5"


@pytest.mark.parametrize("faults", ["", FAULTS], ids=["no-faults", "faults"])
def test_a_small_demo_accounts_for_every_reading(faults: str, tmp_path: Path) -> None:
    # Given a small scenario: 300 sensors at 400 readings/s, the hot sensor at 300/s, for 4 s of event time
    options = DemoOptions(
        sensors=300,
        base_rate=400,
        hot_rate=300,
        duration_s=4,
        invalid_readings=10,
        garbage_records=2,
        faults=LocalFaults.parse(faults),
        out_dir=tmp_path,
        context={"ingest_batch_size": 10, "ingest_batching_window_s": 0},
    )
    progress = io.StringIO()
    # When the demo runs
    report = run_demo(options, progress=progress)
    # Then every reading is written or rejected, none twice
    readings = report["readings"]
    assert readings == {
        "published": 400 * 4 + 300 * 4 + 10 + 2,
        "failed_to_publish": 0,
        "written": 400 * 4 + 300 * 4,
        "rejected": 12,
        "lost": 0,
        "duplicates": 0,
        "stream_drained": True,
    }
    assert report["ok"] is True
    by_reason = {r["field"]: r["count"] for r in report["rejected_by_reason"]}
    assert by_reason == {"timestamp": 4, "measures.temp": 2, "entity_id": 2, "colour": 2, "data": 2}
    # And the hot sensor's partition carries its load (about 300 WCU/s plus its share of the rest)
    load = report["partition_load"]
    assert load["hot_sensor_peak_wcu_per_s"] >= 300
    assert load["hottest_key"] in load["hot_sensor_keys"]
    # And the steps of components not wired yet say so
    for name in ("hot_keys", "shard_map_changes", "queries"):
        assert report[name]["status"] == NOT_RUN
    # And with faults, they really happened
    runtime = report["runtime"]
    if faults:
        assert runtime["invocation_errors_injected"] > 0
        assert runtime["write_faults"][0]["throttled"] >= 2
    # And the same report is on disk, progress went to the progress stream, and the summary says OK
    assert json.loads((tmp_path / "report.json").read_text()) == report
    assert "[demo] published" in progress.getvalue()
    assert render(report).endswith("OK")
    assert (tmp_path / "functions.log").exists()
    assert HOT_SENSOR in json.dumps(report["scenario"])
