"""The key-design layer: the one place that builds keys, table names and query plans.

Pure Python (standard library only; importing it never imports boto3), shared
by every Lambda, the CDK app, the local runtime and the CLI.

Modules:

* :mod:`.model`     the reading and its validation
* :mod:`.timefmt`   timestamps: RFC 3339 / epoch ms in, fixed-width UTC out
* :mod:`.hashing`   the documented stable hash
* :mod:`.periods`   bucket granularity and table periods
* :mod:`.shardmap`  the shard map, versioned by time
* :mod:`.blocks`    many readings of one entity in one compressed item
* :mod:`.varints`   unsigned LEB128 varints (the block header's numbers, protobuf's wire format)
* :mod:`.layouts`   random, calculated and hybrid keys; packing into blocks; query plans
* :mod:`.items`     item sizes, write and read units
* :mod:`.capacity`  readings per block, write units and bytes per reading, shards, table period, monthly cost
"""

from .blocks import BlockError, decode_block
from .capacity import Ingest, Prices, Workload, plan_capacity, shards_for
from .errors import ConfigError, InvalidInput, KeyDesignError
from .hashing import shard_of, stable_hash
from .items import item_size, read_units, ttl_for, write_units
from .layouts import CAPABILITIES, Block, Layout, PartitionQuery, QueryPlan
from .model import Reading, shown_name, validate_entity_id
from .periods import Bucket, TablePeriod, parse_duration
from .shardmap import ShardMap, earliest_change_boundary
from .timefmt import format_ts, parse_timestamp

__all__ = [
    "CAPABILITIES",
    "Block",
    "BlockError",
    "Bucket",
    "ConfigError",
    "Ingest",
    "InvalidInput",
    "KeyDesignError",
    "Layout",
    "PartitionQuery",
    "Prices",
    "QueryPlan",
    "Reading",
    "ShardMap",
    "TablePeriod",
    "Workload",
    "decode_block",
    "earliest_change_boundary",
    "format_ts",
    "item_size",
    "parse_duration",
    "parse_timestamp",
    "plan_capacity",
    "read_units",
    "shard_of",
    "shards_for",
    "shown_name",
    "stable_hash",
    "ttl_for",
    "validate_entity_id",
    "write_units",
]
