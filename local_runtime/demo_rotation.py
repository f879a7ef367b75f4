"""The demo's rotation: what became of each per-period table, and which one took the writes.

Pure (no AWS calls; the unit tests feed it by hand). :func:`rotation_section`
puts together the rotator's own run summaries (each run's ``created``,
``configured``, ``dialled_down``, ``exports_started``, ``exported``,
``deleted`` and the phase of every table) with what the demo saw from the
outside: the readings a scan found in each live table, the readings read back
from the S3 export of each dropped table, the tables' capacity at the end, and
the rejects ingest sent for readings of a dropped period. Its checks say that
the card's lifecycle happened: tables built ahead, a closed one dialled down,
an expired one exported and dropped, every reading in its period's table, and
ingest refusing a reading whose table is gone. :func:`draw_table_writes`
draws which table took the writes over (event) time.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from keydesign import Layout, format_ts, parse_timestamp
from local_runtime.load_chart import png

#: Slices of event time the picture counts readings in.
SLICE_MS = 5 * 60_000


@dataclass(frozen=True, slots=True)
class RotationFacts:
    """What the demo observed of the rotation."""

    layout: Layout
    retention_ms: int
    prebuild_periods: int
    #: Every run that returned, in order: ``{"now_ms": ..., "summary": <the rotator's summary dict>}``.
    runs: Sequence[Mapping[str, Any]]
    failures: int
    every_s: float
    #: The replayed clock: ``{"replayed_from_ms", "speed", "caught_up_after_s"}``.
    clock: Mapping[str, Any]
    #: The live tables at the end: name -> {"billing", "write_units", "read_units", "warm_write_units"}.
    tables_now: Mapping[str, Mapping[str, Any]]
    #: Readings (deserialised items) a scan found in each live table, and read back from each dropped
    #: table's export.
    stored_by_table: Mapping[str, Sequence[Mapping[str, Any]]]
    exported_by_table: Mapping[str, Sequence[Mapping[str, Any]]]
    export_bucket: str | None = None
    #: Readings published for a dropped period: ``{"table", "event_ids"}``; rejects as ingest sent them.
    refused: Mapping[str, Any] = field(default_factory=dict)
    rejects: Sequence[Mapping[str, Any]] = ()


def rotation_section(facts: RotationFacts) -> tuple[dict[str, Any], dict[str, bool]]:
    """The report's ``rotation`` section, and its checks."""
    starts = _period_starts(facts)
    history = _History(starts)
    for run in facts.runs:
        history.add(int(run["now_ms"]), run.get("summary") or {})
    tables, prebuilt, phases, errors = history.tables, history.prebuilt, history.phases, history.errors
    entry = history.entry
    dropped = [name for name, phase in phases.items() if phase == "dropped"]
    dialled = sorted({d["table"] for run in facts.runs for d in (run.get("summary") or {}).get("dialled_down", [])})
    exported = sorted({n for run in facts.runs for n in (run.get("summary") or {}).get("exported", [])})
    misplaced: list[dict[str, str]] = []
    for name in sorted(set(facts.stored_by_table) | set(facts.exported_by_table) | set(phases)):
        row = entry(name)
        row["state"] = phases.get(name, "not seen by the rotator")
        stored = facts.stored_by_table.get(name, ())
        from_export = facts.exported_by_table.get(name, ())
        row["readings_stored"] = len(stored)
        if name in dropped:
            row["readings_in_its_export"] = len(from_export)
        if name in facts.tables_now:
            row["capacity"] = dict(facts.tables_now[name])
        for item in (*stored, *from_export):
            expected = facts.layout.table_for(parse_timestamp(str(item["t"]), "t"))
            if expected != name and len(misplaced) < 5:
                misplaced.append({"table": name, "event_id": str(item.get("i")), "belongs_in": expected})
    with_readings = [n for n in tables if facts.stored_by_table.get(n) or facts.exported_by_table.get(n)]
    last = (facts.runs[-1].get("summary") or {}) if facts.runs else {}
    refused = _refused(facts)
    ordered = sorted(tables.values(), key=lambda t: (t["period_start"] or "", t["table"]))

    checks = _checks(
        facts,
        starts=starts,
        with_readings=with_readings,
        prebuilt=prebuilt,
        dialled=dialled,
        exported=exported,
        dropped=dropped,
        misplaced=misplaced,
        last=last,
        errors=errors,
    )
    checks["ingest_refused_readings_of_a_dropped_period"] = (
        refused["published"] > 0 and refused["rejected"] == refused["published"]
    )
    section = {
        "status": "run",
        "period": facts.layout.table_period.name if facts.layout.table_period else None,
        "schedule": f"every {facts.every_s / 60:g} min of the rotator's clock",
        "clock": dict(facts.clock),
        "runs": len(facts.runs),
        "failures": facts.failures,
        "export_bucket": facts.export_bucket,
        "lifecycle": {
            "tables": len(tables),
            "with_readings": len(with_readings),
            "prebuilt": prebuilt,
            "dialled_down": dialled,
            "exported": exported,
            "dropped": dropped,
            "periods_ready_at_the_end": last.get("periods_ready"),
        },
        "tables": ordered,
        "misplaced_examples": misplaced,
        "refused_for_a_dropped_period": refused,
        "errors": errors[:20],
        "last_run": dict(last),
    }
    return section, checks


class _History:
    """Each table's steps, as the rotator's run summaries tell them, in order."""

    def __init__(self, starts: Mapping[str, int]) -> None:
        self.starts = starts
        self.tables: dict[str, dict[str, Any]] = {}
        self.prebuilt: list[str] = []
        self.phases: dict[str, str] = {}
        self.errors: list[Mapping[str, Any]] = []

    def entry(self, name: str) -> dict[str, Any]:
        if name not in self.tables:
            start = self.starts.get(name)
            self.tables[name] = {
                "table": name,
                "period_start": format_ts(start) if start is not None else None,
                "steps": [],
                "state": None,
            }
        return self.tables[name]

    def step(self, name: str, at: str, step: str) -> None:
        self.entry(name)["steps"].append({"at": at, "step": step})

    def add(self, now_ms: int, summary: Mapping[str, Any]) -> None:
        at = format_ts(now_ms)
        self.errors.extend({"at": at, **e} for e in summary.get("errors", []))
        for name in summary.get("created", []):
            start = self.starts.get(name)
            ahead = start is not None and start > now_ms
            if ahead:
                self.prebuilt.append(name)
            self.step(name, at, "prebuilt" if ahead else "created")
        for name, steps in summary.get("configured", {}).items():
            self.step(name, at, "set up: " + ", ".join(steps))
        for name, phase in summary.get("phases", {}).items():
            if self.phases.get(name) != phase:
                self.step(name, at, f"phase: {phase}")
                self.phases[name] = phase
        for dial in summary.get("dialled_down", []):
            (w0, w1), (r0, r1) = dial["write"], dial["read"]
            self.step(dial["table"], at, f"dialled down: write {w0:,} -> {w1:,} WCU, read {r0:,} -> {r1:,} RCU")
        for name in summary.get("exports_started", []):
            self.step(name, at, "export started")
        for name in summary.get("exported", []):
            self.step(name, at, "export completed")
        for name in summary.get("deleted", []):
            self.step(name, at, "dropped")
            self.phases[name] = "dropped"


def _checks(
    facts: RotationFacts,
    *,
    starts: Mapping[str, int],
    with_readings: Sequence[str],
    prebuilt: Sequence[str],
    dialled: Sequence[str],
    exported: Sequence[str],
    dropped: Sequence[str],
    misplaced: Sequence[Mapping[str, str]],
    last: Mapping[str, Any],
    errors: Sequence[Mapping[str, Any]],
) -> dict[str, bool]:
    return {
        "readings_landed_in_two_or_more_period_tables": len(with_readings) >= 2,
        "every_reading_in_its_periods_table": not misplaced,
        "rotator_prebuilt_the_next_tables": bool(prebuilt)
        and int(last.get("periods_ready", 0)) >= 1 + facts.prebuild_periods,
        "rotator_dialled_down_a_closed_table": bool(dialled),
        "rotator_dropped_a_table_past_retention": bool(dropped) and _dropped_after_retention(facts, starts, dropped),
        "rotator_exported_each_table_before_dropping_it": facts.export_bucket is None
        or all(name in exported and name in facts.exported_by_table for name in dropped),
        "rotator_runs_without_errors": not errors and facts.failures == 0,
    }


def _period_starts(facts: RotationFacts) -> dict[str, int]:
    """Table name -> its period's start, for every period from the replay's start (less the grace and
    retention any table then alive could have) to a few periods past the last run."""
    period = facts.layout.table_period
    if period is None or not facts.runs:
        return {}
    times = [int(r["now_ms"]) for r in facts.runs]
    low = min(times) - facts.retention_ms - 2 * period.nominal_ms
    high = max(times) + (facts.prebuild_periods + 2) * period.nominal_ms * 2
    return {facts.layout.table_for(start): start for start in period.starts(low, high)}


def _dropped_after_retention(facts: RotationFacts, starts: Mapping[str, int], dropped: Iterable[str]) -> bool:
    """Each dropped table went only once its period's end plus RETENTION had passed."""
    period = facts.layout.table_period
    assert period is not None  # noqa: S101 - only called with runs of a rotator
    when: dict[str, int] = {}
    for run in facts.runs:
        for name in (run.get("summary") or {}).get("deleted", []):
            when.setdefault(name, int(run["now_ms"]))
    return all(
        name in starts and when.get(name, 0) >= period.next_start(starts[name]) + facts.retention_ms for name in dropped
    )


def _refused(facts: RotationFacts) -> dict[str, Any]:
    wanted = set(facts.refused.get("event_ids", ()))
    reasons: Counter[str] = Counter()
    seen: set[str] = set()
    for message in facts.rejects:
        event_id = _event_id(message)
        if event_id is not None and event_id in wanted and event_id not in seen:
            seen.add(event_id)
            reasons[f"{message.get('field')}: {message.get('reason')}"] += 1
    return {
        "table": facts.refused.get("table"),
        "published": len(wanted),
        "rejected": len(seen),
        "reasons": [{"reason": reason, "count": count} for reason, count in reasons.most_common()],
    }


def _event_id(message: Mapping[str, Any]) -> str | None:
    payload = message.get("payload")
    if not isinstance(payload, str):
        return None
    try:
        value = json.loads(payload)
    except ValueError:
        return None
    return str(value.get("event_id")) if isinstance(value, dict) and "event_id" in value else None


# -- the picture ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class TableWrites:
    """Readings per slice of event time, per table; ``origin_ms`` is the first slice's start."""

    origin_ms: int
    slice_ms: int
    slices: int
    series: list[tuple[str, list[int]]]
    caught_up_ms: int | None
    marks: list[tuple[str, int, str]]

    def as_dict(self) -> dict[str, Any]:
        return {
            "origin": format_ts(self.origin_ms),
            "slice_minutes": self.slice_ms // 60_000,
            "tables": [{"table": name, "readings": sum(values)} for name, values in self.series],
        }


def table_writes(
    by_table: Mapping[str, Iterable[Mapping[str, Any]]],
    *,
    runs: Sequence[Mapping[str, Any]] = (),
    caught_up_ms: int | None = None,
    slice_ms: int = SLICE_MS,
) -> TableWrites | None:
    """Readings per ``slice_ms`` of event time in each table (live or read back from its export), and
    the rotator's dial-downs and drops as marks. None when no table holds a reading."""
    counts: dict[str, Counter[int]] = {}
    for name, items in by_table.items():
        slices = Counter(parse_timestamp(str(i["t"]), "t") // slice_ms for i in items)
        if slices:
            counts[name] = slices
    if not counts:
        return None
    first = min(min(c) for c in counts.values())
    last = max(max(c) for c in counts.values())
    width = last - first + 1
    series = [(name, [counts[name].get(first + n, 0) for n in range(width)]) for name in sorted(counts)]
    marks: list[tuple[str, int, str]] = []
    for run in runs:
        summary = run.get("summary") or {}
        for dial in summary.get("dialled_down", []):
            marks.append((dial["table"], int(run["now_ms"]), "dialled down"))
        for name in summary.get("deleted", []):
            marks.append((name, int(run["now_ms"]), "dropped"))
    return TableWrites(
        origin_ms=first * slice_ms,
        slice_ms=slice_ms,
        slices=width,
        series=series,
        caught_up_ms=caught_up_ms,
        marks=marks,
    )


def draw_table_writes(chart: TableWrites, path: Path, *, title: str) -> Path:
    """Stacked bars of readings per slice, one colour per table; the rotator's dial-downs and drops as
    marks along the top, the moment the replayed clock met the wall clock as a line."""
    import matplotlib  # noqa: PLC0415 - only the demo draws

    hours = [(chart.origin_ms + n * chart.slice_ms - chart.origin_ms) / 3_600_000 for n in range(chart.slices)]
    bar = chart.slice_ms / 3_600_000
    with png(
        path, title=title, legend={"loc": "upper left", "fontsize": 7, "title": "table", "title_fontsize": 8}
    ) as axes:
        colours = matplotlib.colormaps["tab10"]
        bottom = [0] * chart.slices
        colour_of: dict[str, Any] = {}
        for index, (name, values) in enumerate(chart.series):
            colour_of[name] = colours(index % 10)
            axes.bar(hours, values, width=bar, bottom=bottom, align="edge", color=colour_of[name], label=name)
            bottom = [b + v for b, v in zip(bottom, values, strict=True)]
        axes.set_yscale("symlog", linthresh=10)
        top = max(bottom, default=1) * 2
        for name, at_ms, what in chart.marks:
            x = (at_ms - chart.origin_ms) / 3_600_000
            axes.scatter([x], [top], marker="v" if what == "dialled down" else "x", color=colour_of.get(name, "0.3"))
        axes.scatter([], [], marker="v", color="0.3", label="rotator: dialled down")
        axes.scatter([], [], marker="x", color="0.3", label="rotator: dropped (after its export)")
        if chart.caught_up_ms is not None:
            axes.axvline(
                (chart.caught_up_ms - chart.origin_ms) / 3_600_000,
                color="black",
                linewidth=1,
                linestyle="--",
                label="replayed clock meets the wall clock",
            )
        axes.set_xlabel(f"event time, hours since {format_ts(chart.origin_ms)}")
        axes.set_ylabel(f"readings per {chart.slice_ms // 60_000} min (log scale)")
    return path
