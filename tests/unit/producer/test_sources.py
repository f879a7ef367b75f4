"""JSON Lines and CSV input: good lines become readings, bad lines say which and why."""

from __future__ import annotations

import io

import pytest

from producer.sources import InputError, read_csv, read_jsonl


def test_json_lines_skip_blanks_and_report_bad_lines() -> None:
    text = '{"entity_id": "a", "timestamp": 1795000000000, "measures": {"t": 1}}\n\nnot json\n[1]\n'
    items = list(read_jsonl(io.StringIO(text)))
    assert [i.line for i in items] == [1, 3, 4]
    assert items[0].reading == {"entity_id": "a", "timestamp": 1795000000000, "measures": {"t": 1}}
    assert items[1].reading is None and "line 3: not JSON" in (items[1].error or "")
    assert "expected a JSON object, got list" in (items[2].error or "")


def test_csv_columns_map_to_measures_and_dimensions() -> None:
    text = (
        "entity_id,timestamp,event_id,measures.temp,measures.count,dimensions.site\n"
        "sensor-1,1795000000000,e1,21.5,3,plant-7\n"
        "sensor-2,2026-11-22T06:57:51.123Z,,-4,,\n"
    )
    items = list(read_csv(io.StringIO(text)))
    assert [i.reading for i in items] == [
        {
            "entity_id": "sensor-1",
            "timestamp": 1795000000000,
            "event_id": "e1",
            "measures": {"temp": 21.5, "count": 3},
            "dimensions": {"site": "plant-7"},
        },
        {"entity_id": "sensor-2", "timestamp": "2026-11-22T06:57:51.123Z", "measures": {"temp": -4}},
    ]


def test_a_bad_csv_line_is_reported_and_the_rest_read() -> None:
    text = "entity_id,timestamp,measures.t\na,1795000000000,warm\nb,1795000000000\nc,1795000000000,1\n"
    items = list(read_csv(io.StringIO(text)))
    assert [(i.line, i.error) for i in items[:2]] == [
        (2, "line 2: measures.t: 'warm' is not a number"),
        (3, "line 3: 2 cells, the header has 3"),
    ]
    assert items[2].reading == {"entity_id": "c", "timestamp": 1795000000000, "measures": {"t": 1}}


@pytest.mark.parametrize(
    ("header", "fragment"), [("entity_id,timestamp,temp", "'temp'"), ("entity_id,measures.t", "no timestamp")]
)
def test_a_csv_header_that_cannot_be_understood_stops_the_file(header: str, fragment: str) -> None:
    with pytest.raises(InputError, match=fragment):
        list(read_csv(io.StringIO(header + "\n")))
