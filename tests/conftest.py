"""The one fixture unit and integration tests share: Lambda's SnapStart hooks module.

(`make test` runs pytest-xdist with ``--dist loadfile``: a worker takes a whole file at a time, so a
module's shared running system or synthesized app is built once.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from types import ModuleType

import pytest


@pytest.fixture
def lambda_runtime(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[Callable[[], None]]]:
    """Lambda's ``snapshot_restore_py``, which exists only in its Python runtime (SnapStart's hooks):
    records what is registered, before-snapshot hooks under "before", after-restore ones under "after"."""
    registered: dict[str, list[Callable[[], None]]] = {"before": [], "after": []}
    module = ModuleType("snapshot_restore_py")
    module.register_before_snapshot = lambda hook, *args: registered["before"].append(partial(hook, *args))  # type: ignore[attr-defined]
    module.register_after_restore = lambda hook, *args: registered["after"].append(partial(hook, *args))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "snapshot_restore_py", module)
    return registered
