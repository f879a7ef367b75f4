"""The one fixture unit and integration tests share: Lambda's SnapStart hooks module; and how pytest-xdist
hands out the tests.

(`make test` runs pytest-xdist with ``--dist loadfile``: a worker takes a whole file at a time, so a
module's shared running system is built once. The infra tests that query the synthesized app go to one
worker together, so the app is synthesized once: see :func:`pytest_xdist_make_scheduler`.)
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from functools import partial
from types import ModuleType
from typing import Any

import pytest

#: The infra test files that share one synthesized app (tests/infra/conftest.py): every one but test_app.py,
#: which synthesizes the app in processes of its own.
SYNTH_SCOPE = "tests/infra/"
OWN_SYNTH = "tests/infra/test_app.py"


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadfile``, but every infra file that queries the synthesized app in one work unit: one worker
    synthesizes it, not each worker that takes one of those files (25-33 s of a worker a synth under
    ``make test``'s load; docs/decisions.md, "One synth for the infra tests"). Other modes as xdist has them."""
    if config.option.dist != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling  # noqa: PLC0415 - only a run with xdist's workers gets here

    class SynthTogether(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            scope = super()._split_scope(nodeid)
            return SYNTH_SCOPE if scope.startswith(SYNTH_SCOPE) and scope != OWN_SYNTH else scope

    return SynthTogether(config, log)


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
