"""The fan-out machinery around the merge: the X-Ray segment follows reads into pool threads,
and the benchmark module still measures what docs/query.md reports."""

from __future__ import annotations

import threading
from typing import Any

import pytest

from adapters.observability import tracer
from adapters.partition_reader import Page, PageRequest
from benchmarks.query_fanout import run
from keydesign import PartitionQuery
from query.logic import _in_trace_context


class Recorder:
    """Stands in for the X-Ray recorder, which keeps the current segment per thread."""

    def __init__(self) -> None:
        self.local = threading.local()
        self.seen: list[Any] = []

    def get_trace_entity(self) -> Any:
        return getattr(self.local, "entity", None)

    def set_trace_entity(self, entity: Any) -> None:
        self.local.entity = entity

    def clear_trace_entities(self) -> None:
        self.local.entity = None


def test_reads_in_pool_threads_run_under_the_callers_segment(monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    recorder.set_trace_entity("segment-of-this-request")
    monkeypatch.setattr(tracer, "disabled", False)
    monkeypatch.setattr(tracer, "provider", recorder)

    def read(request: PageRequest) -> Page:
        recorder.seen.append(recorder.get_trace_entity())
        return Page((), None, 0, 0.0)

    traced = _in_trace_context(read)
    worker = threading.Thread(target=traced, args=(PageRequest(PartitionQuery("t", "p", None, None, 0, 1)),))
    worker.start()
    worker.join()

    assert recorder.seen == ["segment-of-this-request"]


class Untouchable(Recorder):
    """A recorder that must not be asked for anything."""

    def get_trace_entity(self) -> Any:
        raise AssertionError("the X-Ray recorder was used with tracing disabled")

    def set_trace_entity(self, entity: Any) -> None:
        raise AssertionError("the X-Ray recorder was used with tracing disabled")


def test_with_tracing_disabled_reads_run_in_pool_threads_without_the_recorder(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Given tracing off (outside Lambda) and a recorder that fails if used
    monkeypatch.setattr(tracer, "provider", Untouchable())
    assert tracer.disabled
    page = Page((), None, 0, 0.0)
    pages: list[Page] = []
    # When a read runs in a pool thread
    read = _in_trace_context(lambda request: page)
    worker = threading.Thread(
        target=lambda: pages.append(read(PageRequest(PartitionQuery("t", "p", None, None, 0, 1))))
    )
    worker.start()
    worker.join()
    # Then it returns its page and never touched the recorder
    assert pages == [page]


def test_the_fan_out_benchmark_reads_the_same_page_both_ways_and_pays_each_call() -> None:
    # The speed-up itself is a benchmark figure (docs/benchmarks.md), not a timed test: on a shared
    # machine a ratio of wall times is noise. What must hold on any machine is checked here.
    result = run(latency_ms=10.0, partition_counts=(8,), repeats=1)

    for case in result["cases"]:
        # (run() raises if the parallel and sequential reads returned different pages)
        # sequential: one sleep per Query call, at least; parallel: at least one round trip
        assert case["queries_per_page"] >= 8
        assert case["sequential_ms"] >= 10.0 * case["queries_per_page"]
        assert case["parallel_ms"] >= 10.0
        assert case["speedup"] == round(case["sequential_ms"] / case["parallel_ms"], 1)
