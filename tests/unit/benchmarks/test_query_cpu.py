"""The query-cpu benchmark's child: it serves real pages, and the handler's init has frozen what it built."""

from __future__ import annotations

import pytest

from benchmarks.query_cpu import _run_child


@pytest.mark.parametrize("mode", ["python", "tuned"])
def test_a_run_serves_whole_pages_in_a_fresh_interpreter(mode: str) -> None:
    # (the child raises unless every page is a 200 with its 1,000 readings)
    run = _run_child(mode, 3)

    assert run["mode"] == mode and len(run["cpu_ms"]) == len(run["gc_ms"]) == 3
    assert all(ms > 0 for ms in run["cpu_ms"])
    # The handler's import froze what init built, in both modes; only the tuned run keeps it frozen
    assert run["frozen"] > 10_000
    if mode == "tuned":
        assert run["full_collections"] == 0
