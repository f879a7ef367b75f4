"""Every benchmark module, imported so that its functions register themselves (in this order)."""

from benchmarks import cold_start, ingest, ingest_network, moto_query, query_fanout, read_budget, rollups, simulation  # noqa: F401
