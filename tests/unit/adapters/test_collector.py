"""The collector setting every handler applies once its init is done."""

from __future__ import annotations

import ast
import gc
from pathlib import Path

import pytest

from adapters.collector import YOUNG_COLLECTION_ALLOCATIONS, tune_collector

FUNCTIONS = Path(__file__).resolve().parents[3] / "functions"
HANDLERS = sorted(FUNCTIONS.glob("*/handler.py"))


def test_tuning_freezes_once_a_process_and_collects_the_young_less_often(monkeypatch: pytest.MonkeyPatch) -> None:
    before = gc.get_threshold()
    frozen: list[int] = []
    monkeypatch.setattr(gc, "freeze", lambda: frozen.append(1))
    monkeypatch.setattr(gc, "get_freeze_count", lambda: len(frozen))  # nothing frozen yet: a fresh container
    try:
        # Given a fresh process, when init is done twice (tests, local mode)
        first = tune_collector()
        second = tune_collector()
        # Then the objects are frozen once, the young generation's threshold is raised, the others kept
        assert frozen == [1]
        assert gc.get_threshold() == (YOUNG_COLLECTION_ALLOCATIONS, *before[1:])
        # And each call hands back what it replaced, so a caller can put it back
        assert first == before
        assert second == (YOUNG_COLLECTION_ALLOCATIONS, *before[1:])
    finally:
        gc.set_threshold(*before)


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


def test_the_handlers_found_are_all_six() -> None:
    # A renamed or moved handler would silently leave the test above with nothing to check
    assert [p.parent.name for p in HANDLERS] == ["cursor_rotation", "hotkeys", "ingest", "query", "rollup", "rotator"]
