"""The demo's rotation section, fed by hand: each table's life as the rotator's summaries tell it, the checks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from demo.report import Block, draw_tables, newest_copies, rotation_section
from infra.config import Context
from keydesign import Reading, parse_timestamp

CONFIG = Context.parse(
    {"table_period": "hour", "bucket": "1m", "retention": "4h", "dial_down_delay": "15m", "export_bucket": "exports"}
)
LAYOUT = CONFIG.layout()
HOUR = 3_600_000
T0 = parse_timestamp("2026-11-23T10:00:00Z", "t")


def table(hour: int) -> str:
    return LAYOUT.table_for(T0 + hour * HOUR)


def reading(ts: int, event: str) -> Reading:
    return Reading.parse({"entity_id": "s-1", "event_id": event, "timestamp": ts, "measures": {"t": 1.0}})


def runs() -> list[dict[str, Any]]:
    """Hour 0's table: prebuilt at -1, current, closed by a step the rotator names, expired, exported, dropped."""
    return [
        {
            "now_ms": T0 - HOUR,
            "summary": {
                "created": [table(-1), table(0), table(1)],
                "phases": {table(0): "upcoming"},
                "periods_ready": 3,
            },
        },
        {"now_ms": T0 + 5, "summary": {"phases": {table(0): "current"}}},
        {"now_ms": T0 + 3 * HOUR, "summary": {"closed": [{"table": table(0), "billing": "PAY_PER_REQUEST"}]}},
        {"now_ms": T0 + 5 * HOUR, "summary": {"exports_started": [table(0)], "phases": {table(0): "expired"}}},
        {
            "now_ms": T0 + 5 * HOUR + 900_000,
            "summary": {"exported": [table(0)], "deleted": [table(0)], "periods_ready": 3},
        },
    ]


def stored(*readings: tuple[str, Reading]) -> dict[Any, Any]:
    return newest_copies([Block(name, "0001#x", 1, 100, 1, (r,)) for name, r in readings])


def rotation(runs: list[dict[str, Any]], failures: int = 0, refused: str = "old-1", **more: Any) -> dict[str, Any]:
    """What the demo observed of the rotator: its runs, failed runs, and the readings published for hour 0."""
    return {"runs": runs, "failures": failures, "refused": {"table": table(0), "event_ids": [refused]}, **more}


def section(
    facts: dict[str, Any] | None = None, live: dict[Any, Any] | None = None, exported: Mapping[str, Any] | None = None
) -> tuple[dict[str, Any], dict[str, bool]]:
    rejects = [{"field": "timestamp", "reason": "too old", "payload": json.dumps({"event_id": "old-1"})}]
    return rotation_section(
        facts or rotation(runs(), capacity={table(1): {"billing": "PAY_PER_REQUEST"}}),
        CONFIG,
        stored((table(1), reading(T0 + HOUR + 5, "b"))) if live is None else live,
        {table(0): [reading(T0 + 5, "a")]} if exported is None else exported,
        rejects,
    )


def steps(result: Mapping[str, Any], name: str) -> list[str]:
    return [s["step"] for t in result["tables"] if t["table"] == name for s in t["steps"]]


def test_each_tables_life_is_what_the_rotator_said_in_order_and_every_check_passes() -> None:
    result, checks = section()
    assert checks == dict.fromkeys(checks, True)
    assert steps(result, table(0)) == [
        "prebuilt",
        "phase: upcoming",
        "phase: current",
        "closed: billing PAY_PER_REQUEST",
        "exports_started",
        "phase: expired",
        "exported",
        "deleted",
    ]
    # Hour -1's table was current when created: "created", not "prebuilt"
    assert steps(result, table(-1)) == ["created"]
    life = result["lifecycle"]
    assert (life["prebuilt"], life["dropped"], life["exported"]) == ([table(0), table(1)], [table(0)], [table(0)])
    dropped = next(t for t in result["tables"] if t["table"] == table(0))
    assert (dropped["state"], dropped["readings_in_its_export"]) == ("dropped", 1)
    assert result["refused_for_a_dropped_period"]["reasons"] == [{"reason": "timestamp: too old", "count": 1}]


def test_a_reading_in_another_hours_table_or_a_missing_step_fails_its_check() -> None:
    assert section(live=stored((table(1), reading(T0 + 5, "wrong"))))[1]["every_reading_in_its_periods_table"] is False
    assert section(exported={})[1]["rotator_exported_each_table_before_dropping_it"] is False
    early = runs()
    early[4]["now_ms"] = T0 + 4 * HOUR  # before hour 0 ended plus retention (5:00)
    assert section(rotation(early))[1]["rotator_dropped_a_table_past_retention"] is False
    assert section(rotation(runs(), refused="old-2"))[1]["ingest_refused_readings_of_a_dropped_period"] is False
    assert section(live={})[1]["readings_landed_in_two_or_more_period_tables"] is False
    assert section(rotation(runs(), failures=1))[1]["rotator_runs_without_errors"] is False
    unphased = [{**r, "summary": {k: v for k, v in r["summary"].items() if k != "phases"}} for r in runs()]
    assert section(rotation(unphased))[1]["rotator_took_a_table_through_its_phases_to_its_drop"] is False


def test_the_picture_counts_readings_per_table_and_marks_the_drops(tmp_path: Path) -> None:
    # Given two readings in hour 0's table (one only in its export) and one in hour 1's
    tables = {table(0): [reading(T0 + 5, "a"), reading(T0 + 6, "b")], table(1): [reading(T0 + HOUR, "c")]}
    # When the picture is drawn, with the drop of hour 0's table marked
    drawn = draw_tables(tables, rotation(runs(), clock={"caught_up_after_s": 1.0}), tmp_path / "t.png")
    # Then it counts each table's readings from the first 5 minutes of event time
    assert drawn["tables"] == [{"table": table(0), "readings": 2}, {"table": table(1), "readings": 1}]
    assert (drawn["origin"], drawn["slice_minutes"]) == ("2026-11-23T10:00:00.000Z", 5)
    assert (tmp_path / "t.png").read_bytes()[:4] == b"\x89PNG"
    assert draw_tables({table(0): []}, rotation(runs()), tmp_path / "none.png") == {}
