"""What `make demo` runs works from the venv alone: no PYTHONPATH, from any directory.

`make venv` writes a .pth file that puts functions/ (the Lambda code root) and the
repository root on the venv's path; without it `python -m tsctl` cannot import
keydesign. pytest's own pythonpath setting would hide that, so this asks a fresh
interpreter, with a clean environment, in another directory.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def test_the_venv_imports_the_project_from_anywhere_without_pythonpath(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, "-c", "import keydesign, adapters, tsctl.cli, local_runtime; print('ok')"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "ok"
