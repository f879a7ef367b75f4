"""The workload simulator: second by second write load on every partition key, and read costs, per layout.

It measures the trade-offs the seed articles argue in words. Keys, plans,
block sizes and capacity figures come from the key-design layer; the adaptive
layout is driven by the hot-key detector's own logic (``hotkeys.detector``).
What the simulator adds is the arithmetic of counts: per second and per entity
the number of readings is a count, and the blocks ingest packs them into follow
from counts too, so it never builds 180 million readings.

* :mod:`.workload`  the described workload and its per-second reading counts
* :mod:`.blocks`    batches and the blocks they make, in bulk (``Layout.pack``'s arithmetic)
* :mod:`.keyspace`  the partition keys each entity's blocks can go to in a bucket (from the key-design layer)
* :mod:`.adaptive`  the detector driven window by window, changing the shard map
* :mod:`.engine`    the simulation: counts -> blocks -> keys -> per-key-second load, figures per layout
* :mod:`.reads`     read fan-out and read units from the key-design layer's query plans
* :mod:`.report`    table, JSON and the PNG chart
"""

from .adaptive import AdaptiveSettings
from .engine import LayoutResult, LayoutSpec, Simulation, SimulationResult, parse_layout_spec
from .reads import ReadFigure, ReadPattern
from .workload import Burst, HotEntity, SimWorkload

__all__ = [
    "AdaptiveSettings",
    "Burst",
    "HotEntity",
    "LayoutResult",
    "LayoutSpec",
    "ReadFigure",
    "ReadPattern",
    "SimWorkload",
    "Simulation",
    "SimulationResult",
    "parse_layout_spec",
]
