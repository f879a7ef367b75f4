"""Items of the format before blocks, read as a block of one reading (``keydesign.legacy``)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from keydesign import BlockError, Layout, Reading, ShardMap
from keydesign.legacy import LEGACY_VERSION, is_legacy, legacy_block, legacy_entity
from tests.legacy_items import legacy_item

T0 = 1_795_327_200_000  # 2026-11-22T06:00:00Z


@pytest.mark.parametrize("kind", ["random", "calculated", "hybrid"])
def test_an_old_item_is_a_block_of_its_one_reading_older_than_any_block(kind: str) -> None:
    layout = Layout.from_settings(kind=kind, bucket="1h", table_prefix="readings")
    sent = Reading("sensor-1", "evt-1", T0 + 250, {"temp": 21.5, "count": 3, "big": 1e100}, {"site": "p-7"})
    item = legacy_item(sent, layout, ShardMap.initial(layout.bucket, 4), ttl=1)

    header, got = legacy_block(item)

    assert is_legacy(item) and not is_legacy({**item, "b": {"B": b"\x01"}})
    assert got == sent and type(got.measures["count"]) is int and type(got.measures["temp"]) is float
    assert (header.count, header.first_ms, header.last_ms, header.version) == (1, T0 + 250, T0 + 250, LEGACY_VERSION)
    assert LEGACY_VERSION < 0  # below every block's version, a Kinesis sequence number
    assert legacy_entity(item["pk"]["S"], item["sk"]["S"], layout.kind) == ("sensor-1", kind == "hybrid")


def test_what_the_reader_before_blocks_left_out_is_left_out() -> None:
    item: dict[str, Any] = {
        "sk": {"S": "2026-11-22T06:00:00.000Z#e"},
        "e": {"S": "s"},
        "t": {"S": "2026-11-22T06:00:00.000Z"},
        "i": {"S": "e"},
        "m": {"M": {"v": {"N": "2.50"}, "text": {"S": "x"}}},
        "d": {"M": {"site": {"S": "a"}, "n": {"N": "1"}}},
    }
    _, got = legacy_block(item)
    assert (got.measures, got.dimensions) == ({"v": 2.5}, {"site": "a"})


number_or_text = st.one_of(st.text(max_size=12), st.sampled_from(["1", "2.5", "-0", "1e400", "NaN", "x"]))
#: An attribute value: text, or DynamoDB JSON of a string, number or map of them.
typed = st.one_of(
    st.text(max_size=30),
    st.dictionaries(
        st.sampled_from(["S", "N", "M"]),
        st.one_of(
            number_or_text,
            st.dictionaries(
                st.text(max_size=3),
                st.dictionaries(st.sampled_from(["S", "N"]), number_or_text, max_size=1),
                max_size=2,
            ),
        ),
        max_size=1,
    ),
)


@settings(suppress_health_check=[HealthCheck.too_slow], deadline=None)
@given(
    item=st.dictionaries(st.sampled_from(["sk", "e", "t", "i", "m", "d", "ttl", "q"]), typed, max_size=8),
    base=st.booleans(),
)
def test_any_item_reads_as_a_reading_or_fails_with_a_block_error(item: dict[str, Any], base: bool) -> None:
    if base:  # near misses of a well-formed item, one attribute replaced
        item = {
            "sk": {"S": "s#2026-11-22T06:00:00.000Z#e"},
            "e": {"S": "s"},
            "t": {"S": "2026-11-22T06:00:00.000Z"},
            "i": {"S": "e"},
            **item,
        }
    try:
        header, got = legacy_block(item)
    except BlockError:
        return
    assert header.first_ms == got.ts_ms and header.count == 1


def test_a_measure_that_is_not_a_number_is_named() -> None:
    item = {"sk": {"S": "2026-11-22T06:00:00.000Z#e"}, "e": {"S": "s"}, "t": {"S": "2026-11-22T06:00:00.000Z"}}
    item["i"] = {"S": "e"}
    with pytest.raises(BlockError, match="a measure in 'm' that is not a number"):
        legacy_block({**item, "m": {"M": {"v": {"N": "twelve"}}}})
