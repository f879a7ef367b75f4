"""Every file and folder CONTRIBUTING.md names exists (``<name>`` in a path stands for any one folder)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CONTRIBUTING = ROOT / "CONTRIBUTING.md"


def named_paths(text: str) -> list[str]:
    """The paths in backquotes: with a slash, or a file name with its extension (commands have spaces; the
    venv is built by make)."""
    quoted = re.findall(r"`([\w./<>-]+)`", text)
    return [q for q in quoted if ("/" in q or re.search(r"\.(py|md|json)$", q)) and not q.startswith(".venv/")]


def test_every_path_contributing_md_names_exists() -> None:
    names = named_paths(CONTRIBUTING.read_text(encoding="utf-8"))

    assert len(names) > 20
    missing = [name for name in names if not any(ROOT.glob(re.sub(r"<\w+>", "*", name).rstrip("/")))]
    assert missing == []
