"""The partition-load picture: which series, which values, where the boundary is; and that it draws."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from local_runtime.load_chart import OTHERS, chart_data, draw


def item(pk: str, second: int, *, big: bool = False) -> dict[str, Any]:
    return {
        "pk": pk,
        "sk": f"s#{pk}#{second}",
        "t": f"2026-11-22T07:00:{second:02d}.250Z",
        **({"d": "x" * 1500} if big else {}),
    }


def test_series_are_key_families_per_event_second_hottest_first_with_the_rest_as_one_peak() -> None:
    # Given one shard hot in two buckets, a sub-shard, and three quiet shards
    items = [item("0003#2026-11-22T06:59", 0) for _ in range(5)]
    items += [item("0003#2026-11-22T07:00", 2) for _ in range(7)]
    items += [item("0003#2026-11-22T07:00#sensor-alpha-001#001", 3) for _ in range(4)]
    items += [item("0001#2026-11-22T07:00", 1), item("0002#2026-11-22T07:00", 1), item("0004#2026-11-22T07:00", 3)]
    items.append(item("0002#2026-11-22T07:00", 2, big=True))  # 2 write units
    # When the chart keeps the top 3 families
    chart = chart_data(items, layout_kind="hybrid", threshold_wcu=500, boundary_ms=1_795_330_802_500, top=3)
    assert chart is not None
    # Then one line per family (the bucket dropped), seconds from the first one, and the rest as their peak
    series = dict(chart.series)
    assert list(series) == ["0003", "0003#sensor-alpha-001#001", "0002", OTHERS]
    assert chart.seconds == [0, 1, 2, 3]
    assert series["0003"] == [5, 0, 7, 0]
    assert series["0002"] == [0, 1, 2, 0]
    assert series[OTHERS] == [0, 1, 0, 1]
    assert chart.boundary_s == 2.5
    assert chart.as_dict()["series"][0] == {"label": "0003", "peak_wcu_per_s": 7}


def test_no_items_no_chart() -> None:
    assert chart_data([], layout_kind="hybrid", threshold_wcu=500) is None


def test_it_draws_a_png(tmp_path: Path) -> None:
    chart = chart_data([item("0001#2026-11-22T07:00", s) for s in range(3)], layout_kind="hybrid", threshold_wcu=500)
    assert chart is not None and chart.boundary_s is None
    path = draw(chart, tmp_path / "out" / "load.png", title="test")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
