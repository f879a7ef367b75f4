"""Every benchmark module, imported so that its functions register themselves (in this order)."""

from benchmarks import (  # noqa: F401
    agents,
    before_blocks,
    blocks,
    cold_start,
    ingest,
    ingest_network,
    moto_query,
    pack_names,
    query_cpu,
    query_fanout,
    read_budget,
    rollups,
    simulation,
    write_tier,
)
