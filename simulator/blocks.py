"""Blocks in bulk: what ``Layout.pack`` makes of the readings of each ingest batch, from counts.

Ingest packs a batch's readings of one entity (in one bucket) into blocks: runs of a
span under 10 s, each cut at 1,000 readings, a block over 64 KB halved
(:meth:`keydesign.Layout.pack`). The simulator has counts, not readings, so it does
the same arithmetic on arrays:

* **Batches.** Every entity's batches last ``batch_s`` whole seconds and end on its
  own clock (phase: the entity's stable hash mod ``batch_s``, as Kinesis shards are
  polled independently). A batch's blocks are written in its last second. A bucket
  boundary (and the end of the run) closes every batch: a block never straddles a
  bucket, and nothing counted is left unwritten.
* **Runs.** Within a batch a run closes every 10 s (and at the batch's end).
* **Blocks of a run.** A :class:`BlockTable` gives the blocks, write units and bytes of
  a run of ``m`` readings (``m`` up to 1,000; ``q`` full runs of 1,000 and one of the
  rest for more): block sizes are measured by ``keydesign.capacity.BlockSizer`` (the
  planner's: ``Layout.pack`` on representative readings) at a grid of lengths and
  interpolated linearly between them (a block's bytes grow almost linearly with its
  readings), then halved as ``pack`` halves. ``tests/unit/simulator`` checks the
  whole against ``Layout.pack`` on generated readings.

Readings of a batch are spread over its seconds, and the 10 s cut counts from the
batch's start rather than from a run's first reading: per-batch block counts agree
with ``pack`` to rounding, not reading for reading.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from keydesign import stable_hash, write_units
from keydesign.blocks import MAX_BLOCK_READINGS, MAX_BLOCK_SPAN_MS
from keydesign.capacity import BlockSizer, split_sizes

Ints = npt.NDArray[np.int64]
SPAN_S = MAX_BLOCK_SPAN_MS // 1000
#: Run lengths measured by packing; the others are interpolated.
GRID = tuple(sorted({*range(1, 17), *(round(16 * 1.25**k) for k in range(1, 19)), MAX_BLOCK_READINGS}))


@dataclass(frozen=True, slots=True)
class BlockTable:
    """Blocks, write units and item bytes of a run of ``m`` readings, ``m`` = 0 .. 1,000 (index)."""

    blocks: Ints
    units: Ints
    bytes: Ints

    @classmethod
    def measure(cls, sizer: BlockSizer, *, entity: str | None, rate: float) -> BlockTable:
        """Pack runs of the grid's lengths; interpolate the rest; halve as ``pack`` halves."""
        xs: list[int] = []
        ys: list[int] = []
        for m in GRID:
            sizes = sizer.run(m, entity=entity, rate=rate)
            if len(sizes) > 1:
                break  # halved: the lengths from here on are sized by halving the ones below
            xs.append(m)
            ys.append(sizes[0])
        slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) if len(xs) > 1 else float(ys[0])

        def size_of(m: int) -> int:
            if m <= xs[-1]:
                return round(float(np.interp(m, xs, ys)))
            return round(ys[-1] + slope * (m - xs[-1]))

        blocks = np.zeros(MAX_BLOCK_READINGS + 1, dtype=np.int64)
        units = np.zeros_like(blocks)
        size = np.zeros_like(blocks)
        for m in range(1, MAX_BLOCK_READINGS + 1):
            parts = split_sizes(m, size_of)
            blocks[m], units[m], size[m] = len(parts), sum(write_units(p) for p in parts), sum(parts)
        return cls(blocks, units, size)


@dataclass(frozen=True, slots=True)
class Emitted:
    """What every entity writes in each second of a chunk (seconds x entities): blocks, write units,
    item bytes, and the readings they hold."""

    blocks: Ints
    units: Ints
    bytes: Ints
    readings: Ints


class Batcher:
    """Turns per-second reading counts into the blocks each entity's batches write, second by second."""

    def __init__(self, names: Sequence[str], batch_s: int, tables: Sequence[BlockTable], table_of: Ints) -> None:
        if batch_s < 1:
            raise ValueError("a batch lasts at least a second")
        self.batch_s = batch_s
        count = len(names)
        self._phase = np.array([stable_hash(n) % batch_s for n in names], dtype=np.int64)
        self._blocks = np.stack([t.blocks for t in tables])
        self._units = np.stack([t.units for t in tables])
        self._bytes = np.stack([t.bytes for t in tables])
        self._table_of = table_of
        self._run = np.zeros(count, dtype=np.int64)  # readings of each entity's open run
        self._open = np.zeros((4, count), dtype=np.int64)  # blocks, units, bytes, readings of its open batch

    def position(self, second: int) -> Ints:
        """Each entity's second within its batch (0 .. batch_s - 1) at ``second`` of the run."""
        return (second - self._phase) % self.batch_s

    def step(self, first_s: int, counts: Ints, *, close: bool) -> Emitted:
        """The blocks written in seconds ``first_s ..`` for ``counts`` (seconds x entities); ``close``
        ends every batch at the chunk's last second (a bucket boundary or the end of the run)."""
        seconds, entities = counts.shape
        if self.batch_s == 1:  # every second is every entity's batch: one lookup in all
            packed = self._pack(counts, self._table_of[None, :])
            return Emitted(packed[0], packed[1], packed[2], packed[3])
        out = np.zeros((4, seconds, entities), dtype=np.int64)
        for row in range(seconds):
            self._run += counts[row]
            where = self.position(first_s + row)
            batch_end = where == self.batch_s - 1
            run_end = batch_end | ((where + 1) % SPAN_S == 0)
            if close and row == seconds - 1:
                batch_end[:] = run_end[:] = True
            closing = np.flatnonzero(run_end & (self._run > 0))
            if closing.size:
                self._open[:, closing] += self._pack(self._run[closing], self._table_of[closing])
                self._run[closing] = 0
            written = np.flatnonzero(batch_end & (self._open[3] > 0))
            if written.size:
                out[:, row, written] = self._open[:, written]
                self._open[:, written] = 0
        return Emitted(out[0], out[1], out[2], out[3])

    def _pack(self, readings: Ints, table: Ints) -> Ints:
        """(blocks, units, bytes, readings) of one run of ``readings`` each, sized by block table ``table``."""
        full, rest = np.divmod(readings, MAX_BLOCK_READINGS)
        return np.stack(
            [
                full * values[table, MAX_BLOCK_READINGS] + values[table, rest]
                for values in (self._blocks, self._units, self._bytes)
            ]
            + [readings]
        )
