"""The hot-key logic: one stream batch in, its load stored in the control table,
and every window that is due judged once.

Per batch (one invocation, one stream shard):

1. parse every record; TTL deletions, other tables' or layouts' records and
   garbage are skipped, counted and logged (a few of each), never judged;
2. cut the counted records into *runs* (:func:`runs_of`: consecutive records
   of one window), tally each run per partition key and per entity
   (:mod:`hotkeys.detector`), keep its busiest keys and entities plus every
   entity with its own count, and put it in the control table under the
   sequence number of the record it starts at. Every invocation of every
   stream shard writes runs into the same windows, so a split entity whose
   sub-shards are read by several concurrent invocations is still judged on
   its whole load;
3. for each window whose end is ``HOT_WINDOW_GRACE`` in the past and that the
   batch's own stream position has passed, try to claim it (a conditional
   write: exactly one invocation wins). The winner adds up the window's
   runs, decides (:func:`hotkeys.detector.decide`), applies the changes to
   the shard map with optimistic concurrency (folding what is past retention,
   see ``adapters.shard_map_store``), sends the alerts (one per hot key per
   cooldown), publishes the top-k metrics, and marks the window done with
   the load of every entity with its own count (what later scale-downs read).

Redelivery counts nothing twice. Lambda redelivers a stream batch whole (the
function failed), from a record the partial batch response named, or in
halves (bisect on error): each time from a record it delivered before, with
the records after it in stream order. A run starts at the batch's first
counted record or where the window changes, so a redelivery from a run's
start makes that run again under the same name, and its put replaces the
earlier copy instead of adding to it. Records are reported for redelivery
only when their run could not be put, and then from the run's start.
Judging a window never fails a record: its claim is released and the next
invocation judges it.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from aws_lambda_powertools.metrics import MetricUnit, single_metric
from aws_lambda_powertools.utilities.data_classes.dynamo_db_stream_event import DynamoDBRecord

from adapters.clients import client
from adapters.observability import NAMESPACE, logger, metrics
from adapters.shard_map_store import Compaction, ShardMapStore, shard_map_source
from hotkeys.alerts import Alert, AlertPublisher
from hotkeys.control_table import ControlTable
from hotkeys.detector import (
    Decisions,
    EntityChange,
    GlobalChange,
    Observation,
    WindowLoad,
    apply_decisions,
    decide,
    tally,
)
from hotkeys.records import SkipKind, Skipped, parse_record, table_of
from hotkeys.settings import HotKeySettings
from keydesign import ShardMap, earliest_change_boundary, format_ts
from keydesign.layouts import key_family

#: Windows behind the newest due one that an invocation still tries to judge.
CLOSE_LOOKBACK_WINDOWS = 3
#: Skipped records logged per kind per batch (the rest are only counted).
_SKIP_LOG_SAMPLES = 3
#: A run is cut before the record that would take its estimated JSON past this (an item holds 400 KB).
RUN_BYTES = 256 * 1024
#: After this a window-close claim's holder is taken for dead, and another may judge the window.
CLOSE_LEASE_MS = 120_000
#: A hot key is notified at most once per this.
ALERT_COOLDOWN_MS = 3_600_000


class RecordNotCounted(Exception):  # noqa: N818 - reads as the outcome it reports
    """A stream record whose load is not in the control table: redeliver it."""


@dataclass(slots=True)
class BatchOutcome:
    """What became of one batch (``records``, the raw ones); :meth:`settle` is the Powertools record handler."""

    records: Sequence[object]
    failures: dict[int, str] = field(default_factory=dict)  # by position: why a record's load is not counted
    counted: int = 0
    user_deletes: int = 0
    late: int = 0
    counters_written: int = 0
    counters_failed: int = 0
    counters_dropped: int = 0
    windows_judged: list[Decisions] = field(default_factory=list)
    close_failures: int = 0
    alerts_sent: int = 0
    alerts_suppressed: int = 0
    alert_failures: int = 0
    skipped: Counter[SkipKind] = field(default_factory=Counter)
    _positions: dict[int, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._positions = {id(raw): position for position, raw in enumerate(self.records)}

    def fail(self, position: int, reason: str) -> None:
        self.failures.setdefault(position, reason)

    def settle(self, record: DynamoDBRecord) -> str | None:
        """Record handler for Powertools' BatchProcessor: raise for a record to redeliver."""
        sequence_number = _sequence_number(record.raw_event)
        position = self._positions.get(id(record.raw_event))
        # Not seen by process(): never report success for it.
        reason = "the record was not part of the batch" if position is None else self.failures.get(position)
        if reason is not None:
            raise RecordNotCounted(f"record {sequence_number}: load not counted ({reason})")
        return sequence_number


@dataclass(frozen=True, slots=True)
class Counted:
    """A record that counts: where it is in the batch, its sequence number, what it wrote."""

    position: int
    sequence_number: str
    observation: Observation


@dataclass(frozen=True, slots=True)
class Run:
    """Consecutive counted records of one batch in one window, named by the first one."""

    run_id: str
    window_start_ms: int
    members: tuple[Counted, ...]


def runs_of(counted: Sequence[Counted], *, window_ms: int, table: str) -> list[Run]:
    """``counted`` (in stream order) cut into runs: a run ends where the next record's write
    time falls in another window, or where its stored load could pass :data:`RUN_BYTES`.

    Where a run starts depends only on the records from the batch's first one on, so a batch
    delivered again from any run's start makes that run, and every one after it, again.
    """
    runs: list[Run] = []
    members: list[Counted] = []
    seen: set[tuple[str, str]] = set()
    size = window = 0
    for record in counted:
        obs = record.observation
        start = obs.approx_time_ms - obs.approx_time_ms % window_ms
        # An entity id has no '#', so "entity#key" names the pair (and bounds its length from above).
        names = {("k", obs.partition_key): 48, ("e", obs.entity): 48, ("p", f"{obs.entity}#{obs.partition_key}"): 3}
        if members and (start != window or size + _grown(names, seen) > RUN_BYTES):
            runs.append(Run(f"{table}#{members[0].sequence_number}", window, tuple(members)))
            members, seen, size = [], set(), 0
        window = start
        size += _grown(names, seen)
        seen.update(names)
        members.append(record)
    if members:
        runs.append(Run(f"{table}#{members[0].sequence_number}", window, tuple(members)))
    return runs


def _grown(names: dict[tuple[str, str], int], seen: set[tuple[str, str]]) -> int:
    """What ``names`` add to a bound on the JSON a run's load is stored as (``hotkeys.control_table``):
    per new key or entity its name and 48 bytes of counts, per new (entity, key) pair the key again."""
    return sum(len(key[1]) + extra for key, extra in names.items() if key not in seen)


class HotKeyMonitor:
    """Counts stream batches into the control table and judges due windows. One per container,
    wired to the real clients unless others are given (a fake, a fault injector)."""

    def __init__(
        self,
        settings: HotKeySettings,
        *,
        dynamodb: Any = None,
        sns: Any = None,
        clock_ms: Callable[[], int] | None = None,
    ) -> None:
        self._settings = settings
        self._layout = settings.layout
        self._config = settings.detector
        self._clock_ms = clock_ms or (lambda: int(time.time() * 1000))
        db = dynamodb if dynamodb is not None else client("dynamodb", max_attempts=5)
        # Forget what no function may still write or read: changes in force a retention, plus the
        # margin that covers clocks and in-flight batches, ago (cached copies are older, so fuller).
        compaction = Compaction(
            keep_ms=settings.retention_ms + settings.change_margin_ms,
            entity_default=1 if settings.layout.can.shared_partitions else None,
        )
        initial = ShardMap.initial(settings.layout.bucket, settings.shards)
        self._store = ShardMapStore(db, settings.control_table, initial, compaction=compaction, clock_ms=self._clock_ms)
        self._control = ControlTable(db, settings.control_table)
        cache_clock: Callable[[], float] = time.monotonic if clock_ms is None else (lambda: self._clock_ms() / 1000)
        self._shard_maps = shard_map_source(settings, bootstrap=True, store=self._store, clock=cache_clock)
        self._alerts = None
        if settings.alert_topic_arn is not None:
            self._alerts = AlertPublisher(sns if sns is not None else client("sns"), settings.alert_topic_arn)
        self._service = settings.service_name or "hotkeys"
        self.owner = uuid.uuid4().hex
        self._settled: set[int] = set()

    def close(self) -> None:
        self._control.close()

    # -- one batch ---------------------------------------------------------------------------

    def process(self, records: Sequence[Any]) -> BatchOutcome:
        """Count one batch of Lambda DynamoDB stream records, then judge the windows that are due."""
        now = self._clock_ms()
        outcome = BatchOutcome(records)
        counted: list[Counted] = []
        logged: Counter[SkipKind] = Counter()
        for position, raw in enumerate(records):
            parsed = parse_record(raw, layout_kind=self._layout.kind, table_prefix=self._layout.table_prefix)
            sequence_number = _sequence_number(raw)
            if isinstance(parsed, Skipped):
                outcome.skipped[parsed.kind] += 1
                quiet = parsed.kind in {SkipKind.TTL_DELETE, SkipKind.WRITE_TIER}
                if not quiet and logged[parsed.kind] < _SKIP_LOG_SAMPLES:
                    logged[parsed.kind] += 1
                    logger.warning(
                        "stream record skipped",
                        skip=parsed.kind.value,
                        reason=parsed.reason,
                        sequence_number=sequence_number,
                    )
                continue
            if sequence_number is not None:  # parse_record requires one
                counted.append(Counted(position, sequence_number, parsed))

        if counted:
            try:
                shard_map = self._shard_maps.current()
            except Exception as exc:
                # Without the map we cannot tell split entities apart; nothing is
                # counted yet, so redelivering the whole batch counts it once.
                logger.exception("shard map unavailable; the batch will be redelivered")
                for record in counted:
                    outcome.fail(record.position, f"shard map unavailable: {type(exc).__name__}")
            else:
                self._count(counted, table_of(records[counted[0].position]), shard_map, now, outcome)
            # How far this shard's stream has got: a window is judged only once some
            # batch has read past its end, never on wall-clock time alone (a lagging
            # or just-started stream would make a busy window look quiet).
            self._judge_due_windows(now, max(c.observation.approx_time_ms for c in counted), outcome)
        _emit(outcome)
        return outcome

    def _count(self, counted: list[Counted], table: str, shard_map: ShardMap, now: int, outcome: BatchOutcome) -> None:
        config = self._config
        outcome.counted = len(counted)
        outcome.user_deletes = sum(1 for c in counted if c.observation.event_name == "REMOVE")
        always = set(shard_map.entity_history)
        runs = runs_of(counted, window_ms=config.window_ms, table=table)
        loads: dict[str, WindowLoad] = {}
        for run in runs:
            full = tally((c.observation for c in run.members), config)[run.window_start_ms].load()
            load, dropped = full.select(config.counters_per_window, always=always)
            outcome.counters_dropped += dropped
            if run.window_start_ms + config.window_ms + self._settings.window_grace_ms <= now:
                # Its window is (or is about to be) judged already: visible, not lost.
                outcome.late += len(run.members)
            loads[run.run_id] = load
        failed = self._control.put_runs(loads, now)
        outcome.counters_written = len(loads) - len(failed)
        outcome.counters_failed = len(failed)
        if failed:
            logger.error(
                "run writes failed; their records will be redelivered",
                failed=len(failed),
                errors=sorted(set(failed.values())),
            )
            for run in runs:
                reason = failed.get(run.run_id)
                if reason is not None:
                    for record in run.members:
                        outcome.fail(record.position, f"run write failed: {reason}")

    # -- judging windows ------------------------------------------------------------------------

    def _judge_due_windows(self, now: int, watermark: int, outcome: BatchOutcome) -> None:
        """Judge the windows that ended ``HOT_WINDOW_GRACE`` ago and that this batch's stream
        position has passed, each by exactly one invocation (the one whose claim lands)."""
        width = self._config.window_ms
        newest = self._config.window_start(min(now - self._settings.window_grace_ms, watermark) - width)
        due = [newest - i * width for i in range(CLOSE_LOOKBACK_WINDOWS - 1, -1, -1)]
        self._settled = {s for s in self._settled if s >= due[0]}
        for start in due:
            if start in self._settled:
                continue
            try:
                won = self._control.claim_close(start, self.owner, now, CLOSE_LEASE_MS)
            except Exception:
                logger.exception("could not claim a window; a later invocation will", window=format_ts(start))
                return
            self._settled.add(start)
            if not won:
                continue
            try:
                outcome.windows_judged.append(self._judge(start, outcome))
            except Exception:
                outcome.close_failures += 1
                logger.exception("judging a window failed; releasing it for a retry", window=format_ts(start))
                self._settled.discard(start)
                try:
                    self._control.release_close(start, self.owner)
                except Exception:
                    logger.exception("could not release the claim; it expires with its lease", window=format_ts(start))

    def _judge(self, start: int, outcome: BatchOutcome) -> Decisions:
        config = self._config
        load = self._control.read_window(start, config.window_ms)
        shard_map = self._store.load()
        history = self._history(start, shard_map)
        now = self._clock_ms()
        decisions = decide(
            load,
            shard_map,
            layout_kind=self._layout.kind,
            config=config,
            change_from_ms=self._change_from(now),
            history=history,
        )
        settings = self._settings
        wanted = bool(
            (settings.auto_apply_entity and (decisions.splits or decisions.scale_downs))
            or (settings.auto_apply_global and decisions.global_change is not None)
        )
        summary = _summary(decisions)
        reason = summary if wanted else "compaction"
        # Applied even when nothing is wanted (apply_decisions then returns the map as it is): the store
        # folds what retention has passed, so the map is compacted as windows are judged (a write only
        # when a change has aged out).
        applied = self._store.apply(self._change_fn(decisions), reason=reason)
        if applied.changed:
            logger.info(
                "shard map changed", version=applied.shard_map.version, attempts=applied.attempts, decisions=reason
            )
        self._publish_top(load, decisions)
        self._send_alerts(decisions, wanted, outcome)
        if decisions.hot_keys or decisions.has_changes:
            logger.info("window judged", window=format_ts(start), decisions=summary)
        judged = {e: load.entities[e].wcu for e in shard_map.entity_history if e in load.entities}
        self._control.finish_close(
            start, self.owner, self._clock_ms(), summary, observed=bool(load.keys), judged=judged
        )
        return decisions

    def _change_from(self, now: int) -> int:
        ttl_ms, margin_ms = self._settings.shard_map_cache_ttl_ms, self._settings.change_margin_ms
        return earliest_change_boundary(self._layout.bucket, now, ttl_ms, margin_ms)

    def _change_fn(self, decisions: Decisions) -> Callable[[ShardMap], ShardMap]:
        def change(current: ShardMap) -> ShardMap:
            now = self._clock_ms()
            return apply_decisions(
                current,
                decisions,
                layout_kind=self._layout.kind,
                now_ms=now,
                change_from_ms=self._change_from(now),
                entity_changes=self._settings.auto_apply_entity,
                global_changes=self._settings.auto_apply_global,
            )

        return change

    def _history(self, start: int, shard_map: ShardMap) -> list[WindowLoad]:
        """Those of the windows just before ``start`` that were judged with writes counted in
        them, with the load every entity with its own count had when each was judged: what a
        scale-down is judged on (:func:`decide` wants them all, contiguous). A window without a
        single counted write proves nothing about quiet: the table may have been idle, or the
        function not yet reading the stream."""
        count = self._config.scale_down_windows - 1
        if count < 1 or not shard_map.entity_history:
            return []
        width = self._config.window_ms
        return list(self._control.read_history([start - i * width for i in range(1, count + 1)], width).values())

    # -- metrics and alerts -------------------------------------------------------------------------

    def _publish_top(self, load: WindowLoad, decisions: Decisions) -> None:
        window = format_ts(load.start_ms)
        ranked = (("KeyWriteUnitsPerSecond", decisions.top_keys), ("EntityWriteUnitsPerSecond", decisions.top_entities))
        for name, top in ranked:
            for rank, (what, rate) in enumerate(top, start=1):
                with single_metric(
                    name=name,
                    unit=MetricUnit.CountPerSecond,
                    value=rate,
                    namespace=NAMESPACE,
                    default_dimensions={"service": self._service},
                ) as metric:
                    if name == "KeyWriteUnitsPerSecond":
                        metric.add_dimension(name="PartitionKey", value=key_family(what, self._layout.kind))
                        metric.add_metadata(key="partition_key", value=what)
                    else:
                        metric.add_dimension(name="Entity", value=what)
                    metric.add_metadata(key="rank", value=rank)
                    metric.add_metadata(key="window", value=window)
        metrics.add_metric(name="WindowsJudged", unit=MetricUnit.Count, value=1)
        metrics.add_metric(name="HotKeys", unit=MetricUnit.Count, value=len(decisions.hot_keys))
        metrics.add_metric(name="SplitsScheduled", unit=MetricUnit.Count, value=len(decisions.splits))
        metrics.add_metric(name="ScaleDownsScheduled", unit=MetricUnit.Count, value=len(decisions.scale_downs))
        metrics.add_metric(
            name="GlobalShardIncreases", unit=MetricUnit.Count, value=int(decisions.global_change is not None)
        )
        hottest = decisions.top_keys[0][1] if decisions.top_keys else 0.0
        metrics.add_metric(name="HottestKeyWriteUnitsPerSecond", unit=MetricUnit.CountPerSecond, value=hottest)

    def _send_alerts(self, decisions: Decisions, applied: bool, outcome: BatchOutcome) -> None:
        if self._alerts is None:
            return
        for alert in self._alerts_for(decisions, applied):
            now = self._clock_ms()
            if not self._control.claim_alert(alert.subject_key, self.owner, now, ALERT_COOLDOWN_MS):
                outcome.alerts_suppressed += 1
                continue
            try:
                self._alerts.publish(alert)
                outcome.alerts_sent += 1
            except Exception:
                outcome.alert_failures += 1
                logger.exception("hot-key notification failed; releasing its cooldown", subject=alert.subject_key)
                try:
                    self._control.release_alert(alert.subject_key, self.owner)
                except Exception:
                    logger.exception("could not release the cooldown", subject=alert.subject_key)

    def _alerts_for(self, decisions: Decisions, applied: bool) -> list[Alert]:
        """A judged window's notifications; ``applied``: its changes were put in the shard map (as configured)."""
        measured = {
            "threshold_wcu_per_s": self._config.split_threshold_wcu,
            "window": {"start": format_ts(decisions.window_start_ms), "end": format_ts(decisions.window_end_ms)},
            "table": self._layout.table_for(decisions.window_start_ms),
        }
        splits = {s.entity: s for s in decisions.splits}
        entity_rates = dict(decisions.hot_entities)
        entity_applied = applied and self._settings.auto_apply_entity
        alerts: dict[str, Alert] = {}

        def entity_alert(entity: str, rate: float, body: dict[str, object]) -> None:
            if f"entity#{entity}" not in alerts:
                body.update(entity=entity, entity_wcu_per_s=round(rate, 1))
                alerts[f"entity#{entity}"] = Alert(f"entity#{entity}", f"Hot entity {entity}: {rate:,.0f} WCU/s", body)

        for hot in decisions.hot_keys:
            family = key_family(hot.key, self._layout.kind)
            base: dict[str, object] = {
                "kind": "hot_key",
                "partition_key": hot.key,
                "key_family": family,
                "wcu_per_s": round(hot.wcu_per_s, 1),
                **measured,
            }
            action: dict[str, object]
            if hot.entity is not None:
                split = splits.get(hot.entity)
                if split is not None:
                    action = _scheduled("split", split, applied=entity_applied)
                elif hot.entity in decisions.at_limit:
                    action = {"action": "none: at the sub-shard limit"}
                else:
                    action = {"action": "none: enough sub-shards already scheduled"}
                entity_alert(hot.entity, entity_rates.get(hot.entity, hot.wcu_per_s), {**base, **action})
            if hot.crowded and f"key#{family}" not in alerts:
                change = decisions.global_change
                if change is not None:
                    action = _scheduled(
                        "increase global shards", change, applied=applied and self._settings.auto_apply_global
                    )
                else:
                    action = {"action": "none: a larger global N is already scheduled"}
                alerts[f"key#{family}"] = Alert(
                    f"key#{family}",
                    f"Hot partition key {family}: {hot.wcu_per_s:,.0f} WCU/s from many entities",
                    {**base, "crowded": True, **action},
                )
        # A split is announced even when no single key was over the threshold: an entity's
        # writes in one window may fall on two keys (its readings straddle a bucket boundary,
        # or its sub-shards), each under it, while the entity as a whole is over it.
        for split in decisions.splits:
            body = {"kind": "hot_entity", **measured, **_scheduled("split", split, applied=entity_applied)}
            entity_alert(split.entity, entity_rates.get(split.entity, split.wcu_per_s), body)
        return list(alerts.values())


def _scheduled(action: str, change: EntityChange | GlobalChange, *, applied: bool) -> dict[str, object]:
    """An alert's account of a scheduled shard-count change."""
    return {
        "action": action,
        "from_shards": change.from_shards,
        "to_shards": change.to_shards,
        "effective_from": format_ts(change.effective_from_ms),
        "applied": applied,
    }


def _emit(outcome: BatchOutcome) -> None:
    counts = {
        "RecordsCounted": outcome.counted,
        "UserDeletesCounted": outcome.user_deletes,
        "TtlDeletesIgnored": outcome.skipped[SkipKind.TTL_DELETE],
        "WriteTierRecordsSkipped": outcome.skipped[SkipKind.WRITE_TIER],
        "ForeignRecordsSkipped": outcome.skipped[SkipKind.FOREIGN],
        "MalformedRecordsSkipped": outcome.skipped[SkipKind.MALFORMED],
        "LateRecords": outcome.late,
        "CounterWrites": outcome.counters_written,
        "CounterWriteFailures": outcome.counters_failed,
        "CountersDropped": outcome.counters_dropped,
        "RecordsFailed": len(outcome.failures),
        "WindowJudgeFailures": outcome.close_failures,
        "AlertsSent": outcome.alerts_sent,
        "AlertsSuppressed": outcome.alerts_suppressed,
        "AlertFailures": outcome.alert_failures,
    }
    for name, value in counts.items():
        metrics.add_metric(name=name, unit=MetricUnit.Count, value=value)


def _summary(decisions: Decisions) -> str:
    def changes(items: Sequence[EntityChange]) -> list[list[object]]:
        return [[c.entity, c.from_shards, c.to_shards, format_ts(c.effective_from_ms)] for c in items]

    return json.dumps(
        {
            "window": format_ts(decisions.window_start_ms),
            "hot_keys": [[h.key, round(h.wcu_per_s, 1)] for h in decisions.hot_keys[:10]],
            "splits": changes(decisions.splits),
            "scale_downs": changes(decisions.scale_downs),
            "global": None
            if decisions.global_change is None
            else [
                decisions.global_change.from_shards,
                decisions.global_change.to_shards,
                format_ts(decisions.global_change.effective_from_ms),
            ],
            "at_limit": list(decisions.at_limit),
        },
        separators=(",", ":"),
    )


def _sequence_number(raw: object) -> str | None:
    if isinstance(raw, Mapping):
        body = raw.get("dynamodb")
        if isinstance(body, Mapping) and isinstance(body.get("SequenceNumber"), str):
            return str(body["SequenceNumber"])
    return None
