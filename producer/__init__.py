"""The producer: readings from files or a synthetic workload, packed into Kinesis records.

* :mod:`.sources`    JSON Lines and CSV input
* :mod:`.synthetic`  a synthetic workload (entities, rate, Zipf skew, hot entities)
* :mod:`.packing`    readings packed into records (JSON arrays), records into PutRecords batches
* :mod:`.publisher`  PutRecords with retries of the failed records only, and a summary

``tsctl publish`` is the command line over this library.
"""

from .packing import PARTITION_STRATEGIES, BatchPlanner, PackedRecord, Packer, ReadingTooLarge, partitioner
from .publisher import Publisher, PublishSummary, PutRecordsApi, kinesis_client, publish
from .sources import InputError, SourceItem, read_csv, read_jsonl
from .synthetic import Workload, generate

__all__ = [
    "PARTITION_STRATEGIES",
    "BatchPlanner",
    "InputError",
    "PackedRecord",
    "Packer",
    "PublishSummary",
    "Publisher",
    "PutRecordsApi",
    "ReadingTooLarge",
    "SourceItem",
    "Workload",
    "generate",
    "kinesis_client",
    "partitioner",
    "publish",
    "read_csv",
    "read_jsonl",
]
