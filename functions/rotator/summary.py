"""What one run did (or, in a dry run, would do): the structured summary and its metrics.

The summary is the handler's return value and one structured log line. Each
list is a kind of change; a dry run fills the same lists with what it would
change, and says so in ``dry_run``. ``skipped`` holds everything left for a
later run, each with its reason; ``errors`` holds failed calls.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from aws_lambda_powertools import Metrics
from aws_lambda_powertools.metrics import MetricUnit

from keydesign import format_ts


@dataclass(frozen=True, slots=True)
class Skip:
    table: str
    reason: str


@dataclass(frozen=True, slots=True)
class Failure:
    table: str
    step: str
    code: str
    message: str


@dataclass(frozen=True, slots=True)
class DialDown:
    table: str
    write: tuple[int, int]
    read: tuple[int, int]


@dataclass(slots=True)
class RunSummary:
    now_ms: int
    dry_run: bool
    period: str
    current_table: str
    #: Consecutive periods, from the current one on, whose table is ACTIVE; None in a build run,
    #: which looks at the tables it was asked for only and so measures neither this nor ManagedTables.
    periods_ready: int | None = None
    #: Expired tables still there a day after their horizon (None in a build run, or with drops off).
    tables_overdue: int | None = None
    created: list[str] = field(default_factory=list)
    #: Tables DynamoDB was still CREATING when the run last described them (their setup waits).
    creating: list[str] = field(default_factory=list)
    configured: dict[str, list[str]] = field(default_factory=dict)
    dialled_down: list[DialDown] = field(default_factory=list)
    exports_started: list[str] = field(default_factory=list)
    exported: list[str] = field(default_factory=list)
    deleted: list[str] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    skipped: list[Skip] = field(default_factory=list)
    errors: list[Failure] = field(default_factory=list)
    #: Phase of every table of ours seen this run.
    phases: dict[str, str] = field(default_factory=dict)

    def configure(self, table: str, step: str) -> None:
        self.configured.setdefault(table, []).append(step)

    def skip(self, table: str, reason: str) -> None:
        self.skipped.append(Skip(table, reason))

    def fail(self, table: str, step: str, code: str, message: str) -> None:
        self.errors.append(Failure(table, step, code, message))

    @property
    def changes(self) -> int:
        """How many changes the run made (or would make)."""
        return (
            len(self.created)
            + sum(len(steps) for steps in self.configured.values())
            + len(self.dialled_down)
            + len(self.exports_started)
            + len(self.deleted)
            + len(self.removed)
        )

    def to_dict(self) -> dict[str, Any]:
        fields = asdict(self)
        return {"now": format_ts(fields.pop("now_ms")), **fields}

    def emit(self, metrics: Metrics) -> None:
        """Metrics of the run. A dry run changes nothing, so it counts only itself:
        its would-be changes must not show on the dashboards of real ones."""
        if self.dry_run:
            metrics.add_metric(name="RotationDryRuns", unit=MetricUnit.Count, value=1)
            return
        for name, value in (
            ("TablesCreated", len(self.created)),
            ("TablesConfigured", len(self.configured)),
            ("TablesDialledDown", len(self.dialled_down)),
            ("ExportsStarted", len(self.exports_started)),
            ("TablesDeleted", len(self.deleted)),
            ("StaleResourcesRemoved", len(self.removed)),
            ("RotationSkips", len(self.skipped)),
            ("RotationErrors", len(self.errors)),
        ):
            metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)
        if self.tables_overdue is not None:
            # Alarmed above 0: a table of ours that cannot be retired (tables pile up toward the quota).
            metrics.add_metric(name="TablesOverdue", unit=MetricUnit.Count, value=self.tables_overdue)
        if self.periods_ready is None:  # a build run: it measured neither
            return
        metrics.add_metric(name="ManagedTables", unit=MetricUnit.Count, value=len(self.phases))
        # Alarm on this below 2: the next period's table is not ready.
        metrics.add_metric(name="PeriodsReady", unit=MetricUnit.Count, value=self.periods_ready)
