"""Runs: how a stream batch's load is cut and named so that a redelivered batch counts nothing twice.

The control table puts each run under its name (a put replaces, an ADD would add), so
these tests model it with a dict: name -> the load that run holds. Lambda redelivers
a batch whole (the function failed or timed out, maybe after its puts landed), from a
record the partial batch response named (the first record of a run whose put failed),
or in halves (bisect on error); the next batch may be longer or shorter than the last.
"""

from __future__ import annotations

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st

from hotkeys.control_table import encode_load
from hotkeys.detector import DetectorConfig, Observation, tally
from hotkeys.logic import RUN_BYTES, Counted, Run, runs_of
from keydesign.model import ENTITY_ID_MAX
from tests.unit.keydesign.strategies import PROPERTY

WINDOW_MS = 1_000
T0 = 1_795_000_000_000


def counted(
    n: int, ts_ms: int, entity: str = "sensor-1", units: int = 1, key: str = "0001#2026-11-22T06:00"
) -> Counted:
    obs = Observation(
        partition_key=key, entity=entity, write_units=units, approx_time_ms=ts_ms, event_name="INSERT", shared_key=True
    )
    return Counted(position=n, sequence_number=str(10**20 + n), observation=obs)


def runs(records: list[Counted]) -> list[Run]:
    return runs_of(records, window_ms=WINDOW_MS, table="readings")


def put(store: dict[str, Counter[str]], run: Run) -> None:
    load: Counter[str] = Counter()
    for record in run.members:
        load[record.observation.entity] += record.observation.write_units
    store[run.run_id] = load  # replaces an earlier copy of the same run


def total(store: dict[str, Counter[str]]) -> Counter[str]:
    out: Counter[str] = Counter()
    for load in store.values():
        out.update(load)
    return out


def test_a_run_ends_where_the_window_changes_and_is_named_by_its_first_record() -> None:
    records = [counted(0, T0), counted(1, T0 + 400), counted(2, T0 + 1_000), counted(3, T0 + 1_999)]
    cut = runs(records)
    assert [(r.window_start_ms, [m.position for m in r.members]) for r in cut] == [(T0, [0, 1]), (T0 + 1_000, [2, 3])]
    assert [r.run_id for r in cut] == [f"readings#{10**20}", f"readings#{10**20 + 2}"]
    # A redelivery from the second run's first record makes that run again, under the same name
    assert runs(records[2:]) == cut[1:]


def test_a_run_too_large_to_store_is_cut_where_it_would_outgrow_an_item() -> None:
    # Given one window of 4,000 writes, each by another entity (of the longest id) with its own sub-shard key,
    # every one of them split (so every entity is kept, not only the busiest)
    def entity(n: int) -> str:
        return f"{n:05d}".rjust(ENTITY_ID_MAX, "x")

    records = [
        counted(n, T0 + n % 1_000, entity=entity(n), units=1 + n % 400, key=f"0001#2026-11-22T06:00#{entity(n)}#007")
        for n in range(4_000)
    ]
    cut = runs(records)
    # Then it is stored as several runs, every record in exactly one
    assert len(cut) > 1
    assert [m.position for r in cut for m in r.members] == list(range(4_000))
    # And each run's stored load stays under the bound (an item holds 400 KB)
    config = DetectorConfig(window_ms=WINDOW_MS)
    for run in cut:
        full = tally((m.observation for m in run.members), config)[run.window_start_ms].load()
        kept, _ = full.select(config.counters_per_window, always=full.entities)
        assert len(encode_load(kept)) <= RUN_BYTES < 400 * 1024
    # And the cuts depend only on the records from the batch's first on: delivered again, the same runs
    assert runs(records) == cut


@st.composite
def streams(draw: st.DrawFn) -> list[Counted]:
    """One stream shard's counted records in order: write times rise, now and then into the next window."""
    n = draw(st.integers(1, 40))
    ts, out = T0, []
    for i in range(n):
        ts += draw(st.sampled_from((0, 1, 300, 999, 1_000, 2_500)))
        out.append(counted(i, ts, entity=draw(st.sampled_from(("a", "b", "c"))), units=draw(st.integers(1, 400))))
    return out


@PROPERTY
@given(records=streams(), data=st.data())
def test_however_lambda_redelivers_every_record_is_counted_exactly_once(
    records: list[Counted], data: st.DataObject
) -> None:
    store: dict[str, Counter[str]] = {}
    # Deliveries Lambda owes: the halves of a bisected batch, in order
    owed: list[tuple[int, int]] = []
    start, deliveries = 0, 0
    while start < len(records) or owed:
        deliveries += 1
        healthy = deliveries > 30  # faults end at last (or the records would go to the failure destination)
        if owed:
            start, end = owed.pop(0)
        else:
            end = data.draw(st.integers(start + 1, len(records)), label="batch end")
        batch = records[start:end]
        cut = runs(batch)
        # Its puts run in parallel: any of them may land, the rest fail (throttled) or never start (a crash)
        landed = [healthy or data.draw(st.booleans(), label=f"put {run.run_id} landed") for run in cut]
        for run, ok in zip(cut, landed, strict=True):
            if ok:
                put(store, run)
        if not healthy and data.draw(st.booleans(), label="function failed"):
            # Retried whole (if it was not a half, maybe with more or fewer records), or bisected
            if len(batch) > 1 and data.draw(st.booleans(), label="bisect"):
                mid = start + len(batch) // 2
                owed = [(start, mid), (mid, end), *owed]
            else:
                owed = [(start, end), *owed] if owed else []
            continue
        failed = [run for run, ok in zip(cut, landed, strict=True) if not ok]
        if failed:
            # The partial batch response names the failed runs' records; Lambda resumes at the lowest
            start, owed = failed[0].members[0].position, []
            continue
        start = end
    expected: Counter[str] = Counter()
    for record in records:
        expected[record.observation.entity] += record.observation.write_units
    assert total(store) == expected


def test_adding_each_delivery_instead_would_count_a_redelivered_batch_twice() -> None:
    # The behaviour the names exist for: the same batch delivered twice...
    records = [counted(n, T0 + n * 10) for n in range(10)]
    named: dict[str, Counter[str]] = {}
    added: Counter[str] = Counter()
    for _ in range(2):
        for run in runs(records):
            put(named, run)
            added.update({"sensor-1": sum(m.observation.write_units for m in run.members)})
    # ...is counted once under its names, twice when added
    assert total(named) == Counter({"sensor-1": 10})
    assert added == Counter({"sensor-1": 20})
