"""How the suite is shared between pytest-xdist's workers (`make test` runs one per core).

A worker takes a whole file at a time, so a module's shared running system or
synthesized app is built once; every file under tests/infra goes to one worker,
because they share one session-wide synth of the app (the slowest fixture in
the suite). Without xdist (``-p no:xdist`` or ``-n 0``) nothing changes.

Also the one fixture unit and integration tests share: Lambda's SnapStart hooks module.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from pathlib import Path
from types import ModuleType

import pytest

INFRA = Path(__file__).parent / "infra"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        path = Path(item.path)
        group = "infra" if path.is_relative_to(INFRA) else str(path.relative_to(INFRA.parent))
        item.add_marker(pytest.mark.xdist_group(group))


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
