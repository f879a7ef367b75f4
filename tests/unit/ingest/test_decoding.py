"""Record decoding: what counts as one reading, and what is rejected whole."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ingest import decoding
from ingest.decoding import DecodedRecord
from ingest.kinesis_records import parse_event_record
from tests.unit.ingest.kinesis_events import as_json, kinesis_record
from tests.unit.ingest.kpl import aggregate
from tests.unit.ingest.test_hostile_input import reading_text


def decode_record(raw: dict[str, object]) -> DecodedRecord:
    return decoding.decode_record(0, parse_event_record(raw))


def _decode(data: bytes) -> tuple[list[object], list[tuple[str, int | None, int | None]]]:
    decoded = decode_record(kinesis_record(data, 0))
    return (
        [c.value for c in decoded.candidates],
        [(r.field, r.sub_sequence_number, r.index) for r in decoded.rejects],
    )


def test_an_object_is_one_candidate_carrying_the_exact_bytes() -> None:
    decoded = decode_record(kinesis_record(b'{"a": 1.10}', 0))
    (candidate,) = decoded.candidates
    assert candidate.payload() == b'{"a": 1.10}'


def test_an_array_is_one_candidate_per_element_with_its_index() -> None:
    decoded = decode_record(kinesis_record(as_json([{"a": 1}, 2]), 0))
    assert [(c.index, c.value) for c in decoded.candidates] == [(0, {"a": 1}), (1, 2)]
    assert decoded.candidates[0].payload() == b'{"a":1}'


def test_an_empty_array_carries_nothing() -> None:
    assert _decode(b"[]") == ([], [])


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"", "not JSON"),
        (b"nan?", "not JSON"),
        (b'"text"', "got a string"),
        (b"null", "got null"),
        (b"true", "got a boolean"),
    ],
)
def test_what_is_neither_object_nor_array_is_one_reject(data: bytes, reason: str) -> None:
    decoded = decode_record(kinesis_record(data, 0))
    (reject,) = decoded.rejects
    assert reject.field == "data" and reason in reject.reason and reject.payload == data


def test_deep_nesting_is_rejected_not_a_crash() -> None:
    _, rejects = _decode(b"[" * 100_000 + b"]" * 100_000)
    assert rejects == [("data", None, None)]


def test_kpl_members_each_decode_on_their_own() -> None:
    data = aggregate([("a", as_json([{"x": 1}, {"x": 2}])), ("b", b"oops"), ("c", as_json({"y": 1}))])
    values, rejects = _decode(data)
    assert values == [{"x": 1}, {"x": 2}, {"y": 1}]
    assert rejects == [("data", 1, None)]
    decoded = decode_record(kinesis_record(data, 0))
    assert decoded.kpl_members == 3
    assert [c.sub_sequence_number for c in decoded.candidates] == [0, 0, 2]


# -- the fast path for a plain JSON object gives the general path's answer ----------------------


def _both_paths(record: dict[str, object], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    fast = decode_record(record)
    with monkeypatch.context() as patched:
        patched.setattr(decoding, "_plain_object", lambda data: None)
        general = decode_record(record)
    # repr tells 1 from 1.0 and True, and shows NaN, Decimal and lone surrogates as they are
    return repr((fast.candidates, fast.rejects, fast.kpl_members)), repr(
        (general.candidates, general.rejects, general.kpl_members)
    )


_text_around_an_object = st.one_of(
    reading_text(),
    st.builds(
        lambda text, pad: pad + text + pad, reading_text(), st.sampled_from(["", " ", "\n\t\r", "\x0c", "\u00a0"])
    ),
    reading_text().map(lambda text: text[: len(text) // 2]),  # truncated
    reading_text().map(lambda text: text + "x"),  # trailing garbage
    st.builds(lambda a, b: a + b, reading_text(), reading_text()),  # two objects
)
_encodings = st.sampled_from(["utf-8", "utf-8-sig", "utf-16-le", "utf-16-be", "utf-16", "utf-32", "latin-1"])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(text=_text_around_an_object, encoding=_encodings)
def test_the_plain_object_fast_path_decodes_as_the_general_path(
    text: str, encoding: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Given a record of (nearly) one JSON object, in any encoding, with hostile strings and numbers
    data = text.encode(encoding, errors="surrogatepass" if encoding.startswith("utf") else "replace")
    # When it is decoded with the fast path, and again with the general path alone
    fast, general = _both_paths(kinesis_record(data, 0), monkeypatch)
    # Then both give the same candidates and rejects
    assert fast == general


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.binary(max_size=64) | st.binary(max_size=8).map(lambda tail: b"{" + tail))
def test_the_fast_path_agrees_on_any_bytes(data: bytes, monkeypatch: pytest.MonkeyPatch) -> None:
    assert _both_paths(kinesis_record(data, 0), monkeypatch)[0] == _both_paths(kinesis_record(data, 0), monkeypatch)[1]


def test_data_that_is_not_base64_is_one_reject_with_the_text_as_it_arrived() -> None:
    raw = kinesis_record(b"x", 0)
    raw["kinesis"]["data"] = "eyJhIjoxfQ"  # base64 without its padding
    (reject,) = decode_record(raw).rejects
    assert (reject.field, reject.reason, reject.payload) == ("data", "is not valid base64", b"eyJhIjoxfQ")


def test_the_fast_path_takes_one_plain_object_only() -> None:
    assert decoding._plain_object(b'{"a":1} ') == {"a": 1}
    for data in (b'[{"a":1}]', b'{"a":1}x', b'{"a":1}{}', b"{\x00", b'{"t":1e-400}', b"{\xff}", b""):
        assert decoding._plain_object(data) is None, data
