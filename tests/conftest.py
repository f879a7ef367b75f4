"""How the suite is shared between pytest-xdist's workers (`make test` runs one per core).

A worker takes a whole file at a time, so a module's shared running system or
synthesized app is built once; every file under tests/infra goes to one worker,
because they share one session-wide synth of the app (the slowest fixture in
the suite). Without xdist (``-p no:xdist`` or ``-n 0``) nothing changes.
"""

from __future__ import annotations

from pathlib import Path

import pytest

INFRA = Path(__file__).parent / "infra"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        path = Path(item.path)
        group = "infra" if path.is_relative_to(INFRA) else str(path.relative_to(INFRA.parent))
        item.add_marker(pytest.mark.xdist_group(group))
