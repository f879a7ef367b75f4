"""Streaming aggregation into epoch-aligned intervals, checked against a brute-force computation."""

from __future__ import annotations

import random
from collections import defaultdict

import pytest

from keydesign import format_ts, parse_timestamp
from query.aggregate import SeriesBuilder

T = parse_timestamp("2026-11-22T06:00:00Z")


def brute_force(rows: list[tuple[int, dict[str, float]]], interval: int) -> dict[str, dict[str, dict[str, float]]]:
    groups: dict[int, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for ts, measures in rows:
        for name, value in measures.items():
            groups[ts - ts % interval][name].append(value)
    return {
        format_ts(start): {
            name: {"count": len(v), "min": min(v), "max": max(v), "sum": sum(v), "avg": sum(v) / len(v)}
            for name, v in by_name.items()
        }
        for start, by_name in sorted(groups.items())
    }


def test_intervals_match_a_brute_force_computation() -> None:
    # Given readings at random times with sometimes-missing measures
    rng = random.Random(3)
    rows = sorted(
        (T + rng.randrange(0, 6 * 3_600_000), {k: rng.uniform(-50, 50) for k in ("a", "b") if rng.random() < 0.8})
        for _ in range(500)
    )
    builder = SeriesBuilder(900_000, ("count", "min", "max", "avg", "sum"))

    for ts, measures in rows:
        builder.add(format_ts(ts), measures)
    got = {i.start: i.measures for i in builder.intervals()}

    expected = brute_force(rows, 900_000)
    assert list(got) == list(expected)
    for start, by_name in expected.items():
        assert set(got[start]) == set(by_name)
        for name, figures in by_name.items():
            assert got[start][name] == pytest.approx(figures)
    assert builder.total == 500


def test_only_the_requested_statistics_are_reported_and_empty_intervals_are_left_out() -> None:
    builder = SeriesBuilder(3_600_000, ("min", "max"))
    builder.add(format_ts(T + 10), {"temp": 3})
    builder.add(format_ts(T + 20), {"temp": 1})
    builder.add(format_ts(T + 3 * 3_600_000), {"temp": 7})

    intervals = builder.intervals()

    assert [(i.start, i.readings, i.measures) for i in intervals] == [
        (format_ts(T), 2, {"temp": {"min": 1, "max": 3}}),
        (format_ts(T + 3 * 3_600_000), 1, {"temp": {"min": 7, "max": 7}}),
    ]


def test_integers_stay_exact() -> None:
    builder = SeriesBuilder(60_000, ("sum", "count"))
    for n in range(3):
        builder.add(format_ts(T + n), {"c": 2**53 + 1})

    assert builder.intervals()[0].measures["c"] == {"sum": 3 * (2**53 + 1), "count": 3}


def test_the_last_interval_before_year_10000_closes() -> None:
    builder = SeriesBuilder(86_400_000, ("count",))
    builder.add("9999-12-31T23:59:59.999Z", {"x": 1})

    assert builder.intervals()[0].start == "9999-12-31T00:00:00.000Z"
