"""Lambda's stream failure semantics, as the emulator applies them, with fake handlers and streams."""

from __future__ import annotations

import threading
from collections import Counter
from typing import Any

import pytest

from infra.config import Context
from local_runtime.event_source_mapping import (
    RECORD_AGE_EXCEEDED,
    RETRY_ATTEMPTS_EXHAUSTED,
    BatchRunner,
    EventSourceMapping,
    MappingConfig,
    MappingStats,
    _Stopped,
)
from local_runtime.functions import FunctionError
from local_runtime.stream_sources import SourceRecord, StartingPosition
from tests.unit.local_runtime.fakes import ARRIVAL_S, FakeDestination, FakeFunction, FakeStream, failing, record

SHARD = "shardId-000000000000"
WAIT_S = 10.0


def batch(n: int, first: int = 100) -> list[SourceRecord]:
    return [record(SHARD, first + i) for i in range(n)]


def runner(
    function: FakeFunction,
    *,
    destination: FakeDestination | None = None,
    stopping: bool = False,
    now_s: float = ARRIVAL_S + 1,
    **config: Any,
) -> tuple[BatchRunner, MappingStats]:
    stats = MappingStats()
    waits: list[float] = []

    def wait(seconds: float) -> bool:
        waits.append(seconds)
        return stopping

    run = BatchRunner(
        source=FakeStream(),
        function=function,
        function_arn="arn:aws:lambda:eu-west-1:123456789012:function:fake",
        config=MappingConfig(**config),
        destination=destination,
        stats=stats,
        stats_lock=threading.Lock(),
        wait=wait,
        wall_clock=lambda: now_s,
    )
    return run, stats


# -- BatchRunner: one batch, every outcome ---------------------------------------------


def test_a_successful_batch_is_invoked_once() -> None:
    # Given a handler that succeeds
    function = FakeFunction()
    run, stats = runner(function)
    # When a batch of five is delivered
    run.run(SHARD, batch(5))
    # Then it is invoked once with all five, in order
    assert function.calls == [["100", "101", "102", "103", "104"]]
    assert (stats.invocations, stats.records_succeeded, stats.retries) == (1, 5, 0)


def test_a_partial_failure_retries_from_the_lowest_reported_sequence_number() -> None:
    # Given a handler that reports records 103 and 102 failed the first time
    responses = iter([{"batchItemFailures": [{"itemIdentifier": "103"}, {"itemIdentifier": "102"}]}, None])
    function = FakeFunction(lambda _seqs: next(responses))
    run, stats = runner(function)
    # When the batch is delivered
    run.run(SHARD, batch(5))
    # Then the retry starts at 102: 100 and 101 are checkpointed, 102..104 come again
    assert function.calls == [["100", "101", "102", "103", "104"], ["102", "103", "104"]]
    assert (stats.partial_failures, stats.retries, stats.bisections, stats.records_succeeded) == (1, 1, 0, 5)


def test_a_failure_named_by_a_number_two_records_share_retries_from_the_first_of_them() -> None:
    # Given a batch in which two records carry one sequence number (a source that numbered two
    # writes at once alike), and a handler that reports that number failed the first time
    records = batch(4)
    records[2] = record(SHARD, 101)
    responses = iter([{"batchItemFailures": [{"itemIdentifier": "101"}]}, None])
    function = FakeFunction(lambda _seqs: next(responses))
    run, _ = runner(function)
    # When the batch is delivered
    run.run(SHARD, records)
    # Then the retry starts at the first record numbered 101: nothing that may have failed is checkpointed
    assert function.calls == [["100", "101", "101", "103"], ["101", "101", "103"]]


@pytest.mark.parametrize(
    "response",
    [
        {"batchItemFailures": [{"itemIdentifier": ""}]},
        {"batchItemFailures": [{"itemIdentifier": None}]},
        {"batchItemFailures": [{"sequenceNumber": "101"}]},
        {"batchItemFailures": [{"itemIdentifier": "999"}]},
        {"batchItemFailures": "101"},
    ],
    ids=["empty", "null", "wrong-key", "not-in-batch", "not-a-list"],
)
def test_a_malformed_partial_response_fails_the_whole_batch(response: dict[str, Any]) -> None:
    responses = iter([response, None])
    function = FakeFunction(lambda _seqs: next(responses))
    run, stats = runner(function)
    run.run(SHARD, batch(4))
    # The whole batch again, not bisected: the function did not error
    assert function.calls == [["100", "101", "102", "103"]] * 2
    assert (stats.complete_failures, stats.bisections) == (1, 0)


@pytest.mark.parametrize("response", [None, {}, {"batchItemFailures": []}, {"batchItemFailures": None}, "ok"])
def test_responses_lambda_treats_as_success(response: Any) -> None:
    function = FakeFunction(lambda _seqs: response)
    run, stats = runner(function)
    run.run(SHARD, batch(3))
    assert len(function.calls) == 1
    assert stats.records_succeeded == 3


def test_without_report_batch_item_failures_the_response_is_ignored() -> None:
    function = FakeFunction(lambda _seqs: {"batchItemFailures": [{"itemIdentifier": "100"}]})
    run, stats = runner(function, report_batch_item_failures=False)
    run.run(SHARD, batch(3))
    assert len(function.calls) == 1
    assert stats.partial_failures == 0


def test_bisect_isolates_a_poison_record_and_sends_only_it_to_the_destination() -> None:
    # Given a handler that fails any batch holding record 105, and room for enough retries
    function = FakeFunction(failing({"105"}))
    destination = FakeDestination()
    run, stats = runner(function, destination=destination, max_retries=10)
    # When a batch of eight is delivered
    run.run(SHARD, batch(8))
    # Then bisection narrows down to 105 alone, which is skipped after its retries
    assert set(function.delivered) == {str(s) for s in range(100, 108)}
    assert stats.records_succeeded == 7
    assert stats.records_skipped == 1
    assert [m["KinesisBatchInfo"]["startSequenceNumber"] for m in destination.messages] == ["105"]
    message = destination.messages[0]
    info = message["KinesisBatchInfo"]
    assert (info["endSequenceNumber"], info["batchSize"], info["shardId"]) == ("105", 1, SHARD)
    assert message["requestContext"]["condition"] == RETRY_ATTEMPTS_EXHAUSTED
    assert message["requestContext"]["approximateInvokeCount"] == 11  # the first attempt and 10 retries
    assert message["responseContext"]["functionError"] == "Unhandled"
    # And no good record was delivered after it succeeded, except with 105 in its batch
    succeeded_calls = [c for c in function.calls if "105" not in c]
    assert sorted(s for c in succeeded_calls for s in c) == sorted(str(s) for s in range(100, 108) if s != 105)


def test_bisect_halves_inherit_the_attempts_so_the_cap_bounds_the_whole_search() -> None:
    # Given two retries only: the halves of a split count against the same cap
    function = FakeFunction(failing({"100"}))
    destination = FakeDestination()
    run, stats = runner(function, destination=destination, max_retries=2)
    run.run(SHARD, batch(8))
    # 8 -> 4+4 -> 2+2: the pair holding the poison record is skipped after its third invocation
    assert function.calls[:3] == [[str(s) for s in range(100, 108)], ["100", "101", "102", "103"], ["100", "101"]]
    skipped = [
        (m["KinesisBatchInfo"]["startSequenceNumber"], m["KinesisBatchInfo"]["batchSize"]) for m in destination.messages
    ]
    assert skipped == [("100", 2)]
    assert stats.records_succeeded == 6
    assert stats.bisections == 2


def test_a_record_failing_n_times_then_succeeding_is_not_lost() -> None:
    failures = Counter[str]()

    def flaky(sequences: list[str]) -> Any:
        if "102" in sequences and failures["102"] < 3:
            failures["102"] += 1
            return {"batchItemFailures": [{"itemIdentifier": "102"}]}
        return None

    function = FakeFunction(flaky)
    run, stats = runner(function, max_retries=5)
    run.run(SHARD, batch(4))
    assert function.calls == [["100", "101", "102", "103"]] + [["102", "103"]] * 3
    assert (stats.records_succeeded, stats.records_skipped, stats.retries) == (4, 0, 3)


def test_without_bisect_the_whole_batch_is_skipped_after_the_retry_cap() -> None:
    function = FakeFunction(failing({"101"}))
    destination = FakeDestination()
    run, stats = runner(function, destination=destination, max_retries=3, bisect_on_error=False)
    run.run(SHARD, batch(4))
    assert len(function.calls) == 4
    assert [m["KinesisBatchInfo"]["batchSize"] for m in destination.messages] == [4]
    assert stats.records_skipped == 4


def test_zero_retries_means_one_invocation() -> None:
    function = FakeFunction(failing({"100"}))
    destination = FakeDestination()
    run, _ = runner(function, destination=destination, max_retries=0)
    run.run(SHARD, batch(2))
    assert len(function.calls) == 1
    assert destination.messages[0]["requestContext"]["approximateInvokeCount"] == 1


def test_records_older_than_the_maximum_age_are_skipped_without_an_invocation() -> None:
    # Given two records that arrived two hours ago and one that just arrived, and a one-hour maximum age
    now = ARRIVAL_S + 7_200
    records = [record(SHARD, 1), record(SHARD, 2), record(SHARD, 3, arrival_s=now - 5)]
    function = FakeFunction()
    destination = FakeDestination()
    run, stats = runner(function, destination=destination, max_record_age_s=3_600, now_s=now)
    # When the batch is delivered
    run.run(SHARD, records)
    # Then only the young record reaches the function; the old ones go to the destination as one batch
    assert function.calls == [["3"]]
    (message,) = destination.messages
    assert message["requestContext"]["condition"] == RECORD_AGE_EXCEEDED
    assert message["requestContext"]["approximateInvokeCount"] == 0
    assert "responseContext" not in message
    assert (message["KinesisBatchInfo"]["startSequenceNumber"], message["KinesisBatchInfo"]["endSequenceNumber"]) == (
        "1",
        "2",
    )
    assert stats.skipped_by_condition == Counter({RECORD_AGE_EXCEEDED: 2})


def test_a_retried_record_that_ages_out_stops_being_retried() -> None:
    # Given a clock that moves an hour per invocation and a handler that always fails
    clock = {"now": ARRIVAL_S}

    def fail_and_age(_seqs: list[str]) -> Any:
        clock["now"] += 3_600
        raise FunctionError("down")

    stats = MappingStats()
    destination = FakeDestination()
    run = BatchRunner(
        source=FakeStream(),
        function=FakeFunction(fail_and_age),
        function_arn="arn",
        config=MappingConfig(max_retries=-1, max_record_age_s=5_000, bisect_on_error=False),
        destination=destination,
        stats=stats,
        stats_lock=threading.Lock(),
        wait=lambda _s: False,
        wall_clock=lambda: clock["now"],
    )
    run.run(SHARD, batch(2))
    # Unlimited retries end when the records pass the maximum age (after the second invocation)
    assert stats.invocations == 2
    assert [m["requestContext"]["condition"] for m in destination.messages] == [RECORD_AGE_EXCEEDED]


def test_stopping_during_a_retry_backoff_abandons_the_batch() -> None:
    function = FakeFunction(failing({"100"}))
    run, _ = runner(function, stopping=True, max_retries=5)
    with pytest.raises(_Stopped):
        run.run(SHARD, batch(2))
    assert len(function.calls) == 1


def test_the_ingest_mapping_takes_the_stack_settings() -> None:
    stack = Context.parse(
        {
            "ingest_batch_size": 500,
            "ingest_batching_window_s": 2,
            "ingest_max_retries": 7,
            "ingest_max_record_age_s": 900,
        }
    )
    config = MappingConfig.for_stream(stack, "ingest", poll_interval_s=0.1)
    assert (config.batch_size, config.batching_window_s, config.max_retries, config.max_record_age_s) == (
        500,
        2.0,
        7,
        900,
    )
    assert config.bisect_on_error and config.report_batch_item_failures
    assert config.starting_position is StartingPosition.TRIM_HORIZON
    assert config.poll_interval_s == 0.1


def test_invalid_mapping_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="batch_size"):
        MappingConfig(batch_size=0)
    with pytest.raises(ValueError, match="max_retries"):
        MappingConfig(max_retries=-2)


# -- EventSourceMapping: shards, batches, order, catching up ----------------------------


def mapping(stream: FakeStream, function: FakeFunction, **config: Any) -> EventSourceMapping:
    settings = {"poll_interval_s": 0.01, "retry_base_s": 0.001, "retry_max_s": 0.01, **config}
    return EventSourceMapping(
        name="test",
        source=stream,
        function=function,
        function_arn="arn",
        config=MappingConfig(**settings),
        destination=FakeDestination(),
    )


def test_every_shard_is_delivered_in_order_in_batches_of_at_most_batch_size() -> None:
    stream = FakeStream(
        {"shard-a": [record("shard-a", i) for i in range(25)], "shard-b": [record("shard-b", i) for i in range(7)]}
    )
    function = FakeFunction()
    esm = mapping(stream, function, batch_size=10)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    assert all(len(call) <= 10 for call in function.calls)
    assert sorted(function.delivered, key=int) == sorted(
        [str(i) for i in range(25)] + [str(i) for i in range(7)], key=int
    )
    stats = esm.snapshot()
    assert (stats["records_received"], stats["records_succeeded"], stats["shards"]) == (32, 32, 2)


def test_a_batch_never_exceeds_the_payload_limit() -> None:
    records = [record(SHARD, i, payload="x" * 1_000) for i in range(10)]
    function = FakeFunction()
    esm = mapping(FakeStream({SHARD: records}), function, batch_size=100, max_payload_bytes=3 * records[0].size)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    assert [len(c) for c in function.calls] == [3, 3, 3, 1]


def test_partial_failures_keep_the_shard_in_order_and_redeliver_only_what_failed() -> None:
    seen = Counter[str]()
    lock = threading.Lock()

    def fail_odd_once(sequences: list[str]) -> Any:
        with lock:
            for s in sequences:
                seen[s] += 1
            first_time_odd = [s for s in sequences if int(s) % 2 and seen[s] == 1]
        return {"batchItemFailures": [{"itemIdentifier": s} for s in first_time_odd]}

    function = FakeFunction(fail_odd_once)
    esm = mapping(FakeStream({SHARD: batch(20, first=0)}), function, batch_size=6, max_retries=3)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    # Each record's last delivery is a success; the first time each was seen, the records before it were seen in order
    first_seen = list(dict.fromkeys(function.delivered))
    assert first_seen == [str(i) for i in range(20)]
    assert esm.snapshot()["records_skipped"] == 0


def test_waiting_for_catch_up_covers_records_written_before_the_call() -> None:
    # Given a running mapping with an empty shard, and a handler that blocks until released
    release = threading.Event()
    function = FakeFunction(lambda _s: release.wait(WAIT_S))
    stream = FakeStream({SHARD: []})
    esm = mapping(stream, function)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
        # When records arrive and the handler is still busy with them
        stream.append(SHARD, batch(3))
        # Then the mapping is not caught up
        assert not esm.wait_until_caught_up(0.2)
        # And once the handler finishes, it is
        release.set()
        assert esm.wait_until_caught_up(WAIT_S)
        assert function.delivered == ["100", "101", "102"]
    finally:
        release.set()
        esm.stop()


def test_a_failed_read_resumes_after_the_last_record_read() -> None:
    stream = FakeStream({SHARD: batch(5)})
    stream.read_failures[SHARD] = 2
    function = FakeFunction()
    esm = mapping(stream, function)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
        stream.append(SHARD, batch(3, first=105))
        stream.read_failures[SHARD] = 1
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    assert function.delivered == [str(s) for s in range(100, 108)]
    assert esm.snapshot()["read_errors"] == 3


def test_a_closed_shard_is_read_to_its_end_and_then_left() -> None:
    stream = FakeStream({SHARD: batch(4)})
    stream.close(SHARD)
    function = FakeFunction()
    esm = mapping(stream, function)
    esm.start()
    try:
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    assert function.delivered == ["100", "101", "102", "103"]


def test_a_batching_window_gathers_records_that_arrive_within_it() -> None:
    # Given a one-second batching window and two records arriving apart
    gate = threading.Event()
    function = FakeFunction(lambda _s: gate.set())
    stream = FakeStream({SHARD: [record(SHARD, 1)]})
    esm = mapping(stream, function, batching_window_s=1.0, batch_size=100)
    esm.start()
    try:
        stream.append(SHARD, [record(SHARD, 2)])
        assert gate.wait(WAIT_S)
        assert esm.wait_until_caught_up(WAIT_S)
    finally:
        esm.stop()
    # Then both went in one invocation
    assert function.calls == [["1", "2"]]


def test_stop_ends_every_poller_thread() -> None:
    esm = mapping(FakeStream({SHARD: [], "shard-b": []}), FakeFunction())
    esm.start()
    assert esm.wait_until_caught_up(WAIT_S)
    assert [t for t in threading.enumerate() if t.name.startswith("test-")]
    esm.stop(timeout_s=WAIT_S)
    assert not [t for t in threading.enumerate() if t.name.startswith("test-")]


def test_waiting_with_flush_delivers_an_open_batching_window_at_once() -> None:
    # Given a batching window far longer than the wait, and a record in it
    function = FakeFunction()
    stream = FakeStream({SHARD: batch(2)})
    esm = mapping(stream, function, batching_window_s=600.0, batch_size=100)
    esm.start()
    try:
        # Then a plain wait does not see it handled: the window holds it
        assert not esm.wait_until_caught_up(0.3)
        assert function.calls == []
        # When a wait asks for a flush, it is delivered at once, in one invocation
        assert esm.wait_until_caught_up(WAIT_S, flush=True)
        assert function.calls == [["100", "101"]]
        # And the window is back to its length once the wait is over
        stream.append(SHARD, batch(1, first=102))
        assert not esm.wait_until_caught_up(0.3)
    finally:
        esm.stop()
