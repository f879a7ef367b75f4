"""The benchmark harness: its registry, its runner and the results file. Nothing here is timed."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks import harness
from benchmarks.harness import Benchmark, Result, command_for, main, registered


def fake(quick: bool) -> Result:
    result = Result(params={"quick": quick}, method="returns fixed figures")
    result.add("widgets per second", 12_345.0, "widgets/s", "counted")
    result.add("ratio", 2.5, "x")
    return result


FAKE = {"fake": Benchmark("fake", "a benchmark that measures nothing", fake)}


def test_every_benchmark_of_the_issue_is_registered() -> None:
    assert set(registered()) == {
        "before-blocks",
        "blocks",
        "ingest-cpu",
        "ingest-e2e-moto",
        "ingest-network",
        "query-fanout",
        "read-budget",
        "cold-start",
        "simulator",
        "rollups",
        "moto-query",
        "query-cpu",
        "tracing",
        "pack-names",
        "write-tier",
        "write-tier-ingest",
        "write-tier-rollups",
        "write-tier-repack",
        "compaction",
        "compaction-clusters",
        "ingest-agents",
    }
    assert all(b.description for b in registered().values())


def test_a_name_is_registered_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(harness, "_REGISTRY", {})
    harness.benchmark("twice", "first")(fake)
    with pytest.raises(ValueError, match="registered twice"):
        harness.benchmark("twice", "second")(fake)


def test_results_carry_figures_method_command_and_machine(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "bench" / "results.json"
    assert main(["fake", "--quick", "--out", str(out)], available=FAKE) == 0
    document = json.loads(out.read_text())
    assert document["quick"] is True
    assert document["command"] == f"python -m benchmarks fake --quick --out {out}"
    assert {"cpus", "cpu", "python", "implementation", "system"} <= set(document["machine"])
    entry = document["benchmarks"]["fake"]
    assert entry["method"] == "returns fixed figures"
    assert entry["command"] == command_for("fake", True) == "python -m benchmarks fake --quick"
    assert entry["params"] == {"quick": True}
    assert entry["figures"]["widgets per second"] == {"value": 12_345.0, "unit": "widgets/s", "note": "counted"}
    printed = capsys.readouterr().out
    assert "widgets per second" in printed and "12,345" in printed and "2.50" in printed
    assert document["machine"]["cpu"] in printed.splitlines()[0]


def test_list_and_unknown_names(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list"], available=FAKE) == 0
    assert "a benchmark that measures nothing" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exc:
        main(["nope", "--out", str(tmp_path / "r.json")], available=FAKE)
    assert exc.value.code == 2
    assert not (tmp_path / "r.json").exists()
