"""Dense marks (``keydesign.writetier``): an entity writing its own blocks in an hour still in the write
tier leaves one in its group's partition of the hour, so that compaction reads its blocks too.

Each is written once per container (a bounded LRU, as the rollup marks; an evicted mark is put again,
which costs a write unit, never correctness): a put of a mark is idempotent, its key and expiry are
the same for every batch of its entity and hour.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from adapters.batch_writer import BatchWriter, PendingWrite, WriteReport, serialize_item
from adapters.recent import Recent
from adapters.retry import Deadline
from keydesign.writetier import DenseMark

#: Marks a container remembers as written: one per dense entity and hour.
DENSE_MARK_ENTRIES = 65_536


@dataclass(slots=True)
class DenseMarksWritten:
    """What one batch's marks came to: the blocks (by index) whose mark is not stored, with the
    reason, and the writes made (marks already written by this container are not written again)."""

    blocked: dict[int, str]
    report: WriteReport


class DenseMarkRecorder:
    """Ingest's dense marks, each written once per container."""

    def __init__(self, writer: BatchWriter, entries: int = DENSE_MARK_ENTRIES) -> None:
        self._writer = writer
        self._written: Recent[DenseMark] = Recent(entries)
        self._lock = threading.Lock()

    def write(self, marks: Mapping[DenseMark, Sequence[int]], deadline: Deadline) -> DenseMarksWritten:
        """Put the ``marks`` not yet written (each with the indexes of the blocks waiting for it)."""
        with self._lock:
            missing = [mark for mark in marks if mark not in self._written]
            for mark in marks:
                self._written.touch(mark)
        if not missing:
            return DenseMarksWritten({}, WriteReport())
        writes = [PendingWrite(m.table, m.pk, m.sk, serialize_item(m.item())) for m in missing]
        report = self._writer.write(writes, deadline)
        blocked: dict[int, str] = {}
        with self._lock:
            for position, mark in enumerate(missing):
                if position in report.written:
                    self._written.add(mark)
                    continue
                why = report.unwritten.get(position) or report.rejected.get(position) or "unknown"
                blocked.update(dict.fromkeys(marks[mark], why))
        return DenseMarksWritten(blocked, report)
