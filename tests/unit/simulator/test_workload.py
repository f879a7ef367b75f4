"""The workload: who writes how much, second by second, and refusals that name the field."""

from __future__ import annotations

import numpy as np
import pytest

from keydesign import InvalidInput
from simulator import Burst, HotEntity, SimWorkload
from simulator.workload import CountSource
from tests.unit.simulator.workloads import HOT, START
from tsctl import seed


def workload(**changes: object) -> SimWorkload:
    fields: dict[str, object] = {
        "rate": 1_000.0,
        "entities": 11,
        "start_ms": START,
        "duration_s": 60,
        "hot": (HotEntity(HOT, 400.0),),
    }
    fields.update(changes)
    return SimWorkload(**fields)  # type: ignore[arg-type]


def test_background_entities_share_the_rest_of_the_global_rate_by_zipf() -> None:
    w = workload(zipf=1.0)
    rates = w.background_rates()
    assert rates.sum() == pytest.approx(600.0)
    assert rates[0] / rates[1] == pytest.approx(2.0)  # rank 1 writes twice rank 2 at s = 1
    assert w.names[:2] == ("sensor-00001", "sensor-00002") and w.names[-1] == HOT
    assert w.names[0] == seed.sensor_name(1)
    assert w.peak_entity_rate() == 400.0


def test_a_hot_entity_writes_its_rate_in_its_bursts_and_a_typical_rate_outside() -> None:
    w = workload(hot=(HotEntity(HOT, 400.0, (Burst(10, 20),)),))
    rates = w.rates(0, 30)[:, -1]
    assert set(rates[10:20]) == {400.0}
    assert set(rates[:10]) == set(rates[20:]) == {60.0}  # 600/s over 10 background entities


def test_even_arrivals_write_exactly_the_rate() -> None:
    w = workload(arrivals="even", duration_s=60)
    source = CountSource(w)
    counts = np.vstack([source.counts(0, 30), source.counts(30, 30)])
    assert counts.sum(axis=0)[-1] == 400 * 60
    assert counts.sum() == pytest.approx(1_000 * 60, abs=w.entities)
    assert counts[:, -1].min() == counts[:, -1].max() == 400  # never more than one off, here exact


def test_poisson_arrivals_average_the_rate_and_are_reproducible() -> None:
    first = CountSource(workload(arrivals="poisson")).counts(0, 60)
    again = CountSource(workload(arrivals="poisson")).counts(0, 60)
    assert (first == again).all()
    assert first[:, -1].mean() == pytest.approx(400, rel=0.02)


def test_counts_must_be_drawn_in_order() -> None:
    source = CountSource(workload())
    source.counts(0, 10)
    with pytest.raises(ValueError, match="in order"):
        source.counts(20, 10)


@pytest.mark.parametrize(
    ("changes", "field"),
    [
        ({"rate": 0.0}, "rate"),
        ({"entities": 0}, "entities"),
        ({"batching_window_s": 301}, "batching_window"),
        ({"batching_window_s": -1}, "batching_window"),
        ({"zipf": -1.0}, "zipf"),
        ({"duration_s": 0}, "duration"),
        ({"start_ms": START + 1}, "start"),
        ({"hot": (HotEntity(HOT, 2_000.0),)}, "hot"),
        ({"hot": (HotEntity("bad#id", 10.0),)}, "hot"),
        ({"hot": (HotEntity(HOT, 10.0, (Burst(50, 70),)),)}, f"hot.{HOT}"),
        ({"hot": (HotEntity("sensor-00002", 10.0),)}, "hot.sensor-00002"),
        ({"entities": 1, "hot": (HotEntity(HOT, 10.0),)}, "entities"),
    ],
)
def test_impossible_workloads_are_refused_naming_the_field(changes: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidInput) as exc:
        workload(**changes)
    assert exc.value.field == field
