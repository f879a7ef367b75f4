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
4. look at the tables that can need something now, most urgent first: every
   open one (set up: stream, TTL, PITR, Contributor Insights, capacity,
   mapping, alarms); a closed one in the period after it closed (on-demand,
   Contributor Insights off) and on its class-review day (Standard-IA); a
   few more closed ones in turn, to catch what those windows missed; and
   the oldest expired ones (export, drop). Every other closed table needs
   nothing and is not described, so the work of a run does not grow with the
   number of tables (hundreds with hourly ones);
5. decide the table class of the closed tables reviewed (one CloudWatch call);
6. remove the mappings and alarms of every table that is not open (closed,
   expired, or gone).

A *build* run (:meth:`Rotator.build`, asked by ingest) does only steps 3 and 4
for the tables it names: those a reading up to MAX_AGE old has no table for.

What cannot be done now (a table still CREATING, DynamoDB's
LimitExceededException, the run's time running out) is skipped with its
reason and done by a later run. A failed call is recorded and the run goes on
with the next step or table.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from functools import partial
from typing import Any, TypeVar, cast

from botocore.exceptions import ClientError

from adapters.clients import client, error_code, error_message
from adapters.observability import logger, metrics
from adapters.retry import Clock, Deadline, Sleep
from keydesign import format_ts
from keydesign.periods import table_head
from rotator.cloudwatch import DELETE_BATCH, CloudWatch
from rotator.lifecycle import CLASS_REVIEW_AFTER_MS, HOUR_MS, DeletionRefused, Lifecycle, PeriodTable, Phase
from rotator.settings import DEADLINE_MARGIN_MS, RotatorSettings
from rotator.specs import (
    ALARM_MARKER,
    STREAM_VIEW,
    TTL_ATTRIBUTE,
    alarm_requests,
    create_mapping_request,
    create_table_request,
    export_client_token,
    insights_mode,
    is_managed,
    mapping_drift,
    table_of_alarm,
)
from rotator.stream_mappings import LambdaMappings, StreamMapping, table_of_stream
from rotator.summary import DialDown, RunSummary
from rotator.table_class import storage_dominates
from rotator.tables import (
    INFREQUENT_ACCESS,
    STANDARD,
    DynamoTables,
    InsightsMode,
    TableState,
)

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
#: Closed tables looked at again each run, in turn, beyond those whose step is due: they catch
#: what a due window missed (the rotator stopped, the table operation limit). With 720 closed
#: tables each is seen again within 720 / 12 = 60 hours.
AUDITED_PER_RUN = 12
#: Expired tables looked at per run (oldest first), at least MAX_DELETES_PER_RUN; overdue ones (that
#: something keeps from being retired) are not among them but looked at in turn, OVERDUE_PER_RUN a run.
EXPIRED_PER_RUN = 10
OVERDUE_PER_RUN = 2
#: Exports of a table a run looks at (one ListExports page): ours are at most EXPORT_ATTEMPTS.
EXPORTS_LOOKED_AT = 10
#: Failed exports of a table after which the rotator stops starting new ones (reported every time it looks).
EXPORT_ATTEMPTS = 3
#: A build run describes a table DynamoDB is still CREATING this often, until it is ACTIVE or the run's
#: time (at most CREATING_WAIT_S) is up: an empty table is usually ACTIVE within a minute.
CREATING_POLL_S = 5.0
CREATING_WAIT_S = 300.0
#: Stale mappings deleted per run (one call each) and stale alarms (100 per call).
MAPPING_DELETES_PER_RUN = 25
ALARM_DELETES_PER_RUN = 5 * DELETE_BATCH


class _Failed:
    """Returned by :meth:`_Run._call` when the call did not succeed (already recorded)."""


FAILED = _Failed()


class Rotator:
    """Runs rotations. Holds no per-run state, so one instance serves concurrent runs.

    The data access is wired on the given clients (a moto one, or one with fault hooks),
    or on the process-wide ones."""

    def __init__(
        self,
        settings: RotatorSettings,
        *,
        dynamodb: Any = None,
        lambda_client: Any = None,
        cloudwatch: Any = None,
        clock_ms: Callable[[], int] = lambda: time.time_ns() // 1_000_000,
        monotonic: Clock = time.monotonic,
        sleep: Sleep = time.sleep,
    ) -> None:
        self.settings = settings
        self.lifecycle = Lifecycle.from_settings(settings)
        self.tables = DynamoTables(dynamodb or client("dynamodb"))
        self.mappings = (
            LambdaMappings(lambda_client or client("lambda")) if settings.hotkeys_function_arn is not None else None
        )
        self.cloudwatch = CloudWatch(cloudwatch or client("cloudwatch"))
        self._clock_ms = clock_ms
        self._monotonic = monotonic
        self.sleep = sleep

    def run(self, *, now_ms: int | None = None, dry_run: bool = False, budget_ms: float | None = None) -> RunSummary:
        """One rotation at ``now_ms`` (default: the clock). ``budget_ms`` is the time the
        run may take; work left when it runs out is skipped for the next run."""
        summary = self._start(now_ms, dry_run, budget_ms).execute()
        return self._report(summary, "rotation dry run", "rotation run", notes=list(self.settings.notes))

    def build(
        self, names: Sequence[str], *, now_ms: int | None = None, dry_run: bool = False, budget_ms: float | None = None
    ) -> RunSummary:
        """Create and set up the tables ``names``, each only if it is ours and a reading of its period
        can still be admitted (up to MAX_AGE old, no later than the periods built ahead). No listing,
        no other table: a few calls a table. Ingest asks for this when a late reading has no table."""
        summary = self._start(now_ms, dry_run, budget_ms).build(names)
        return self._report(summary, "table build dry run", "table build", asked=list(names))

    def _start(self, now_ms: int | None, dry_run: bool, budget_ms: float | None) -> _Run:
        """A run at ``now_ms`` (default: the clock) whose deadline is ``budget_ms`` (the invocation's
        time left) less DEADLINE_MARGIN_MS."""
        deadline = (
            Deadline.never(self._monotonic)
            if budget_ms is None
            else Deadline.after_ms(budget_ms - DEADLINE_MARGIN_MS, self._monotonic)
        )
        now = self._clock_ms() if now_ms is None else now_ms
        return _Run(self, now, dry_run or self.settings.dry_run, deadline)

    @staticmethod
    def _report(summary: RunSummary, dry: str, live: str, **extra: list[str]) -> RunSummary:
        summary.emit(metrics)
        logger.info(dry if summary.dry_run else live, extra={"rotation": summary.to_dict(), **extra})
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
    #: The description of each alarm with the table prefix, by name.
    alarms: dict[str, str] | None = None
    statuses: dict[str, str] = field(default_factory=dict)
    #: Tables this run sent an UpdateTable to: a second one would find them UPDATING.
    updating: set[str] = field(default_factory=set)
    #: Whether each table looked at carries this rotator's ownership tags (read once a run, when needed).
    owned: dict[str, bool] = field(default_factory=dict)
    #: Existing tables of ours that are open: the only ones that keep a mapping and alarms.
    open_tables: set[str] = field(default_factory=set)
    #: Closed Standard tables due for their table-class decision.
    class_candidates: list[tuple[PeriodTable, TableState]] = field(default_factory=list)
    #: Mapping UUIDs and alarm names removed this run (the snapshot still lists them).
    removed: set[str] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.summary = RunSummary(
            now_ms=self.now,
            dry_run=self.dry_run,
            period=self.lifecycle.period.name,
            current_table=self.lifecycle.table(self.now).name,
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
        head = table_head(self.settings.table_prefix)
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
        for table in ours.values():
            phase = self.lifecycle.phase(table, self.now)
            self.summary.phases[table.name] = phase.value
            if phase.open:
                self.open_tables.add(table.name)
        for table in self._due(ours, wanted):
            self._guarded(table.name, "tend", partial(self._tend, table))
        if self.class_candidates:
            self._guarded("*", "table_class", self._review_classes)
        self._sweep()
        self.summary.periods_ready = self._periods_ready()
        return self.summary

    def build(self, names: Sequence[str]) -> RunSummary:
        lifecycle = self.lifecycle
        oldest = lifecycle.period.start(self.now - self.settings.max_age_ms)
        newest = lifecycle.period.start(self.now)
        for _ in range(self.settings.prebuild_periods):
            newest = lifecycle.period.next_start(newest)
        for name in names:
            table = lifecycle.parse(name)
            if table is None:
                self.summary.skip(name, "not ours: the name is not exactly <prefix>-<period label>; not built")
                continue
            if not oldest <= table.start_ms <= newest:
                self.summary.skip(
                    name,
                    "no reading of its period can be admitted now (older than MAX_AGE, or past the periods "
                    "built ahead); not built",
                )
                continue
            phase = lifecycle.phase(table, self.now)
            self.summary.phases[name] = phase.value
            if phase.open:
                self.open_tables.add(name)
            if self._create(table):
                self._guarded(name, "tend", partial(self._tend, table, wait=True))
        return self.summary

    def _due(self, ours: Mapping[str, PeriodTable], wanted: list[PeriodTable]) -> list[PeriodTable]:
        """The tables this run looks at, most urgent first (see the module docstring).

        Open tables in the order :meth:`Lifecycle.wanted` ranks them; closed tables whose
        step falls due now, newest first; :data:`AUDITED_PER_RUN` other closed tables in
        turn; then the oldest expired tables (the per-run deletion cap drops the oldest).
        """
        rank = {t.name: i for i, t in enumerate(wanted)}
        open_: list[PeriodTable] = []
        due: list[PeriodTable] = []
        idle: list[PeriodTable] = []
        expired: list[PeriodTable] = []
        overdue: list[PeriodTable] = []
        reviews = self.settings.infrequent_access_storage_percent is not None
        exports = self.settings.export_bucket is not None
        for table in ours.values():
            phase = self.lifecycle.phase(table, self.now)
            if phase.open:
                open_.append(table)
            elif phase is Phase.EXPIRED:
                (overdue if self.lifecycle.overdue(table, self.now) else expired).append(table)
            elif (
                self.lifecycle.closing(table, self.now)
                or (reviews and self.lifecycle.class_review_due(table, self.now))
                or (exports and self.lifecycle.export_due(table, self.now))
            ):
                due.append(table)
            else:
                idle.append(table)
        open_.sort(key=lambda t: (rank.get(t.name, len(rank)), -t.start_ms))
        due.sort(key=lambda t: -t.start_ms)
        idle.sort(key=lambda t: t.start_ms)
        # In turn: the slice moves on every hour, so every closed table comes round.
        first = (self.now // HOUR_MS * AUDITED_PER_RUN) % len(idle) if idle else 0
        audited = [idle[(first + i) % len(idle)] for i in range(min(AUDITED_PER_RUN, len(idle)))]
        expired.sort(key=lambda t: t.start_ms)
        most = max(EXPIRED_PER_RUN, self.settings.max_deletes_per_run)
        if len(expired) > most:
            self.summary.skip("*", f"{len(expired) - most} more expired tables: looked at by the next runs")
        # What cannot be retired must not hold the slice for good: overdue tables are looked at in turn.
        overdue.sort(key=lambda t: t.start_ms)
        first = (self.now // HOUR_MS * OVERDUE_PER_RUN) % len(overdue) if overdue else 0
        turn = [overdue[(first + i) % len(overdue)] for i in range(min(OVERDUE_PER_RUN, len(overdue)))]
        if self.settings.max_deletes_per_run > 0:  # with drops off, every expired table is left by design
            self.summary.tables_overdue = len(overdue)
        return open_ + due + audited + expired[:most] + turn

    def _snapshot(self) -> None:
        """Read the mappings and alarms once, before the tables (see the module docstring)."""
        mappings, function_arn = self.rotator.mappings, self.settings.hotkeys_function_arn
        if mappings is not None and function_arn is not None:
            found = self._call("*", "list_event_source_mappings", lambda: mappings.list(function_arn))
            if not isinstance(found, _Failed):
                self.mappings = {}
                for mapping in found:
                    if (table := table_of_stream(mapping.source_arn)) is not None:
                        self.mappings.setdefault(table, []).append(mapping)
        prefix = table_head(self.settings.table_prefix)
        listed = self._call("*", "describe_alarms", partial(self.rotator.cloudwatch.alarms, prefix))
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
            code = error_code(exc) or "Unknown"
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
        closed = not self.lifecycle.phase(table, self.now).open
        request = create_table_request(self.settings, table, closed=closed)
        state = self._call(table.name, "create_table", partial(self.rotator.tables.create, request))
        if isinstance(state, _Failed):
            return False
        if state is not None:
            self.summary.created.append(table.name)
            self.owned[table.name] = True  # created here, with the ownership tags
        # Created here or by a concurrent run (None): either way it exists, tend it below.
        return True

    # -- tending ------------------------------------------------------------------

    def _tend(self, table: PeriodTable, *, wait: bool = False) -> None:
        """Move ``table`` one step. With ``wait`` (a build run: a reading is waiting for this table), a
        table DynamoDB is still CREATING is described again every CREATING_POLL_S until it is ACTIVE,
        and set up at once, within the run's time."""
        phase = self.lifecycle.phase(table, self.now)
        describe = partial(self._call, table.name, "describe_table", partial(self.rotator.tables.describe, table.name))
        state = describe()
        until = self.deadline.clock() + CREATING_WAIT_S
        while (
            wait
            and isinstance(state, TableState)
            and state.status == "CREATING"
            and self.deadline.allows_sleep(CREATING_POLL_S)
            and self.deadline.clock() + CREATING_POLL_S < until
        ):
            self.rotator.sleep(CREATING_POLL_S)
            state = describe()
        if isinstance(state, _Failed):
            return
        if state is None:
            self.summary.skip(table.name, "gone: deleted while this run was looking")
            return
        self.statuses[table.name] = state.status
        if state.status == "CREATING":
            self.summary.creating.append(table.name)
            self.summary.skip(table.name, "CREATING: its setup is finished by the first run that finds it ACTIVE")
            return
        if state.status not in (_STEADY, "UPDATING"):
            self.summary.skip(table.name, f"status {state.status}: left alone")
            return
        if phase is Phase.EXPIRED:
            self._retire(table, state)
        elif phase.open:
            self._drop_stale_mappings(table, state)
            self._set_up(table, state, phase)
        else:
            self._close(table, state)

    def _owned(self, table: PeriodTable, state: TableState, step: str) -> bool:
        """Only tables this rotator created are changed (their setup, capacity, class) or dropped:
        their tags say so, and its role is allowed those changes only on them. Read once a run."""
        if table.name not in self.owned:
            tags = self._call(table.name, "list_tags_of_resource", partial(self.rotator.tables.tags, state.arn))
            if isinstance(tags, _Failed):
                return False
            self.owned[table.name] = is_managed(tags, self.settings)
            if not self.owned[table.name]:
                self.summary.skip(
                    table.name,
                    f"{step}: not created by this rotator (tags timeseries:managed-by / timeseries:table-prefix "
                    "missing); left alone",
                )
        return self.owned[table.name]

    def _set_up(self, table: PeriodTable, state: TableState, phase: Phase) -> None:
        """Finish an open table's setup: stream, TTL, PITR, Contributor Insights, capacity, mapping, alarms."""
        if state.stream_arn is None and self._owned(table, state, "setup"):
            stream = {"StreamSpecification": {"StreamEnabled": True, "StreamViewType": STREAM_VIEW}}
            if self._update(table, state, "stream", stream):
                self.summary.configure(table.name, "stream")
        self._set_up_storage(table, state)
        mode = insights_mode(self.settings)
        if mode is not None:
            self._keep_insights(table, state, mode)
        if phase in (Phase.UPCOMING, Phase.CURRENT):
            self._raise_capacity(table, state)
        self._keep_mapping(table, state)
        self._keep_alarms(table)

    def _set_up_storage(self, table: PeriodTable, state: TableState) -> None:
        """TTL and PITR: what every table needs, open or closed."""
        tables = self.rotator.tables
        ttl = self._call(table.name, "describe_time_to_live", partial(tables.ttl, table.name))
        if not isinstance(ttl, _Failed):
            status, attribute = ttl
            if status == "DISABLED":
                if self._owned(table, state, "setup") and self._do(
                    table.name, "update_time_to_live", partial(tables.enable_ttl, table.name, TTL_ATTRIBUTE)
                ):
                    self.summary.configure(table.name, "ttl")
            elif attribute != TTL_ATTRIBUTE:
                self.summary.skip(table.name, f"TTL is {status} on {attribute!r}, not {TTL_ATTRIBUTE!r}; left alone")
        if self.settings.pitr_enabled:
            enabled = self._call(table.name, "describe_continuous_backups", partial(tables.pitr_enabled, table.name))
            if (
                enabled is False
                and self._owned(table, state, "setup")
                and self._do(table.name, "update_continuous_backups", partial(tables.enable_pitr, table.name))
            ):
                self.summary.configure(table.name, "point_in_time_recovery")

    def _raise_capacity(self, table: PeriodTable, state: TableState) -> None:
        """Bring an upcoming or current table up to the configured capacity (never down:
        an operator may have raised it for a reason, and increases are unlimited)."""
        capacity = self.settings.capacity
        if state.provisioned and capacity.write_capacity is not None:
            write = max(state.write_units, capacity.write_capacity)
            read = max(state.read_units, capacity.read_capacity)
            throughput = {"ReadCapacityUnits": read, "WriteCapacityUnits": write}
            if (
                (write, read) != (state.write_units, state.read_units)
                and self._owned(table, state, "capacity")
                and self._update(table, state, "capacity_raised", {"ProvisionedThroughput": throughput})
            ):
                self.summary.configure(table.name, "capacity_raised")
        elif not state.provisioned and capacity.warm_writes_per_s is not None:
            warm = {"WarmThroughput": {"WriteUnitsPerSecond": capacity.warm_writes_per_s}}
            if (
                (state.warm_write_units or 0) < capacity.warm_writes_per_s
                and self._owned(table, state, "capacity")
                and self._update(table, state, "warm_throughput", warm)
            ):
                self.summary.configure(table.name, "warm_throughput")

    def _keep_insights(self, table: PeriodTable, state: TableState, mode: InsightsMode | None) -> None:
        """Contributor Insights in ``mode`` (None: off). A change in progress (ENABLING,
        DISABLING) is left to finish; a FAILED one is tried again."""
        tables = self.rotator.tables
        found = self._call(table.name, "describe_contributor_insights", partial(tables.insights, table.name))
        if isinstance(found, _Failed):
            return
        status, current = found
        if mode is None:
            change = status == "ENABLED"
        else:
            change = status in ("DISABLED", "FAILED") or (status == "ENABLED" and current != mode)
        if (
            change
            and self._owned(table, state, "contributor insights")
            and self._do(table.name, "update_contributor_insights", partial(tables.set_insights, table.name, mode))
        ):
            self.summary.configure(table.name, "contributor_insights" if mode else "contributor_insights_off")

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
        api = self.rotator.mappings
        if api is None or self.mappings is None or state.stream_arn is None:
            return
        current = [m for m in self.mappings.get(table.name, []) if m.source_arn == state.stream_arn]
        if not current:
            request = create_mapping_request(self.settings, state.stream_arn)
            if self.dry_run:
                self.summary.configure(table.name, "stream_mapping")
                return
            created = self._call(table.name, "create_event_source_mapping", partial(api.create, request))
            # None: a concurrent run made it a moment ago, which is as good, but not this run's change.
            if created is not None and not isinstance(created, _Failed):
                self.summary.configure(table.name, "stream_mapping")
            return
        for existing in current:
            changes = mapping_drift(self.settings, existing.config)
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
        if mapping.state == "Deleting" or mapping.uuid in self.removed:
            return True
        if not self._do(table, "delete_event_source_mapping", partial(api.delete, mapping.uuid)):
            return False
        self.removed.add(mapping.uuid)
        self.summary.removed.append(f"stream mapping {mapping.uuid} ({table})")
        return True

    # -- alarms -------------------------------------------------------------------

    def _keep_alarms(self, table: PeriodTable) -> None:
        if self.alarms is None:
            return
        stale = [
            request
            for request in alarm_requests(self.settings, table)
            if self.alarms.get(request["AlarmName"]) != request["AlarmDescription"]
        ]
        if not stale:
            return
        put = [
            self._do(table.name, "put_metric_alarm", partial(self.rotator.cloudwatch.put_alarm, request))
            for request in stale
        ]
        if any(put):
            self.summary.configure(table.name, "alarms")

    def _remove_alarms(self, table: str, names: list[str]) -> bool:
        names = [name for name in names if name not in self.removed]
        if not names:
            return True
        if not self._do(table, "delete_alarms", partial(self.rotator.cloudwatch.delete_alarms, names)):
            return False
        self.removed.update(names)
        self.summary.removed.extend(f"alarm {name}" for name in names)
        return True

    def _our_alarms(self) -> list[tuple[str, str]]:
        """(table, alarm name) of each of the rotator's alarms in the snapshot, by name."""
        return [
            (table, name)
            for name, description in sorted((self.alarms or {}).items())
            if (table := table_of_alarm(name)) is not None and description.startswith(ALARM_MARKER)
        ]

    # -- closed tables --------------------------------------------------------------

    def _close(self, table: PeriodTable, state: TableState) -> None:
        """A closed table pays for nothing idle: no provisioned capacity (on-demand, once), no
        Contributor Insights; and, once its class review is due, maybe Standard-IA. It stays
        writable: late readings up to MAX_AGE old may still arrive. One built after it closed (for
        such a reading) never had an open table's setup: its TTL and PITR are set up here."""
        if state.created_ms is not None and state.created_ms >= self.lifecycle.dial_down_at(table):
            self._set_up_storage(table, state)
        if (
            state.provisioned
            and self._owned(table, state, "on-demand")
            and self._update(table, state, "on-demand", {"BillingMode": "PAY_PER_REQUEST"})
        ):
            self.summary.dialled_down.append(DialDown(table.name, (state.write_units, 0), (state.read_units, 0)))
        if insights_mode(self.settings) is not None:
            self._keep_insights(table, state, None)
        if (
            self.settings.infrequent_access_storage_percent is not None
            and state.table_class == STANDARD
            and table.name not in self.updating  # switched to on-demand this run: one UpdateTable at a time
            and self.now >= self.lifecycle.class_review_at(table)
            # One built late (for a late reading) is measured over a day of its own, too.
            and (state.created_ms is None or self.now >= state.created_ms + CLASS_REVIEW_AFTER_MS)
        ):
            self.class_candidates.append((table, state))
        bucket = self.settings.export_bucket
        if bucket is not None and self.lifecycle.export_due(table, self.now) and self._owned(table, state, "export"):
            self._exported(table, state, bucket)

    def _review_classes(self) -> None:
        """Move each reviewed closed table whose storage dominates its cost to Standard-IA
        (:mod:`rotator.table_class`): one CloudWatch call for all of them."""
        percent = cast(int, self.settings.infrequent_access_storage_percent)  # set: there are candidates
        candidates = [(t, s) for t, s in self.class_candidates if self._owned(t, s, "table class")]
        if not candidates:
            return
        names = [t.name for t, _ in candidates]
        window = partial(self.rotator.cloudwatch.consumed, names, self.now - CLASS_REVIEW_AFTER_MS, self.now)
        usage = self._call("*", "get_metric_data", window)
        if isinstance(usage, _Failed):
            return
        for table, state in candidates:
            if storage_dominates(state.size_bytes, usage[table.name], percent) and self._update(
                table, state, "infrequent_access", {"TableClass": INFREQUENT_ACCESS}
            ):
                self.summary.configure(table.name, "infrequent_access")

    # -- expired tables -------------------------------------------------------------

    def _retire(self, table: PeriodTable, state: TableState) -> None:
        """Export (if configured), then remove the mapping, the alarms and the table."""
        if not self._owned(table, state, "drop"):
            return
        try:
            self.lifecycle.check_deletable(table, self.now)
        except DeletionRefused as refused:
            self.summary.fail(table.name, "delete_table", "DeletionRefused", refused.reason)
            return
        bucket = self.settings.export_bucket
        if bucket is not None and not self._exported(table, state, bucket):
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
        if not self._remove_alarms(table.name, [n for t, n in self._our_alarms() if t == table.name]):
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

    def _exported(self, table: PeriodTable, state: TableState, bucket: str) -> bool:
        """True once an export of ours to ``bucket`` has COMPLETED; otherwise start or wait for one.

        The export shows the table as it was when it stopped taking writes (ExportTime
        :meth:`Lifecycle.last_write_at`, inside the point-in-time recovery window), not as it is now:
        by its drop every item has expired, and TTL may have deleted any of them."""
        tables = self.rotator.tables
        export_time = self.lifecycle.last_write_at(table)
        if self.now < self.lifecycle.export_at(table):
            self.summary.skip(table.name, f"export: asked for from {format_ts(self.lifecycle.export_at(table))}")
            return False
        prefix = self.settings.export_prefix_for(table.name)
        listed = self._call(table.name, "list_exports", partial(tables.exports, state.arn, EXPORTS_LOOKED_AT))
        if isinstance(listed, _Failed):
            return False
        exports, more = listed
        ours = [e for e in exports if e.bucket == bucket and e.prefix == prefix]
        if any(e.status == "COMPLETED" for e in ours):
            self.summary.exported.append(table.name)
            return True
        if any(e.status == "IN_PROGRESS" for e in ours):
            self.summary.skip(table.name, f"export to s3://{bucket}/{prefix} in progress; dropped once it completes")
            return False
        failed = [e for e in ours if e.status == "FAILED"]
        if len(failed) >= EXPORT_ATTEMPTS:
            self.summary.fail(
                table.name,
                "export",
                "ExportAbandoned",
                f"{len(failed)} exports failed, the last: {failed[-1].failure}; no new one is started and the table "
                "is kept: export it by hand (ExportTime "
                f"{format_ts(export_time)}) or drop it (TablesOverdue counts it a day after its horizon)",
            )
            return False
        if more:
            self.summary.fail(
                table.name,
                "export",
                "TooManyExports",
                f"the table has more than {EXPORTS_LOOKED_AT} exports and none of the first is a completed or "
                "running one of ours; the table is kept: check its exports by hand",
            )
            return False
        if failed:
            self.summary.fail(
                table.name, "export", "ExportFailed", f"{len(failed)} export(s) failed, the last: {failed[-1].failure}"
            )
        if self.dry_run:
            self.summary.exports_started.append(table.name)
            return False
        request: dict[str, Any] = {
            "TableArn": state.arn,
            "ExportTime": datetime.fromtimestamp(export_time / 1000, UTC),
            "S3Bucket": bucket,
            "S3Prefix": prefix,
            "ExportFormat": "DYNAMODB_JSON",
            "ClientToken": export_client_token(state.arn, bucket, prefix, len(failed)),
        }
        try:
            tables.start_export(request)
        except ClientError as exc:
            code = error_code(exc) or "Unknown"
            if code == "ExportConflictException":
                self.summary.skip(table.name, "export: another export of this table is running; next run")
                return False
            message = error_message(exc)
            if code in ("PointInTimeRecoveryUnavailableException", "InvalidExportTimeException"):
                # The backup does not reach back to when the table stopped taking writes (PITR was off
                # then, or that is more than its recovery period ago): no export can show every reading.
                message = (
                    f"no point-in-time backup of {format_ts(export_time)}, when it stopped taking writes ({message}); "
                    "the table is kept: export it by hand or drop it"
                )
                if code == "PointInTimeRecoveryUnavailableException" and self._do(
                    table.name, "update_continuous_backups", partial(tables.enable_pitr, table.name)
                ):
                    self.summary.configure(table.name, "point_in_time_recovery")
            self.summary.fail(table.name, "export_table_to_point_in_time", code, message)
            return False
        self.summary.exports_started.append(table.name)
        return False

    # -- what only open tables keep ---------------------------------------------------

    def _sheds(self, name: str) -> bool:
        """True when ``name`` is a table of ours that must have no mapping and no alarms: not an
        open table, and (checked apart from the phases, as the deletion guard is) not the current
        or a future period's, whatever the phases say."""
        table = self.lifecycle.parse(name)
        return (
            table is not None
            and name not in self.open_tables
            and table.start_ms < self.lifecycle.period.start(self.now)
        )

    def _sweep(self) -> None:
        """Remove the mappings and alarms of every table of ours that is not open: closed,
        expired, or gone (dropped by hand). A closed table's are removed in the run that
        finds it closed; at most :data:`MAPPING_DELETES_PER_RUN` mappings and
        :data:`ALARM_DELETES_PER_RUN` alarms go per run (hundreds are left only by a
        deployment from before closed tables shed them).

        The snapshot was taken before the listing, so a mapping or alarm in it
        was made after its table was, hence before the listing: a table missing
        from the listing was dropped, not "too new to be listed".
        """
        if self.mappings is not None:
            stale = [
                (name, mapping)
                for name, mappings in sorted(self.mappings.items())
                if self._sheds(name)
                for mapping in mappings
                if mapping.uuid not in self.removed and mapping.state != "Deleting"
            ]
            if len(stale) > MAPPING_DELETES_PER_RUN:
                self.summary.skip("*", f"{len(stale) - MAPPING_DELETES_PER_RUN} more stale stream mappings: next runs")
            for name, mapping in stale[:MAPPING_DELETES_PER_RUN]:
                self._guarded(name, "sweep", partial(self._remove_mapping, name, mapping))
        orphans = [name for table, name in self._our_alarms() if self._sheds(table) and name not in self.removed]
        if len(orphans) > ALARM_DELETES_PER_RUN:
            self.summary.skip("*", f"{len(orphans) - ALARM_DELETES_PER_RUN} more stale alarms: next runs")
        if orphans:
            self._guarded("*", "sweep", partial(self._remove_alarms, "*", orphans[:ALARM_DELETES_PER_RUN]))
