"""The rotation run: make the tables match the clock, a step at a time, safely.

Every run looks at what exists and moves each table one step along its
lifecycle (:mod:`rotator.lifecycle`); it keeps no state of its own. So a run
can be repeated, can fail half-way, and can race another run: each step
checks before it acts, and the calls that can still collide are answered as
"already done" by the data-access layer.

One run, in order:

1. snapshot the hot-key function's stream mappings and the alarms with the
   table prefix. They are read *before* the tables, so anything in them was
   made for a table that the listing below will include (see ``_sweep``);
2. list the tables, keep those named exactly ``<prefix>-<period label>``;
3. create the tables that must exist and do not: the current period's, the
   next PREBUILD_PERIODS, and earlier ones still taking late readings;
4. walk every table of ours, most urgent first, and move it along: set up
   (TTL, PITR, stream, mapping, alarms, capacity) while writable; dial down
   once cold; export and drop once expired;
5. remove mappings and alarms whose table is gone.

What cannot be done now (a table still CREATING, the capacity-decrease budget
spent, DynamoDB's LimitExceededException, the run's time running out) is
skipped with its reason and done by a later run. A failed call is recorded
and the run goes on with the next step or table.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any, TypeVar

from aws_lambda_powertools.metrics import MetricUnit
from botocore.exceptions import ClientError

from adapters.clients import client
from adapters.observability import logger, metrics, tracer
from adapters.retry import Clock, Deadline
from keydesign import format_ts
from rotator.alarms import AlarmApi, CloudWatchAlarms, ExistingAlarm
from rotator.lifecycle import DeletionRefused, Lifecycle, PeriodTable, Phase, next_decrease_at
from rotator.settings import RotatorSettings
from rotator.specs import (
    ALARM_MARKER,
    STREAM_VIEW,
    TTL_ATTRIBUTE,
    alarm_names,
    alarm_requests,
    create_mapping_request,
    create_table_request,
    export_client_token,
    is_managed,
    mapping_drift,
    table_of_alarm,
)
from rotator.stream_mappings import LambdaMappings, MappingApi, StreamMapping
from rotator.summary import DialDown, RunSummary
from rotator.tables import DynamoTables, TableApi, TableState, error_code, error_message

T = TypeVar("T")

#: Control-plane errors that mean "not now": the step is left for a later run.
_LATER = {
    "LimitExceededException": "DynamoDB's limit on concurrent table operations was reached",
    "ResourceInUseException": "the resource is busy with another operation",
    "ResourceNotFoundException": "the resource is gone (dropped by a concurrent run or an operator)",
    "TooManyRequestsException": "the service throttled the call",
    "ThrottlingException": "the service throttled the call",
}
#: Table statuses in which UpdateTable and DeleteTable are refused.
_STEADY = "ACTIVE"


def wall_clock_ms() -> int:
    return int(time.time() * 1000)


class _Failed:
    """Returned by :meth:`_Run._call` when the call did not succeed (already recorded)."""


FAILED = _Failed()


class Rotator:
    """Runs rotations. Holds no per-run state, so one instance serves concurrent runs."""

    def __init__(
        self,
        *,
        settings: RotatorSettings,
        tables: TableApi,
        mappings: MappingApi | None = None,
        alarms: AlarmApi | None = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
        monotonic: Clock = time.monotonic,
    ) -> None:
        self.settings = settings
        self.lifecycle = Lifecycle(
            layout=settings.common.layout,
            period=settings.period,
            prebuild_periods=settings.prebuild_periods,
            grace_ms=settings.grace_ms,
            dial_down_delay_ms=settings.dial_down_delay_ms,
            retention_ms=settings.retention_ms,
        )
        self.tables = tables
        self.mappings = mappings if settings.mapping is not None else None
        self.alarms = alarms if settings.alarms is not None else None
        self._clock_ms = clock_ms
        self._monotonic = monotonic

    @classmethod
    def from_settings(
        cls,
        settings: RotatorSettings,
        *,
        dynamodb: Any = None,
        lambda_client: Any = None,
        cloudwatch: Any = None,
        clock_ms: Callable[[], int] = wall_clock_ms,
    ) -> Rotator:
        """Wire the data access on the given clients (a moto one, or one with fault
        hooks), or on the process-wide ones."""
        return cls(
            settings=settings,
            tables=DynamoTables(dynamodb if dynamodb is not None else client("dynamodb")),
            mappings=(
                LambdaMappings(lambda_client if lambda_client is not None else client("lambda"))
                if settings.mapping is not None
                else None
            ),
            alarms=(
                CloudWatchAlarms(cloudwatch if cloudwatch is not None else client("cloudwatch"))
                if settings.alarms is not None
                else None
            ),
            clock_ms=clock_ms,
        )

    def now_ms(self) -> int:
        return self._clock_ms()

    @tracer.capture_method(capture_response=False)
    def run(self, *, now_ms: int | None = None, dry_run: bool = False, budget_ms: float | None = None) -> RunSummary:
        """One rotation at ``now_ms`` (default: the clock). ``budget_ms`` is the time the
        run may take; work left when it runs out is skipped for the next run."""
        now = self.now_ms() if now_ms is None else now_ms
        deadline = (
            Deadline.never(self._monotonic)
            if budget_ms is None
            else Deadline.after_ms(budget_ms - self.settings.deadline_margin_ms, self._monotonic)
        )
        summary = _Run(self, now, dry_run or self.settings.dry_run, deadline).execute()
        summary.emit(metrics, MetricUnit.Count)
        logger.info(
            "rotation dry run" if summary.dry_run else "rotation run",
            extra={"rotation": summary.to_dict(), "notes": list(self.settings.notes)},
        )
        return summary


@dataclass(slots=True)
class _Run:
    rotator: Rotator
    now: int
    dry_run: bool
    deadline: Deadline
    summary: RunSummary = field(init=False)
    #: Set by LimitExceededException: no more table operations this run.
    saturated: bool = False
    deletes: int = 0
    mappings: dict[str, list[StreamMapping]] | None = None
    alarms: dict[str, ExistingAlarm] | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    #: Tables this run sent an UpdateTable to: a second one would find them UPDATING.
    updating: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        lifecycle = self.rotator.lifecycle
        self.summary = RunSummary(
            now_ms=self.now,
            dry_run=self.dry_run,
            period=lifecycle.period.name,
            current_table=lifecycle.table(self.now).name,
        )

    @property
    def settings(self) -> RotatorSettings:
        return self.rotator.settings

    @property
    def lifecycle(self) -> Lifecycle:
        return self.rotator.lifecycle

    # -- the run --------------------------------------------------------------

    def execute(self) -> RunSummary:
        self._snapshot()
        # Without the listing nothing can be decided: let the invocation fail, visibly.
        names = self.rotator.tables.list_names()
        ours: dict[str, PeriodTable] = {}
        head = f"{self.settings.table_prefix}-"
        for name in names:
            table = self.lifecycle.parse(name)
            if table is not None:
                ours[name] = table
            elif name.startswith(head):
                self.summary.skip(name, "not ours: the name is not exactly <prefix>-<period label>; left alone")
        wanted = self.lifecycle.wanted(self.now)
        for table in wanted:
            if table.name not in ours and self._create(table):
                ours[table.name] = table
        for table in sorted(ours.values(), key=partial(self._urgency, {t.name: i for i, t in enumerate(wanted)})):
            self._guarded(table.name, "tend", partial(self._tend, table))
        self._sweep(set(names) | set(ours))
        self.summary.periods_ready = self._periods_ready()
        return self.summary

    def _urgency(self, wanted: dict[str, int], table: PeriodTable) -> tuple[int, int]:
        """Order of work: the wanted tables as :meth:`Lifecycle.wanted` ranks them,
        then the others newest first, except expired ones, oldest first (the
        per-run deletion cap then drops the oldest)."""
        if table.name in wanted:
            return (0, wanted[table.name])
        if self.lifecycle.phase(table, self.now) is Phase.EXPIRED:
            return (2, table.start_ms)
        return (1, -table.start_ms)

    def _snapshot(self) -> None:
        """Read the mappings and alarms once, before the tables (see the module docstring)."""
        mappings = self.rotator.mappings
        mapping_settings = self.settings.mapping
        if mappings is not None and mapping_settings is not None:
            found = self._call("*", "list_event_source_mappings", lambda: mappings.list(mapping_settings.function_arn))
            if not isinstance(found, _Failed):
                self.mappings = {}
                for mapping in found:
                    if mapping.table is not None:
                        self.mappings.setdefault(mapping.table, []).append(mapping)
        alarms = self.rotator.alarms
        if alarms is not None:
            listed = self._call("*", "describe_alarms", lambda: alarms.list(f"{self.settings.table_prefix}-"))
            if not isinstance(listed, _Failed):
                self.alarms = listed

    def _periods_ready(self) -> int:
        ready = 0
        table = self.lifecycle.table(self.now)
        for _ in range(self.settings.prebuild_periods + 1):
            if self.statuses.get(table.name) != _STEADY:
                break
            ready += 1
            table = self.lifecycle.table(table.end_ms)
        return ready

    # -- calls ----------------------------------------------------------------

    def _call(self, table: str, step: str, call: Callable[[], T]) -> T | _Failed:
        """Make one AWS call; record why it failed and return FAILED if it did."""
        try:
            return call()
        except ClientError as exc:
            code = error_code(exc)
            if code == "LimitExceededException":
                self.saturated = True
            if code in _LATER:
                then = "" if code == "ResourceNotFoundException" else "; retried next run"
                self.summary.skip(table, f"{step}: {_LATER[code]} ({code}){then}")
            else:
                self.summary.fail(table, step, code, error_message(exc))
                logger.warning("rotation step failed", extra={"table": table, "step": step, "code": code})
            return FAILED

    def _guarded(self, table: str, step: str, work: Callable[[], object]) -> None:
        """Do one table's work; a bug there is recorded and does not stop the others."""
        if self.deadline.expired():
            self.summary.skip(table, "the run's time ran out; next run")
            return
        try:
            work()
        except Exception as exc:  # isolate one table's failure from the rest
            logger.exception("rotation step raised", extra={"table": table, "step": step})
            self.summary.fail(table, step, type(exc).__name__, str(exc))

    def _table_operation_allowed(self, table: str, step: str) -> bool:
        """CreateTable, UpdateTable and DeleteTable count against one account-wide
        limit; after LimitExceededException none is tried again this run."""
        if self.saturated:
            self.summary.skip(table, f"{step}: deferred, DynamoDB's table-operation limit was reached this run")
            return False
        return True

    # -- creating ---------------------------------------------------------------

    def _create(self, table: PeriodTable) -> bool:
        """Create a wanted table; True when it now exists (made here or by another run)."""
        if self.deadline.expired():
            self.summary.skip(table.name, "the run's time ran out before creating it; next run")
            return False
        if not self._table_operation_allowed(table.name, "create_table"):
            return False
        if self.dry_run:
            self.summary.created.append(table.name)
            return False
        request = create_table_request(self.settings, table)
        state = self._call(table.name, "create_table", partial(self.rotator.tables.create, request))
        if isinstance(state, _Failed):
            return False
        if state is not None:
            self.summary.created.append(table.name)
        # Created here or by a concurrent run (None): either way it exists, tend it below.
        return True

    # -- tending ------------------------------------------------------------------

    def _tend(self, table: PeriodTable) -> None:
        phase = self.lifecycle.phase(table, self.now)
        self.summary.phases[table.name] = phase.value
        state = self._call(table.name, "describe_table", partial(self.rotator.tables.describe, table.name))
        if isinstance(state, _Failed):
            return
        if state is None:
            self.summary.skip(table.name, "gone: deleted while this run was looking")
            return
        self.statuses[table.name] = state.status
        if state.status == "CREATING":
            self.summary.skip(table.name, "CREATING: its setup is finished by the first run that finds it ACTIVE")
            return
        if state.status not in (_STEADY, "UPDATING"):
            self.summary.skip(table.name, f"status {state.status}: left alone")
            return
        if phase is Phase.EXPIRED:
            self._retire(table, state)
            return
        self._drop_stale_mappings(table, state)
        if phase.writable:
            self._set_up(table, state, phase)
        else:
            self._keep_alarms(table)
            self._dial_down(table, state)

    def _set_up(self, table: PeriodTable, state: TableState, phase: Phase) -> None:
        """Finish a writable table's setup: stream, TTL, PITR, capacity, mapping, alarms."""
        tables = self.rotator.tables
        if state.stream_arn is None:
            stream = {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW}}
            if self._update(table, state, "stream", stream):
                self.summary.configure(table.name, "stream")
        ttl = self._call(table.name, "describe_time_to_live", partial(tables.ttl, table.name))
        if not isinstance(ttl, _Failed):
            status, attribute = ttl
            if status == "DISABLED":
                if self._do(table.name, "update_time_to_live", partial(tables.enable_ttl, table.name, TTL_ATTRIBUTE)):
                    self.summary.configure(table.name, "ttl")
            elif attribute != TTL_ATTRIBUTE:
                self.summary.skip(table.name, f"TTL is {status} on {attribute!r}, not {TTL_ATTRIBUTE!r}; left alone")
        if self.settings.point_in_time_recovery:
            enabled = self._call(table.name, "describe_continuous_backups", partial(tables.pitr_enabled, table.name))
            if enabled is False and self._do(
                table.name, "update_continuous_backups", partial(tables.enable_pitr, table.name)
            ):
                self.summary.configure(table.name, "point_in_time_recovery")
        if phase in (Phase.UPCOMING, Phase.CURRENT):
            self._raise_capacity(table, state)
        self._keep_mapping(table, state)
        self._keep_alarms(table)

    def _raise_capacity(self, table: PeriodTable, state: TableState) -> None:
        """Bring an upcoming or current table up to the configured capacity (never down:
        an operator may have raised it for a reason, and increases are unlimited)."""
        capacity = self.settings.capacity
        if state.provisioned and capacity.write_capacity is not None:
            write = max(state.write_units, capacity.write_capacity)
            read = max(state.read_units, capacity.read_capacity)
            throughput = {"ReadCapacityUnits": read, "WriteCapacityUnits": write}
            if (write, read) != (state.write_units, state.read_units) and self._update(
                table, state, "capacity_raised", {"ProvisionedThroughput": throughput}
            ):
                self.summary.configure(table.name, "capacity_raised")
        elif not state.provisioned and capacity.warm_writes_per_s is not None:
            warm = {"WarmThroughput": {"WriteUnitsPerSecond": capacity.warm_writes_per_s}}
            if (state.warm_write_units or 0) < capacity.warm_writes_per_s and self._update(
                table, state, "warm_throughput", warm
            ):
                self.summary.configure(table.name, "warm_throughput")

    def _update(self, table: PeriodTable, state: TableState, step: str, changes: dict[str, Any]) -> bool:
        """One UpdateTable, if the table can take it now. True when done (or, dry, would be)."""
        if state.status != _STEADY or table.name in self.updating:
            self.summary.skip(table.name, f"{step}: the table is UPDATING; next run")
            return False
        if not self._table_operation_allowed(table.name, step):
            return False
        done = self._do(table.name, f"update_table ({step})", partial(self.rotator.tables.update, table.name, changes))
        if done:
            self.updating.add(table.name)
        return done

    def _do(self, table: str, step: str, call: Callable[[], object]) -> bool:
        """A change: made, or in a dry run only pretended. True when made (or pretended)."""
        return self.dry_run or not isinstance(self._call(table, step, call), _Failed)

    # -- stream mappings ------------------------------------------------------------

    def _keep_mapping(self, table: PeriodTable, state: TableState) -> None:
        mapping = self.settings.mapping
        api = self.rotator.mappings
        if mapping is None or api is None or self.mappings is None or state.stream_arn is None:
            return
        stream_arn = state.stream_arn
        current = [m for m in self.mappings.get(table.name, []) if m.source_arn == stream_arn]
        if not current:
            request = create_mapping_request(mapping, stream_arn)
            if self.dry_run:
                self.summary.configure(table.name, "stream_mapping")
                return
            created = self._call(table.name, "create_event_source_mapping", partial(api.create, request))
            # None: a concurrent run made it a moment ago, which is as good, but not this run's change.
            if created is not None and not isinstance(created, _Failed):
                self.summary.configure(table.name, "stream_mapping")
            return
        for existing in current:
            changes = mapping_drift(mapping, existing.config)
            if not changes:
                continue
            if existing.state not in ("Enabled", "Disabled"):
                self.summary.skip(table.name, f"stream mapping {existing.uuid} is {existing.state}; updated next run")
                continue
            if self._do(table.name, "update_event_source_mapping", partial(api.update, existing.uuid, changes)):
                self.summary.configure(table.name, "stream_mapping_updated")

    def _drop_stale_mappings(self, table: PeriodTable, state: TableState) -> None:
        """A mapping from an older stream of this table name (the table was dropped
        and made again, or its stream re-enabled) feeds nothing: remove it."""
        if self.mappings is None:
            return
        for mapping in self.mappings.get(table.name, []):
            if mapping.source_arn != state.stream_arn:
                self._remove_mapping(table.name, mapping)

    def _remove_mapping(self, table: str, mapping: StreamMapping) -> bool:
        api = self.rotator.mappings
        if api is None:
            return False
        if mapping.state == "Deleting":
            return True
        if not self._do(table, "delete_event_source_mapping", partial(api.delete, mapping.uuid)):
            return False
        self.summary.removed.append(f"stream mapping {mapping.uuid} ({table})")
        return True

    # -- alarms -------------------------------------------------------------------

    def _keep_alarms(self, table: PeriodTable) -> None:
        api = self.rotator.alarms
        if api is None or self.alarms is None:
            return
        stale = [
            request
            for request in alarm_requests(self.settings, table)
            if (existing := self.alarms.get(request["AlarmName"])) is None
            or existing.description != request["AlarmDescription"]
        ]
        if not stale:
            return
        put = [self._do(table.name, "put_metric_alarm", partial(api.put, request)) for request in stale]
        if any(put):
            self.summary.configure(table.name, "alarms")

    def _remove_alarms(self, table: str, names: list[str]) -> bool:
        api = self.rotator.alarms
        if api is None or not names:
            return True
        if not self._do(table, "delete_alarms", partial(api.delete, names)):
            return False
        self.summary.removed.extend(f"alarm {name}" for name in names)
        return True

    # -- cold tables --------------------------------------------------------------

    def _dial_down(self, table: PeriodTable, state: TableState) -> None:
        """Write capacity to the minimum, read capacity to what old data needs."""
        if not state.provisioned:
            return  # on-demand: nothing is paid for idle capacity
        capacity = self.settings.capacity
        write, read = capacity.min_write_capacity, capacity.old_read_capacity
        if (state.write_units, state.read_units) == (write, read):
            return
        if write < state.write_units or read < state.read_units:
            allowed_at = next_decrease_at(state.decreases_today, state.last_decrease_ms, self.now)
            if allowed_at is not None:
                self.summary.skip(
                    table.name,
                    f"dial-down: DynamoDB's capacity-decrease budget is spent ({state.decreases_today} today); "
                    f"next allowed at {format_ts(allowed_at)}",
                )
                return
        if not self._ours(table, state, "dial-down"):
            return
        throughput = {"ReadCapacityUnits": read, "WriteCapacityUnits": write}
        if self._update(table, state, "dial-down", {"ProvisionedThroughput": throughput}):
            self.summary.dialled_down.append(DialDown(table.name, (state.write_units, write), (state.read_units, read)))

    def _ours(self, table: PeriodTable, state: TableState, step: str) -> bool:
        """Only tables this rotator created are dialled down or dropped: their tags say so."""
        tags = self._call(table.name, "list_tags_of_resource", partial(self.rotator.tables.tags, state.arn))
        if isinstance(tags, _Failed):
            return False
        if not is_managed(tags, self.settings):
            self.summary.skip(
                table.name,
                f"{step}: not created by this rotator (tags timeseries:managed-by / timeseries:table-prefix "
                "missing); left alone",
            )
            return False
        return True

    # -- expired tables -------------------------------------------------------------

    def _retire(self, table: PeriodTable, state: TableState) -> None:
        """Export (if configured), then remove the mapping, the alarms and the table."""
        if not self._ours(table, state, "drop"):
            return
        try:
            self.lifecycle.check_deletable(table, self.now)
        except DeletionRefused as refused:
            self.summary.fail(table.name, "delete_table", "DeletionRefused", refused.reason)
            return
        if self.settings.export is not None and not self._exported(table, state):
            return
        if self.deletes >= self.settings.max_deletes_per_run:
            self.summary.skip(
                table.name, f"drop: MAX_DELETES_PER_RUN ({self.settings.max_deletes_per_run}) reached; next run"
            )
            return
        if state.status != _STEADY:
            self.summary.skip(table.name, f"drop: the table is {state.status}; next run")
            return
        # Checked before the mapping and alarms go: they stay until the table can go with them.
        if not self._table_operation_allowed(table.name, "delete_table"):
            return
        if self.mappings is not None and not all(
            [self._remove_mapping(table.name, m) for m in self.mappings.get(table.name, [])]
        ):
            return
        if self.alarms is not None and not self._remove_alarms(
            table.name, [name for name in alarm_names(table.name) if name in self.alarms]
        ):
            return
        tables = self.rotator.tables
        unprotect = partial(tables.update, table.name, {"DeletionProtectionEnabled": False})
        if state.deletion_protection and not self._do(table.name, "update_table", unprotect):
            return
        # The guard again, right before the one call that cannot be undone.
        self.lifecycle.check_deletable(table, self.now)
        if not self._do(table.name, "delete_table", partial(tables.delete, table.name)):
            return
        self.deletes += 1
        self.summary.deleted.append(table.name)

    def _exported(self, table: PeriodTable, state: TableState) -> bool:
        """True once an export of ours has COMPLETED; otherwise start or wait for one."""
        export = self.settings.export
        if export is None:
            return True
        tables = self.rotator.tables
        prefix = export.prefix_for(table.name)
        listed = self._call(table.name, "list_exports", partial(tables.exports, state.arn))
        if isinstance(listed, _Failed):
            return False
        ours = [e for e in listed if e.bucket == export.bucket and e.prefix == prefix]
        if any(e.status == "COMPLETED" for e in ours):
            self.summary.exported.append(table.name)
            return True
        if any(e.status == "IN_PROGRESS" for e in ours):
            self.summary.skip(
                table.name, f"export to s3://{export.bucket}/{prefix} in progress; dropped once it completes"
            )
            return False
        failed = [e for e in ours if e.status == "FAILED"]
        if failed:
            self.summary.fail(
                table.name, "export", "ExportFailed", f"{len(failed)} export(s) failed, the last: {failed[-1].failure}"
            )
        if self.dry_run:
            self.summary.exports_started.append(table.name)
            return False
        request: dict[str, Any] = {
            "TableArn": state.arn,
            "S3Bucket": export.bucket,
            "S3Prefix": prefix,
            "ExportFormat": "DYNAMODB_JSON",
            "ClientToken": export_client_token(state.arn, export.bucket, prefix, len(failed)),
        }
        if export.bucket_owner:
            request["S3BucketOwner"] = export.bucket_owner
        try:
            tables.start_export(request)
        except ClientError as exc:
            code = error_code(exc)
            if code == "PointInTimeRecoveryUnavailableException":
                # Exports read the PITR backup. Turn it on; the export starts on a later run.
                if self._do(table.name, "update_continuous_backups", partial(tables.enable_pitr, table.name)):
                    self.summary.configure(table.name, "point_in_time_recovery")
                    self.summary.skip(table.name, "export: point-in-time recovery was off; enabled, export next run")
            elif code == "ExportConflictException":
                self.summary.skip(table.name, "export: another export of this table is running; next run")
            else:
                self.summary.fail(table.name, "export_table_to_point_in_time", code, error_message(exc))
            return False
        self.summary.exports_started.append(table.name)
        return False

    # -- orphans ----------------------------------------------------------------------

    def _sweep(self, existing: set[str]) -> None:
        """Remove mappings and alarms of ours whose table no longer exists.

        The snapshot was taken before the listing, so a mapping or alarm in it
        was made after its table was, hence before the listing: a table missing
        from the listing was dropped, not "too new to be listed".
        """
        if self.mappings is not None:
            for name, mappings in self.mappings.items():
                if name not in existing and self.lifecycle.parse(name) is not None:
                    for mapping in mappings:
                        self._guarded(name, "sweep", partial(self._remove_mapping, name, mapping))
        if self.alarms is not None:
            orphans: dict[str, list[str]] = {}
            for alarm in self.alarms.values():
                table = table_of_alarm(alarm.name)
                if (
                    table is not None
                    and table not in existing
                    and self.lifecycle.parse(table) is not None
                    and alarm.description.startswith(ALARM_MARKER)
                ):
                    orphans.setdefault(table, []).append(alarm.name)
            for table, names in orphans.items():
                self._guarded(table, "sweep", partial(self._remove_alarms, table, names))
