"""The garbage collector, set for a Lambda container once its init is done.

Every handler module calls :func:`tune_collector` as its last line of init.
What init built (botocore's service models, the settings, Powertools, the
handler's own objects) lives as long as the container, so it is frozen out of
every later walk. A batch or a page keeps what it builds alive until it ends
(readings, items, the page's rows), so a young collection every 700
allocations only walks survivors to promote them, and the promoted ones later
cost full collections. Measured (docs/benchmarks.md): the collector's time in a
5,000-reading ingest batch fell from 133 to 21 ms; a 1,000-reading query page
no longer pays 4-5 ms of collection on average, nor a full collection every
ten pages, and its 99th-percentile CPU fell to 0.39-0.47x.
"""

from __future__ import annotations

import gc

#: Net allocations between two young collections (Python's default: 700).
YOUNG_COLLECTION_ALLOCATIONS = 10_000


def tune_collector() -> tuple[int, int, int]:
    """Freeze what exists (once a process) and collect the young generation less often.

    No ``gc.collect()`` before freezing: it took 40 ms at cold start and found
    nothing. A second init in one process (tests, local mode) freezes nothing
    more. Returns the thresholds it replaced.
    """
    previous = gc.get_threshold()
    if not gc.get_freeze_count():
        gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_ALLOCATIONS, *previous[1:])
    return previous
