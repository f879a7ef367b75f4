"""Every ingest test starts and ends with no metrics pending (the Ingestor adds to Powertools' shared metrics)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from adapters.observability import metrics


@pytest.fixture(autouse=True)
def _clean_metrics() -> Iterator[None]:
    metrics.clear_metrics()
    yield
    metrics.clear_metrics()
