"""``replay.runner`` and ``replay.invoker`` against fakes that keep their own clock: how long each message
is hidden, what an Invoke that does not answer does, and which events the function gets."""

from __future__ import annotations

import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from botocore.exceptions import ReadTimeoutError

from replay.failures import FailedBatch
from replay.invoker import INVOKE_CONFIG, INVOKE_TIMEOUT_S, InvocationFailed, LambdaInvoker
from replay.runner import Outcome, replay
from replay.sources import ReadBack
from tsctl.aws import aws_client

FUNCTION = "arn:aws:lambda:eu-west-1:123456789012:function:x-ingest"
#: How long the fake function runs: ingest's default timeout, twice botocore's default read timeout.
FUNCTION_S = 120


class Clock:
    def __init__(self) -> None:
        self.now = 0.0


def batch(n: int, size: int = 1, source: str = "kinesis") -> FailedBatch:
    return FailedBatch(
        message_id=f"m{n}",
        receipt_handle=f"h{n}",
        source=source,  # type: ignore[arg-type]
        stream_arn="arn:aws:kinesis:eu-west-1:123456789012:stream/readings",
        shard_id="shardId-0",
        first_sequence=str(n * 100_000),
        last_sequence=str(n * 100_000 + size - 1),
        batch_size=size,
        function_arn=FUNCTION,
    )


class Queue:
    """An SQS queue of failed batches on a clock: a message is visible once its visibility timeout ends."""

    def __init__(self, clock: Clock, batches: Sequence[FailedBatch]) -> None:
        self.clock = clock
        self.batches = list(batches)
        self.hidden_until = {b.message_id: 0.0 for b in batches}
        self.deleted: list[str] = []
        #: Messages another consumer received (their visibility ran out once): our receipt handles are stale.
        self.taken: set[str] = set()

    def hidden(self, message_id: str) -> bool:
        return self.clock.now < self.hidden_until[message_id]

    def receive(self, limit: int, *, visibility_timeout_s: int) -> list[FailedBatch]:
        out = [b for b in self.batches if not self.hidden(b.message_id)][:limit]
        for b in out:
            self.hidden_until[b.message_id] = self.clock.now + visibility_timeout_s
        return out

    def hold(self, messages: Sequence[FailedBatch], seconds: int) -> list[FailedBatch]:
        refused = [m for m in messages if not self.hidden(m.message_id) or m.message_id in self.taken]
        for m in messages:
            if m not in refused:
                self.hidden_until[m.message_id] = self.clock.now + seconds
        return refused

    def release(self, messages: Sequence[FailedBatch]) -> int:
        for m in messages:
            self.hidden_until[m.message_id] = self.clock.now
        return 0

    def delete(self, messages: Sequence[FailedBatch]) -> list[FailedBatch]:
        for m in messages:
            assert self.hidden(m.message_id), f"{m.message_id} deleted after it reappeared"
            self.batches.remove(m)
            self.deleted.append(m.message_id)
        return []


class Reader:
    """A stream holding every range whole; each read takes 5 s."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def read(self, failed: FailedBatch) -> ReadBack:
        self.clock.now += 5
        first, last = int(failed.first_sequence), int(failed.last_sequence)
        return ReadBack(records=[{"kinesis": {"sequenceNumber": str(s)}} for s in range(first, last + 1)])

    def kept_until(self, failed: FailedBatch) -> int | None:
        return None


class Function:
    """The function behind Invoke: runs FUNCTION_S on the clock, stores every record; it checks that the
    message whose records it gets stays hidden from other consumers the whole time."""

    def __init__(self, clock: Clock, queue: Queue) -> None:
        self.clock, self.queue = clock, queue
        self.events: list[Mapping[str, Any]] = []
        self.exposed: list[str] = []

    def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
        first = int(event["Records"][0]["kinesis"]["sequenceNumber"])
        message = f"m{first // 100_000}"
        self.events.append(event)
        if not self.queue.hidden(message):
            self.exposed.append(message)
        self.clock.now += FUNCTION_S
        if not self.queue.hidden(message):
            self.exposed.append(message)
        return {"batchItemFailures": []}


def run(queue: Queue, reader: Reader, invoker: Any, **options: Any) -> list[Outcome]:
    return replay(
        queue,  # type: ignore[arg-type]
        {"kinesis": reader, "dynamodb": reader},
        invoker,
        function_for=lambda b: b.function_arn,
        **options,
    )


def test_no_message_reappears_while_a_long_replay_works_through_a_hundred() -> None:
    # Given 100 failed batches, each of whose invocations runs 120 s: 3.4 hours in all
    clock = Clock()
    queue = Queue(clock, [batch(n) for n in range(1, 101)])
    function = Function(clock, queue)
    # When replayed with a visibility timeout of 900 s (long enough for seven of them)
    outcomes = run(queue, Reader(clock), function, limit=100, visibility_timeout_s=900)
    # Then each message stayed hidden from other consumers until it was put through and deleted
    assert function.exposed == []
    assert [o.deleted for o in outcomes] == [True] * 100 and len(queue.deleted) == 100
    assert clock.now >= 100 * FUNCTION_S


def test_a_message_taken_by_another_consumer_meanwhile_is_not_replayed_and_said_so() -> None:
    clock = Clock()
    queue = Queue(clock, [batch(1), batch(2)])

    class Meanwhile(Function):
        def invoke(self, function: str, event: Mapping[str, Any]) -> Mapping[str, Any] | None:
            queue.taken.add("m2")  # say an earlier, killed run's hold ran out and another consumer took it
            return super().invoke(function, event)

    function = Meanwhile(clock, queue)
    first, second = run(queue, Reader(clock), function)
    assert first.deleted and not second.deleted
    assert second.kept_because is not None and "SQS refused to keep it hidden" in second.kept_because
    assert len(function.events) == 1


class Lambda:
    """A boto3 Lambda client whose first Invoke times out on the read (a throttled table keeps ingest
    busy past botocore's 60 s), then answers."""

    def __init__(self) -> None:
        self.calls = 0

    def invoke(self, **params: Any) -> dict[str, Any]:
        self.calls += 1
        if self.calls == 1:
            raise ReadTimeoutError(endpoint_url="https://lambda.eu-west-1.amazonaws.com")
        return {"StatusCode": 200, "Payload": io.BytesIO(json.dumps({"batchItemFailures": []}).encode())}


def test_an_invocation_that_does_not_answer_keeps_its_message_and_the_replay_goes_on() -> None:
    clock = Clock()
    queue = Queue(clock, [batch(1, size=3), batch(2)])
    lambda_ = Lambda()
    first, second = run(queue, Reader(clock), LambdaInvoker(lambda_))
    # The one that timed out is kept, with why, every record of it counted as not stored
    assert not first.deleted and len(first.failed) == 3
    assert first.error is not None and f"no answer within {INVOKE_TIMEOUT_S} s" in first.error
    assert first.kept_because is not None and "3 record(s) not stored yet" in first.kept_because
    # and the next is put through
    assert second.deleted and queue.deleted == ["m2"]
    assert lambda_.calls == 2


def test_the_lambda_client_outwaits_the_longest_function_and_never_resends_an_invoke(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    # The client tsctl makes for Invoke: a read timeout above Lambda's longest timeout (900 s)...
    client = aws_client("lambda", "https://lambda.eu-west-1.amazonaws.com", "eu-west-1", INVOKE_CONFIG)
    assert client.meta.config.read_timeout == INVOKE_TIMEOUT_S > 900
    sent: list[str] = []

    def times_out(**kwargs: Any) -> None:
        sent.append(kwargs["request"].url)
        raise ReadTimeoutError(endpoint_url=kwargs["request"].url)

    client.meta.events.register("before-send.lambda.Invoke", times_out)
    # ...and one attempt: a read that times out is reported, not sent again (the function may still be running)
    with pytest.raises(InvocationFailed, match="no answer within"):
        LambdaInvoker(client).invoke(FUNCTION, {"Records": []})
    assert len(sent) == 1


def test_a_batch_is_replayed_in_one_event_as_its_mapping_cut_it() -> None:
    # Given a batch of 2,500 records the hot-key mapping gave up on (its batch size goes to 10,000)
    clock = Clock()
    queue = Queue(clock, [batch(1, size=2_500, source="dynamodb")])
    function = Function(clock, queue)
    (outcome,) = run(queue, Reader(clock), function)
    # Then the detector gets one event of all of them: the runs it names after their first record are the
    # ones it named on the first delivery
    assert outcome.deleted
    assert [len(e["Records"]) for e in function.events] == [2_500]
