"""The demo's rollup step: runs until the watermark passes, and reports the work of every run."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from demo.run import Observer
from infra.config import LambdaFunction


class ScriptedSchedule:
    """``run_once`` answers the scripted summaries in turn (None: a run that failed)."""

    def __init__(self, answers: list[dict[str, Any] | None]) -> None:
        self.answers = answers

    def run_once(self) -> dict[str, Any] | None:
        return self.answers.pop(0)


def run(minute: str, recomputed: dict[str, int], steps: int = 1) -> dict[str, Any]:
    return {"through": f"2026-11-22T07:{minute}:00.000Z", "late": 0, "steps": steps,
            "recomputed": recomputed, "raw_items_read": 10 * steps}  # fmt: skip


def observe(answers: list[dict[str, Any] | None], totals: list[int | None] | None = None) -> Observer:
    """An observer of the scripted runs; ``totals``: the totals watermark its state item holds after each
    run that reached the watermark (None: it keeps none, as before rollups from compaction)."""
    observer = Observer.__new__(Observer)  # no system: only the rollup schedule and its clock are read
    observer.system = SimpleNamespace(  # type: ignore[assignment]
        schedule_of=lambda _: ScriptedSchedule(answers),
        functions=SimpleNamespace(rollup_clock_moved_ms=0),
        config=SimpleNamespace(ingest_timeout_s=120),
    )
    script = list(totals or [None] * 20)
    observer.rollup_totals_through = lambda: script.pop(0)  # type: ignore[method-assign]
    return observer


THROUGH_MS = 1_795_330_800_000  # 2026-11-22T07:00:00Z


def test_the_work_of_every_run_is_summed_and_a_failed_run_is_counted() -> None:
    # Given three runs: one that applies minutes, one that fails (after doing its work, unseen), one that finishes
    answers = [run("00", {"60000": 5}, steps=2), None, run("05", {"3600000": 1})]
    summary = observe(answers).roll_up(THROUGH_MS + 5 * 60_000, lambda _: None)
    assert summary is not None
    # Then the report sums what it saw and says what it could not see
    assert summary["runs"] == 3 and summary["failed_runs"] == 1
    assert summary["recomputed"] == {"60000": 5, "3600000": 1} and summary["steps"] == 3
    assert summary["raw_items_read"] == 30 and summary["through"] == "2026-11-22T07:05:00.000Z"


def test_a_step_that_never_reaches_the_wall_clock_says_not_run() -> None:
    answers: list[dict[str, Any] | None] = [run("00", {"60000": 1})] * 20
    summary = observe(answers).roll_up(THROUGH_MS + 60 * 60_000, lambda _: None)
    assert summary is not None and summary["status"] == "not run" and "20 runs" in summary["reason"]


def test_a_totals_watermark_behind_moves_the_clock_on_until_it_passes_too() -> None:
    # Given runs past the watermark whose totals' watermark lags twice, then passes
    answers = [run("05", {"60000": 1})] * 3
    observer = observe(answers, totals=[THROUGH_MS, THROUGH_MS, THROUGH_MS + 5 * 60_000])
    summary = observer.roll_up(THROUGH_MS + 5 * 60_000, lambda _: None)
    # Then it ran until both passed, moving the function's clock on by its settle time and a minute each time
    assert summary is not None and summary["runs"] == 3 and summary["totals_through"] == "2026-11-22T07:05:00.000Z"
    assert observer.system.functions.rollup_clock_moved_ms == 2 * (120_000 + 65_000)


def test_a_redo_the_rollup_function_asked_for_is_run_and_the_rollups_applied_again() -> None:
    # Given a rollup run that asks compaction for a redo (a late reading of an entity compaction counted)
    rollups = [run("05", {"60000": 1}), run("05", {"60000": 3})]
    compaction_runs: list[int] = []
    observer = observe(rollups)
    schedules = {"rollup": ScriptedSchedule(rollups)}
    compaction = SimpleNamespace(run_once=lambda: compaction_runs.append(1))
    observer.system.schedule_of = lambda name: compaction if name == LambdaFunction.COMPACTION else schedules["rollup"]
    observer.system.options = SimpleNamespace(rollup_ahead_s=400.0, compaction_ahead_s=100.0)
    waiting = [1, 0]
    observer.redo_requests = lambda: waiting.pop(0)  # type: ignore[method-assign]
    # When the demo's rollup step runs
    summary = observer.roll_up_and_redo(THROUGH_MS + 5 * 60_000, lambda _: None)
    # Then compaction ran once for the redo, on the rollup function's clock (its re-marks' minute still
    # open), and the rollup function again after it, its clock moved past that minute
    assert compaction_runs == [1] and summary is not None and summary["redo_requests"] == 1
    assert observer.system.functions.compaction_clock_moved_ms == 300_000
    assert observer.system.functions.rollup_clock_moved_ms == 120_000 + 65_000
    assert summary["recomputed"] == {"60000": 4} and summary["runs"] == 2 and not rollups  # both runs summed
