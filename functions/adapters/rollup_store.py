"""Rollup marks, rollups, totals and the rollup function's state in the control table.

Keys come from :mod:`keydesign.rollup`; this module only moves items. Writes go
through :class:`adapters.batch_writer.BatchWriter` (25 items a call, backoff,
per-item failures); an unwritten item fails the run, which is then repeated
whole (every write is a put of a recomputed value, so repeating is harmless),
and an item DynamoDB refuses is handed back to the caller, which sets its
interval aside (``rollup.logic``).
Reads that feed a recompute are strongly consistent, so they see every write
that happened before the mark that asked for them; the keys a BatchGetItem hands
back unprocessed are asked again after a full-jitter backoff
(``adapters.retry.RetryLoop``), and a read fails when some stay unprocessed. The rollup function's state
(:class:`RollupState`) holds, beside its watermark, the compaction watermark
each slot was planned with and the ``totals_through`` of the totals; it also puts
redo requests (:meth:`RollupStore.redo_write`) for compaction (docs/rollups.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from adapters.batch_writer import BatchWriter, PendingWrite, serialize_item
from adapters.recent import Recent
from adapters.retry import Backoff, Deadline, RetryLoop, Sleep, batch_get
from adapters.start_items import StartItems, StartRecorder
from keydesign import format_ts, parse_timestamp
from keydesign.periods import DAY_MS
from keydesign.rollup import (
    FLEET_PART,
    FRESH_PART,
    ROLLUP_SHARDS,
    SLOT_MS,
    STATE_PK,
    Figures,
    GroupPartial,
    Mark,
    RedoRequest,
    floor_to,
    mark_pks,
    minute_key,
    parse_total_sk,
    partial_pk,
    redo_pk,
    rollup_key,
    rollup_pk,
    rollup_ttl,
    total_part,
    total_pk,
    total_pks,
    total_sk,
)
from keydesign.writetier import KEEP_MS

_GET_ATTEMPTS = 8
#: Between BatchGetItem calls of the keys left unprocessed: 50 ms, doubling, at most 2 s (full jitter).
_GET_BACKOFF = Backoff(base_ms=50, max_delay_ms=2_000)
#: Marks an ingest container remembers as written: one per entity and finest interval per stamp minute.
MARK_ENTRIES = 65_536
#: Stamp minutes whose marked-minutes index item an ingest container remembers as written.
MINUTE_ENTRIES = 64


def start_pk(prefix: str) -> str:
    """The partition of the *start* items: each the minute in which an ingest container wrote its first
    marks. A first rollup run starts at the earliest (``rollup.logic``), not LATENESS back. Under the
    marks' own key family (``rollmark#*``), so neither function needs another grant.
    (To move to ``keydesign.rollup`` with the other keys.)"""
    return f"rollmark#{prefix}#start"


@dataclass(slots=True)
class ReadCount:
    """What reading rollups cost."""

    calls: int = 0
    items: int = 0
    read_units: float = 0.0

    def add(self, response: Mapping[str, Any], items: int) -> None:
        self.calls += 1
        self.items += items
        consumed = response.get("ConsumedCapacity") or {}
        if isinstance(consumed, list):
            self.read_units += sum(float(c.get("CapacityUnits", 0.0)) for c in consumed)
        else:
            self.read_units += float(consumed.get("CapacityUnits", 0.0))


@dataclass(frozen=True, slots=True)
class RollupState:
    """Marks of every slot before ``through_ms`` have been applied, and the first ``step`` steps of the
    slot at ``through_ms`` (``rollup.logic`` plans a slot's work as steps); ``late`` marks were past the
    lateness.

    ``w``: the compaction watermark the slot at ``through_ms`` was planned with (read once, at its step
    0), so a resumed slot plans the same steps. ``totals_through``: compaction's figures (its parts of
    the totals, an entity's unflagged compacted blocks) and the rollups agree before it: every re-mark
    compaction put before its watermark reached it is applied (``rollup.logic``). An item written
    before these fields reads them as 0, but ``w`` of a slot resumed mid-way (``step`` > 0), which
    reads as :data:`PLANNED_BEFORE_W`. ``indexed_from``: the marked-minutes index holds every slot with
    marks from this one on (before it, every mark key is read); None in an item written before it.

    ``fresh_from``, ``fresh_through``: the finest totals of ``[fresh_from, fresh_through)``, in hours
    compaction has not done, are whole as the rollup function's items and the re-pack's fresh parts
    (``<start>#p``); ``holds``: the re-pack slices of those hours with a mark of a reading late past its
    slice (no fresh total is served from the first on, until compaction has done its hour)."""

    through_ms: int
    late: int = 0
    last_late_ms: int | None = None
    step: int = 0
    w: int = 0
    totals_through: int = 0
    indexed_from: int | None = None
    fresh_from: int = 0
    fresh_through: int = 0
    holds: tuple[int, ...] = ()

    @property
    def minute_totals_through(self) -> int:
        """How far the finest totals are served: to ``fresh_through`` when its window follows on from
        ``totals_through``, else to ``totals_through`` (never past ``through_ms``)."""
        fresh = self.fresh_through if self.fresh_through > self.fresh_from == self.totals_through else 0
        return min(self.through_ms, max(self.totals_through, fresh))

    def holding(self, holds: tuple[int, ...], fresh_from: int, fresh_through: int) -> RollupState:
        """This state with ``holds``, and the fresh window ``[fresh_from, fresh_through)`` cut at the first
        of them (empty, both 0, when nothing is left)."""
        end = min((fresh_through, *holds))
        if end <= fresh_from:
            fresh_from = end = 0
        return replace(self, holds=holds, fresh_from=fresh_from, fresh_through=end)


#: ``w`` of a slot an older rollup function planned and left mid-way: it planned every late mark to be
#: recomputed, as a watermark past every hour does, so the steps it did are the same ones.
PLANNED_BEFORE_W = 2**62


def plain(value: Mapping[str, Any]) -> Any:
    """A low-level attribute value as a plain Python value (the types rollups use)."""
    ((kind, raw),) = value.items()
    if kind == "S":
        return raw
    if kind == "N":
        return int(raw) if raw.lstrip("-").isdigit() else float(raw)
    if kind == "M":
        return {k: plain(v) for k, v in raw.items()}
    if kind == "NULL":
        return None
    if kind == "SS":  # a cluster block's flagged entities (keydesign.writetier.ROLLUP_OWNED)
        return set(raw)
    raise ValueError(f"unexpected attribute type {kind}")


class MarkRecorder:
    """Ingest's side: the marks of a batch's written readings, each written once per container
    (a bounded LRU; an evicted mark is written again, which costs a write unit, never correctness).
    A container's first marks go with a start item of their minute (:func:`start_pk`,
    :mod:`adapters.start_items`), and its first marks of each stamp minute with that minute's
    marked-minutes index item (:func:`minute_key`, also remembered in a bounded LRU); until both are
    written, no mark of the call counts as written, so the readings are handed back and all are written
    again."""

    def __init__(self, store: RollupStore, level: int) -> None:
        self.store = store
        self._level = level
        self._written: Recent[Mark] = Recent(MARK_ENTRIES)
        self._start = StartRecorder(store.starts)
        self._minutes: Recent[int] = Recent(MINUTE_ENTRIES)
        self._lock = threading.Lock()

    def write(self, readings: Sequence[tuple[int, str, int]], stamp_ms: int, deadline: Deadline) -> dict[int, str]:
        """Write the marks of ``readings`` (index, entity, event time) stamped ``stamp_ms``; the
        indexes whose mark could not be written, with the reason (their records are redelivered)."""
        groups: dict[Mark, list[int]] = {}
        for index, entity, ts_ms in readings:
            groups.setdefault(Mark.of(stamp_ms, self._level, ts_ms, entity), []).append(index)
        slot = floor_to(stamp_ms, SLOT_MS)
        with self._lock:
            missing = [mark for mark in groups if mark not in self._written]
            indexed = slot in self._minutes
        if not missing:
            return {}
        writer = self.store.writer
        if writer is None:
            raise RuntimeError("marks need a rollup store that writes")
        writes = [self.store.mark_write(m) for m in missing]
        needed: dict[int, str] = {}  # the items every mark of the call needs, by position
        start = self._start.due(stamp_ms)
        if start is not None:
            needed[len(writes)] = "rollup start"
            writes.append(start)
        if not indexed:
            needed[len(writes)] = "rollup minute index"
            writes.append(self.store.minute_write(slot))
        report = writer.write(writes, deadline)
        blocked = None
        for position, what in needed.items():
            if position not in report.written:
                why = report.unwritten.get(position) or report.rejected.get(position) or "unknown"
                blocked = blocked or f"{what} not written: {why}"
        if start is not None and len(missing) in report.written:  # the start item is the first after the marks
            self._start.written(stamp_ms)
        failed: dict[int, str] = {}
        with self._lock:
            if blocked is None:
                self._minutes.add(slot)
            for position, mark in enumerate(missing):
                if position in report.written and blocked is None:
                    self._written.add(mark)
                else:
                    why = blocked or report.unwritten.get(position) or report.rejected.get(position) or "unknown"
                    failed.update(dict.fromkeys(groups[mark], why))
        return failed


class RollupStore:
    """Rollup items of one table prefix. Holds no state but its clients."""

    def __init__(
        self,
        dynamodb: Any,
        writer: BatchWriter | None,
        control_table: str,
        prefix: str,
        retention_ms: int,
        *,
        sleep: Sleep = time.sleep,
    ) -> None:
        self._db = dynamodb
        self.writer = writer
        self.table = control_table
        self.prefix = prefix
        self._retention_ms = retention_ms
        #: Each the minute an ingest container wrote its first marks in (:class:`MarkRecorder`).
        self.starts = StartItems(control_table, start_pk(prefix), SLOT_MS, lambda slot: rollup_ttl(slot, retention_ms))
        self._retry = RetryLoop(_GET_BACKOFF, sleep=sleep, max_attempts=_GET_ATTEMPTS)

    # -- marks ----------------------------------------------------------------

    def mark_write(self, mark: Mark) -> PendingWrite:
        pk, sk = mark.key(self.prefix)
        end = max(mark.slot_ms, mark.start_ms + mark.level)
        return PendingWrite(
            self.table, pk, sk, serialize_item({"pk": pk, "sk": sk, "expires_at": rollup_ttl(end, self._retention_ms)})
        )

    def minute_write(self, slot_ms: int) -> PendingWrite:
        """The marked-minutes index item of the slot of ``slot_ms`` (:func:`keydesign.rollup.minute_key`):
        put in the same write as marks stamped in it. It expires with the last of them: a mark's interval
        ends at most MAX_FUTURE (a day at most) and a minute after its stamp."""
        pk, sk = minute_key(self.prefix, slot_ms)
        end = floor_to(slot_ms, SLOT_MS) + DAY_MS + SLOT_MS
        item = {"pk": pk, "sk": sk, "expires_at": rollup_ttl(end, self._retention_ms)}
        return PendingWrite(self.table, pk, sk, serialize_item(item))

    def marks_writes(self, marks: Iterable[Mark]) -> list[PendingWrite]:
        """Puts of ``marks`` and of the index items of their slots: the rollup function reads a slot's
        marks only if its index item is stored, so every mark write goes with it."""
        marks = list(marks)
        slots = sorted({mark.slot_ms for mark in marks})
        return [*(self.mark_write(m) for m in marks), *(self.minute_write(s) for s in slots)]

    def marked_minutes(self, hour_ms: int, cost: ReadCount) -> set[int]:
        """The slots of the hour holding ``hour_ms`` whose index item is stored (one consistent Query,
        every page)."""
        pk, _ = minute_key(self.prefix, hour_ms)
        return {parse_timestamp(item["sk"], "sk") for item in self._query(pk, cost, projection="sk")}

    def first_start(self, cost: ReadCount) -> int | None:
        """The earliest minute in which an ingest container wrote marks, if any did (consistent)."""
        return self.starts.first(self._db, cost.add)

    def marks(self, slot_ms: int, cost: ReadCount, map_: Callable[..., Iterable[Any]] = map) -> list[Mark]:
        """Every mark of the slot; ``map_`` (a pool's) reads its keys side by side."""
        pages = map_(lambda pk: self._query(pk, cost, projection="sk"), mark_pks(self.prefix, slot_ms))
        return [Mark.parse(slot_ms, item["sk"]) for page in pages for item in page]

    # -- rollups --------------------------------------------------------------

    def rollup_write(self, level: int, start_ms: int, entity: str | None, figures: Figures) -> PendingWrite:
        """A put of one entity's interval (``entity`` None: the total of every entity)."""
        if entity is None:
            pk, sk = total_pk(self.prefix, level, start_ms), format_ts(start_ms)
        else:
            pk, sk = rollup_key(self.prefix, level, start_ms, entity)
        item = {"pk": pk, "sk": sk, **figures.item(), "expires_at": rollup_ttl(start_ms + level, self._retention_ms)}
        return PendingWrite(self.table, pk, sk, serialize_item(item))

    def write(self, writes: Sequence[PendingWrite], deadline: Deadline) -> dict[int, str]:
        """Put every item; the ones DynamoDB refused (by index), with its reason. Raises when an item
        is left unwritten for a while (throttling, the deadline): the run is then repeated."""
        if not writes:
            return {}
        if self.writer is None:
            raise RuntimeError("this rollup store reads only")
        report = self.writer.write(writes, deadline)
        if report.unwritten:
            index, why = next(iter(report.unwritten.items()))
            raise RuntimeError(f"{len(report.unwritten)} rollup items not written (first: {writes[index].pk}: {why})")
        return report.rejected

    def entity_rollups(
        self, level: int, starts: Iterable[int], entity: str, cost: ReadCount, *, consistent: bool = False
    ) -> dict[int, Figures]:
        """``entity``'s rollups of the intervals starting at ``starts`` (absent: no readings)."""
        keys = {rollup_key(self.prefix, level, start, entity): start for start in starts}
        out: dict[int, Figures] = {}
        wanted = [{"pk": {"S": pk}, "sk": {"S": sk}} for pk, sk in keys]

        def keep(response: Mapping[str, Any]) -> None:
            found = response.get("Responses", {}).get(self.table, [])
            cost.add(response, len(found))
            for raw in found:
                item = {k: plain(v) for k, v in raw.items()}
                out[keys[(item["pk"], item["sk"])]] = Figures.from_item(item)

        def give_up(pending: list[Any], _why: str) -> None:
            raise RuntimeError(f"{len(pending)} rollups still unprocessed after {_GET_ATTEMPTS} BatchGetItem calls")

        batch_get(
            self._db,
            self.table,
            wanted,
            retry=self._retry,
            give_up=give_up,
            on_response=keep,
            consistent=consistent,
            ReturnConsumedCapacity="TOTAL",
        )
        return out

    def interval_rollups(self, level: int, start_ms: int, cost: ReadCount) -> dict[str, Figures]:
        """Every entity's rollup of one interval (consistent: it feeds the total)."""
        out: dict[str, Figures] = {}
        for shard in range(ROLLUP_SHARDS):
            for item in self._query(rollup_pk(self.prefix, level, start_ms, shard), cost):
                out[item["sk"]] = Figures.from_item(item)
        return out

    def totals(
        self,
        level: int,
        from_ms: int,
        to_ms: int,
        cost: ReadCount,
        *,
        consistent: bool = False,
        fresh_from: int | None = None,
    ) -> dict[int, Figures]:
        """The totals of the intervals in ``[from_ms, to_ms)``: per interval start, the rollup function's
        item (``<start>``) and compaction's part (``<start>#c``) combined, or from ``fresh_from`` on the
        re-pack's fresh part (``<start>#p``) instead of compaction's; one Query per total partition.
        (The rollup function's own recompute of a coarser total reads :meth:`interval_rollups`, never these.)"""
        parts: dict[int, list[Figures]] = {}
        low, high = format_ts(from_ms), format_ts(to_ms - 1) + max(FLEET_PART, FRESH_PART)
        for pk in total_pks(self.prefix, level, from_ms, to_ms):
            for item in self._query(pk, cost, low=low, high=high, consistent=consistent):
                start, part = parse_total_sk(item["sk"])[0], total_part(item["sk"])
                fresh = fresh_from is not None and start >= fresh_from
                if part == (FLEET_PART if fresh else FRESH_PART):
                    continue
                parts.setdefault(start, []).append(Figures.from_item(item))
        return {start: Figures.combined(figures) for start, figures in parts.items()}

    # -- state ----------------------------------------------------------------

    def state(self, *, consistent: bool = False) -> RollupState | None:
        response = self._db.get_item(
            TableName=self.table, Key={"pk": {"S": STATE_PK}, "sk": {"S": self.prefix}}, ConsistentRead=consistent
        )
        raw = response.get("Item")
        if raw is None:
            return None
        item = {k: plain(v) for k, v in raw.items()}
        step = item.get("step", 0)
        return RollupState(
            item["through"],
            item.get("late", 0),
            item.get("last_late"),
            step,
            item.get("w", PLANNED_BEFORE_W if step else 0),
            item.get("totals_through", 0),
            item.get("indexed_from"),
            item.get("fresh_from", 0),
            item.get("fresh_through", 0),
            tuple(sorted(int(h) for h in str(item.get("holds") or "").split(",") if h)),
        )

    def save_state(self, state: RollupState) -> None:
        item: dict[str, object] = {
            "pk": STATE_PK,
            "sk": self.prefix,
            "through": state.through_ms,
            "late": state.late,
            "w": state.w,
            "totals_through": state.totals_through,
        }
        if state.last_late_ms is not None:
            item["last_late"] = state.last_late_ms
        if state.step:
            item["step"] = state.step
        if state.indexed_from is not None:
            item["indexed_from"] = state.indexed_from
        if state.fresh_through:
            item.update(fresh_from=state.fresh_from, fresh_through=state.fresh_through)
        if state.holds:
            item["holds"] = ",".join(map(str, state.holds))
        self._db.put_item(TableName=self.table, Item=serialize_item(item))

    def redo_write(self, request: RedoRequest) -> PendingWrite:
        """A put of a redo request (``keydesign.rollup.redo_pk``): compaction must redo ``request``'s
        group-hour. It expires when the hour's group items do (:data:`keydesign.writetier.KEEP_MS`)."""
        pk, sk = request.key(self.prefix)
        item = {"pk": pk, "sk": sk, "expires_at": (request.hour_ms + KEEP_MS) // 1000}
        return PendingWrite(self.table, pk, sk, serialize_item(item))

    def _query(
        self,
        pk: str,
        cost: ReadCount,
        *,
        projection: str | None = None,
        low: str | None = None,
        high: str | None = None,
        consistent: bool = True,
    ) -> list[dict[str, Any]]:
        condition = "pk = :pk" + (" AND sk BETWEEN :low AND :high" if low is not None else "")
        values: dict[str, Any] = {":pk": {"S": pk}}
        if low is not None:
            values.update({":low": {"S": low}, ":high": {"S": high}})
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": condition,
            "ExpressionAttributeValues": values,
            "ConsistentRead": consistent,
            "ReturnConsumedCapacity": "TOTAL",
        }
        if projection:
            kwargs["ProjectionExpression"] = projection
        out: list[dict[str, Any]] = []
        while True:
            response = self._db.query(**kwargs)
            items = response.get("Items", [])
            cost.add(response, len(items))
            out.extend({k: plain(v) for k, v in raw.items()} for raw in items)
            last = response.get("LastEvaluatedKey")
            if not last:
                return out
            kwargs["ExclusiveStartKey"] = last

    # -- compaction's figures --------------------------------------------------

    def partial_write(self, partial: GroupPartial) -> PendingWrite:
        """A put of a group's partial of an hour: it expires with the hour's group items (``KEEP_MS``),
        the longest a redo of the hour may come."""
        pk, sk = partial.key(self.prefix)
        item = partial.item(self.prefix, expires_at=(partial.hour_ms + KEEP_MS) // 1000)
        return PendingWrite(self.table, pk, sk, serialize_item(item))

    def partials(self, hour_ms: int, cost: ReadCount) -> list[GroupPartial]:
        """Every group's partial of the hour starting at ``hour_ms`` (one Query, every page, consistent).
        A malformed one raises ValueError naming it."""
        return [GroupPartial.from_item(item) for item in self._query(partial_pk(self.prefix, hour_ms), cost)]

    def slice_partials(self, hour_ms: int, slice_ms: int, cost: ReadCount) -> list[GroupPartial]:
        """Every group's slice partial of the re-pack slice at ``slice_ms`` (of the hour at ``hour_ms``;
        one Query, every page, consistent). A malformed one raises ValueError naming it."""
        pk, low = partial_pk(self.prefix, hour_ms, slices=True), f"{format_ts(slice_ms)}#"
        return [GroupPartial.from_item(item) for item in self._query(pk, cost, low=low, high=f"{low}~")]

    def slice_partial(self, hour_ms: int, slice_ms: int, group: int, cost: ReadCount) -> GroupPartial | None:
        """``group``'s slice partial of the re-pack slice at ``slice_ms`` (consistent), None if there is none."""
        pk, sk = GroupPartial(hour_ms, group, 0, slice_ms=slice_ms).key(self.prefix)
        key = {"pk": {"S": pk}, "sk": {"S": sk}}
        response = self._db.get_item(TableName=self.table, Key=key, ConsistentRead=True, ReturnConsumedCapacity="TOTAL")
        raw = response.get("Item")
        cost.add(response, int(raw is not None))
        return None if raw is None else GroupPartial.from_item({k: plain(v) for k, v in raw.items()})

    def fleet_part_write(self, level: int, start_ms: int, figures: Figures, *, fresh: bool = False) -> PendingWrite:
        """A put of compaction's part of a total (sk ``<start>#c``), or with ``fresh`` the re-pack's fresh
        part (``<start>#p``), expiring as the total does."""
        pk, sk = total_pk(self.prefix, level, start_ms), total_sk(start_ms, fleet_part=not fresh, fresh=fresh)
        item = {"pk": pk, "sk": sk, **figures.item(), "expires_at": rollup_ttl(start_ms + level, self._retention_ms)}
        return PendingWrite(self.table, pk, sk, serialize_item(item))

    def fleet_parts_of(self, level: int, from_ms: int, to_ms: int, cost: ReadCount) -> dict[int, Figures]:
        """Compaction's parts of the totals of the intervals in ``[from_ms, to_ms)`` (consistent); the
        rollup function's items of those totals, read on the way, are left out."""
        out: dict[int, Figures] = {}
        low, high = format_ts(from_ms), total_sk(to_ms - 1, fleet_part=True)
        for pk in total_pks(self.prefix, level, from_ms, to_ms):
            for item in self._query(pk, cost, low=low, high=high):
                start, fleet_part = parse_total_sk(item["sk"])
                if fleet_part:
                    out[start] = Figures.from_item(item)
        return out

    def redo_requests(self, limit: int, cost: ReadCount) -> list[RedoRequest]:
        """The first ``limit`` redo requests, oldest hour first (consistent)."""
        kwargs: dict[str, Any] = {
            "TableName": self.table,
            "KeyConditionExpression": "pk = :pk",
            "ExpressionAttributeValues": {":pk": {"S": redo_pk(self.prefix)}},
            "ConsistentRead": True,
            "ProjectionExpression": "sk",
            "ReturnConsumedCapacity": "TOTAL",
        }
        out: list[RedoRequest] = []
        while len(out) < limit:
            response = self._db.query(**kwargs, Limit=limit - len(out))
            items = response.get("Items", [])
            cost.add(response, len(items))
            out += [RedoRequest.parse(item["sk"]["S"]) for item in items]
            if not response.get("LastEvaluatedKey"):
                break
            kwargs["ExclusiveStartKey"] = response["LastEvaluatedKey"]
        return out

    def redo_done(self, requests: Iterable[RedoRequest]) -> None:
        """Delete handled redo requests (one DeleteItem each: a run handles a few)."""
        for request in requests:
            pk, sk = request.key(self.prefix)
            self._db.delete_item(TableName=self.table, Key={"pk": {"S": pk}, "sk": {"S": sk}})
