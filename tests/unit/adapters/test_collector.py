"""The collector setting every handler applies once its init is done."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

from adapters.collector import YOUNG_COLLECTION_ALLOCATIONS

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
HANDLERS = sorted(FUNCTIONS.glob("*/handler.py"))


def test_tuning_freezes_what_init_built_once_a_process_and_collects_the_young_less_often() -> None:
    # Given a fresh process (a new container), with the real collector
    code = """
import gc, json
from adapters.collector import tune_collector
default = gc.get_threshold()
first = tune_collector()
frozen = gc.get_freeze_count()
later = [[n] for n in range(5_000)]  # what a first invocation builds
second = tune_collector()  # a second init in one process (tests, local mode)
print(json.dumps([default, first, frozen, gc.get_freeze_count(), second, gc.get_threshold()]))
"""
    run = subprocess.run(  # noqa: S603 - our own interpreter, fixed arguments
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    )
    default, first, frozen, frozen_after, second, threshold = json.loads(run.stdout)
    # Then init's objects are frozen, and a second call freezes nothing more
    assert frozen > 1_000
    assert frozen_after == frozen
    # And the young generation is collected less often, the others as before
    assert threshold == [YOUNG_COLLECTION_ALLOCATIONS, *default[1:]]
    # And each call hands back what it replaced, so a caller can put it back
    assert (first, second) == (default, threshold)


def _init_statements(tree: ast.Module) -> list[ast.stmt]:
    """Top-level statements that run code at import: not the docstring, imports, defs or classes."""
    skipped = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
    body = tree.body[1:] if ast.get_docstring(tree) is not None else tree.body
    return [node for node in body if not isinstance(node, skipped)]


@pytest.mark.parametrize("path", HANDLERS, ids=lambda p: p.parent.name)
def test_every_handler_tunes_the_collector_as_the_last_step_of_its_init(path: Path) -> None:
    statements = _init_statements(ast.parse(path.read_text(encoding="utf-8")))
    last = statements[-1] if statements else None
    # The call comes after every other init statement, so what init built is frozen with it
    assert isinstance(last, ast.Expr) and isinstance(last.value, ast.Call), f"{path}: no call at the end of init"
    assert isinstance(last.value.func, ast.Name) and last.value.func.id == "tune_collector", ast.unparse(last)


def test_the_handlers_found_are_all_seven() -> None:
    # A renamed or moved handler would silently leave the test above with nothing to check
    assert [p.parent.name for p in HANDLERS] == [
        "compaction",
        "cursor_rotation",
        "hotkeys",
        "ingest",
        "query",
        "rollup",
        "rotator",
    ]
