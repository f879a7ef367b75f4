"""CPU of a 1,000-reading query page through the real API, with Python's collector and as the handler sets it.

Each run is a fresh interpreter that imports ``query.handler`` with the function's environment, as
Lambda's init does (``adapters.collector.tune_collector`` runs last: init's objects frozen, young
collections every 10,000 allocations). The "python" runs undo that straight after the import
(``gc.unfreeze()``, thresholds 700/10/10). Then the child builds the API (``query.api.create_app``)
on a ``QueryService`` whose reader answers from memory (``benchmarks.query_fanout.MemoryReader``,
16 random-layout suffixes, no latency). It serves one entity's 1,000-reading page through
``app.resolve`` again and again: parameters validated, partitions read in parallel, merged,
the response serialised. For each page it takes the CPU time of the process and the collector's
time (a ``gc.callbacks`` clock). The reader's rows are built after the import, so they are walked
by the collector in both modes. Before serving, each child also times one full collection
(``gc.collect()``): with init's objects, or with them frozen.

Rerun: ``python -m benchmarks query-cpu``.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
from typing import Any
from urllib.parse import urlencode

from benchmarks.cold_start import FUNCTIONS, ROOT, handler_env, run_child
from benchmarks.harness import Result, benchmark

PAGE = 1_000
MODES = ("python", "tuned")


class _Context:
    function_name = "query"
    aws_request_id = "bench"

    @staticmethod
    def get_remaining_time_in_millis() -> int:
        return 28_000


def child(mode: str, pages: int) -> dict[str, Any]:
    """One run, in this (fresh) interpreter: CPU and collector time of ``pages`` pages."""
    import gc  # noqa: PLC0415 - the child's imports are what is measured
    import time  # noqa: PLC0415

    import query.handler  # noqa: F401, PLC0415 - init, as Lambda runs it: tunes the collector last

    frozen = gc.get_freeze_count()
    if mode == "python":
        gc.unfreeze()
        gc.set_threshold(700, 10, 10)
    walk = time.perf_counter()
    gc.collect()  # what one full collection costs from here on: every object init built, or none of them
    walk = time.perf_counter() - walk
    from adapters.observability import metrics  # noqa: PLC0415
    from benchmarks import query_fanout  # noqa: PLC0415
    from keydesign import format_ts  # noqa: PLC0415
    from local_runtime.api_gateway import HttpRequest, proxy_event  # noqa: PLC0415
    from query.api import create_app  # noqa: PLC0415
    from query.settings import QueryLimits  # noqa: PLC0415

    query_fanout.READINGS_PER_PARTITION = 100  # 16 partitions: 1,600 readings, one page of 1,000
    layout, shard_map, memory, _ = query_fanout._setup("random", 16)
    app = create_app(query_fanout.timed_service(layout, shard_map, memory, 0.0, QueryLimits(concurrency=16)))
    params = urlencode(
        {"from": format_ts(query_fanout.NOW - query_fanout.HOUR), "to": format_ts(query_fanout.NOW), "limit": PAGE}
    )
    request = HttpRequest("GET", f"/prod/entities/sensor-1/readings?{params}", [], b"", "127.0.0.1", "localhost")
    event = proxy_event(request, stage="prod", request_id="bench", now_ms=query_fanout.NOW)

    collecting, began, full = [0.0], [0.0], [0]  # this page's collector time and full collections

    def clock(phase: str, info: dict[str, Any]) -> None:
        if phase == "start":
            began[0] = time.perf_counter()
        else:
            collecting[0] += time.perf_counter() - began[0]
            full[0] += info["generation"] == 2

    cpu: list[float] = []
    gc_ms: list[float] = []
    fulls = 0
    for n in range(pages + 20):  # the first 20 warm the container (threads, caches) and are not counted
        collecting[0], full[0] = 0.0, 0
        gc.callbacks.append(clock)
        started = time.process_time()
        answer = app.resolve(event, _Context())  # type: ignore[arg-type]
        spent = time.process_time() - started
        gc.callbacks.remove(clock)
        metrics.clear_metrics()
        if answer["statusCode"] != 200 or len(json.loads(answer["body"])["items"]) != PAGE:
            raise AssertionError(f"the page was not served: {answer['statusCode']} {answer['body'][:200]}")
        if n >= 20:
            cpu.append(spent * 1000)
            gc_ms.append(collecting[0] * 1000)
            fulls += full[0]
    return {
        "mode": mode,
        "cpu_ms": cpu,
        "gc_ms": gc_ms,
        "full_collections": fulls,
        "frozen": frozen,
        "full_collection_ms": walk * 1000,
    }


def _run_child(mode: str, pages: int) -> dict[str, Any]:
    env = handler_env("query")
    env.update(
        POWERTOOLS_TRACE_DISABLED="true",  # no X-Ray daemon here; as the other benchmarks run
        POWERTOOLS_LOG_LEVEL="WARNING",
        PYTHONPATH=os.pathsep.join([str(FUNCTIONS), str(ROOT)]),
    )
    return run_child(["-m", "benchmarks.query_cpu", mode, str(pages)], env, what=f"the {mode} run", timeout=600)[0]


@benchmark("query-cpu", "CPU of a 1,000-reading query page through the API: Python's collector vs the handler's")
def query_cpu(quick: bool) -> Result:
    runs, pages = (1, 100) if quick else (5, 300)
    found: dict[str, list[dict[str, Any]]] = {mode: [] for mode in MODES}
    for _ in range(runs):  # alternating: both modes see the same load on a shared machine
        for mode in MODES:
            found[mode].append(_run_child(mode, pages))
    result = Result(
        params={"page": PAGE, "runs_per_mode": runs, "pages_per_run": pages, "partitions": 16},
        method=(
            f"{runs} fresh interpreters per mode, alternating; each imports query.handler with the function's "
            f"environment (init tunes the collector; 'python' undoes it), then serves {pages} pages of {PAGE} "
            "readings of one entity through create_app(...).resolve, the reader answering from memory (16 "
            "random-layout suffixes, no latency), after 20 unclocked pages; CPU time of the process per page; "
            "the collector's time per page from gc.callbacks; medians of the runs' medians, the 99th percentile "
            "over every page of a mode"
        ),
    )
    figures: dict[str, dict[str, float]] = {}
    for mode, children in found.items():
        every = [ms for c in children for ms in c["cpu_ms"]]
        figures[mode] = {
            "median": statistics.median(statistics.median(c["cpu_ms"]) for c in children),
            "p99": statistics.quantiles(every, n=100)[98],
            "gc": statistics.median(statistics.mean(c["gc_ms"]) for c in children),
            "full": sum(c["full_collections"] for c in children) * 100 / (runs * pages),
        }
        label = "Python's collector" if mode == "python" else "as the handler sets it"
        each = ", ".join(f"{statistics.median(c['cpu_ms']):.1f}" for c in children)
        result.add(f"CPU per page, median ({label})", round(figures[mode]["median"], 1), "ms", f"runs: {each}")
        result.add(f"CPU per page, 99th percentile ({label})", round(figures[mode]["p99"], 1), "ms")
        result.add(f"collector per page, mean ({label})", round(figures[mode]["gc"], 2), "ms")
        result.add(f"full collections per 100 pages ({label})", round(figures[mode]["full"], 1), "")
        walk = statistics.median(c["full_collection_ms"] for c in children)
        result.add(f"one full collection after init ({label})", round(walk, 1), "ms")
    result.add("objects init leaves, frozen by the handler", statistics.median(c["frozen"] for c in found["tuned"]), "")
    for stat in ("median", "p99"):
        ratio = figures["tuned"][stat] / figures["python"][stat]
        result.add(f"CPU per page, {stat}: tuned / Python's", round(ratio, 2), "x")
    return result


if __name__ == "__main__":
    print(json.dumps(child(sys.argv[1], int(sys.argv[2]))))
