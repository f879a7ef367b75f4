"""The partition-load picture: which series, which values, where the boundary is; and that it draws."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

from demo.report import OTHERS, draw_load, load_series


def test_series_are_key_families_per_second_hottest_first_with_the_rest_as_one_peak() -> None:
    # Given write units per second of one hot shard, a sub-shard and three quiet shards (seconds 100-103)
    families = {
        "0003": Counter({100: 5, 102: 7}),
        "0003#sensor-alpha-001#001": Counter({103: 4}),
        "0001": Counter({101: 1}),
        "0002": Counter({101: 1, 102: 2}),
        "0004": Counter({103: 1}),
    }
    # When the picture keeps the top 3 families
    first, series = load_series(families, top=3)
    # Then one line per family, seconds from the first one, and the rest as their peak second by second
    assert first == 100
    assert dict(series) == {
        "0003": [5, 0, 7, 0],
        "0003#sensor-alpha-001#001": [0, 0, 0, 4],
        "0002": [0, 1, 2, 0],
        OTHERS: [0, 1, 0, 1],
    }


def test_it_draws_a_png_labelled_with_the_lowered_threshold(tmp_path: Path) -> None:
    drawn = draw_load({"0001": Counter({5: 3, 6: 1})}, tmp_path / "out" / "load.png", threshold=8, boundary_ms=5_500)
    assert (tmp_path / "out" / "load.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert drawn["series"] == [{"label": "0001", "peak_wcu_per_s": 3}] and drawn["threshold_wcu"] == 8
    assert "first reading" in drawn["measures"]
