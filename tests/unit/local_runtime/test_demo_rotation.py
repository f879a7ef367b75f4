"""The demo's rotation section, fed by hand: each table's steps, the checks, the picture."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from keydesign import Layout, format_ts, parse_timestamp
from local_runtime.demo_rotation import RotationFacts, draw_table_writes, rotation_section, table_writes

LAYOUT = Layout.from_settings(kind="hybrid", bucket="1m", table_prefix="r", table_period="hour")
HOUR = 3_600_000
T0 = parse_timestamp("2026-11-23T10:00:00Z", "t")
RETENTION = 4 * HOUR


def item(ts: int, event: str) -> dict[str, Any]:
    return {"pk": "0001#x", "t": format_ts(ts), "e": "s-1", "i": event}


def table(hour: int) -> str:
    return LAYOUT.table_for(T0 + hour * HOUR)


def runs() -> list[dict[str, Any]]:
    """Hour 0's table: prebuilt at -1, dialled down at 3, exported at 5, dropped at 5:15."""
    return [
        {"now_ms": T0 - HOUR, "summary": {"created": [table(-1), table(0), table(1)], "periods_ready": 3}},
        {
            "now_ms": T0 + 3 * HOUR,
            "summary": {"dialled_down": [{"table": table(0), "write": [3572, 1], "read": [100, 10]}]},
        },
        {"now_ms": T0 + 5 * HOUR, "summary": {"exports_started": [table(0)], "phases": {table(0): "expired"}}},
        {
            "now_ms": T0 + 5 * HOUR + 900_000,
            "summary": {"exported": [table(0)], "deleted": [table(0)], "periods_ready": 3},
        },
    ]


def facts(**overrides: Any) -> RotationFacts:
    base: dict[str, Any] = {
        "layout": LAYOUT,
        "retention_ms": RETENTION,
        "prebuild_periods": 2,
        "runs": runs(),
        "failures": 0,
        "every_s": 900.0,
        "clock": {"replayed_hours": 6},
        "tables_now": {table(1): {"billing": "PROVISIONED", "write_units": 3572}},
        "stored_by_table": {table(1): [item(T0 + HOUR + 5, "b")]},
        "exported_by_table": {table(0): [item(T0 + 5, "a")]},
        "export_bucket": "exports",
        "refused": {"table": table(0), "event_ids": ["old-1"]},
        "rejects": [{"field": "timestamp", "reason": "too old", "payload": json.dumps({"event_id": "old-1"})}],
    }
    return RotationFacts(**{**base, **overrides})


def steps(section: Mapping[str, Any], name: str) -> list[str]:
    return [s["step"] for t in section["tables"] if t["table"] == name for s in t["steps"]]


def test_each_tables_life_is_told_in_order_and_every_check_passes() -> None:
    section, checks = rotation_section(facts())
    assert checks == dict.fromkeys(checks, True)
    assert steps(section, table(0)) == [
        "prebuilt",
        "dialled down: write 3,572 -> 1 WCU, read 100 -> 10 RCU",
        "phase: expired",
        "export started",
        "export completed",
        "dropped",
    ]
    # Hour -1's table was current when created: "created", not "prebuilt"
    assert steps(section, table(-1)) == ["created"]
    life = section["lifecycle"]
    assert (life["prebuilt"], life["dropped"], life["exported"]) == ([table(0), table(1)], [table(0)], [table(0)])
    dropped = next(t for t in section["tables"] if t["table"] == table(0))
    assert (dropped["state"], dropped["readings_in_its_export"]) == ("dropped", 1)
    assert section["refused_for_a_dropped_period"]["reasons"] == [{"reason": "timestamp: too old", "count": 1}]


def test_a_reading_in_another_hours_table_or_a_missing_step_fails_its_check() -> None:
    misplaced = facts(stored_by_table={table(1): [item(T0 + 5, "wrong")]})
    assert rotation_section(misplaced)[1]["every_reading_in_its_periods_table"] is False
    no_export = facts(exported_by_table={})
    assert rotation_section(no_export)[1]["rotator_exported_each_table_before_dropping_it"] is False
    early = runs()
    early[3]["now_ms"] = T0 + 4 * HOUR  # before hour 0 ended plus retention (5:00)
    assert rotation_section(facts(runs=early))[1]["rotator_dropped_a_table_past_retention"] is False
    not_refused = facts(rejects=[])
    assert rotation_section(not_refused)[1]["ingest_refused_readings_of_a_dropped_period"] is False
    single_table = facts(stored_by_table={}, exported_by_table={table(0): [item(T0 + 5, "a")]})
    assert rotation_section(single_table)[1]["readings_landed_in_two_or_more_period_tables"] is False


def test_the_picture_counts_readings_per_table_and_marks_the_rotators_steps(tmp_path: Path) -> None:
    chart = table_writes(
        {table(0): [item(T0 + 5, "a"), item(T0 + 6, "b")], table(1): [item(T0 + HOUR, "c")]}, runs=runs()
    )
    assert chart is not None
    assert chart.as_dict()["tables"] == [{"table": table(0), "readings": 2}, {"table": table(1), "readings": 1}]
    assert [(name, what) for name, _, what in chart.marks] == [(table(0), "dialled down"), (table(0), "dropped")]
    path = draw_table_writes(chart, tmp_path / "t.png", title="t")
    assert path.read_bytes()[:4] == b"\x89PNG"
    assert table_writes({}) is None
