"""Lambda entry point of the ingest function (``ingest.handler.handler``).

Thin on purpose: Powertools decorators, the event parsed once into typed records
(``ingest.kinesis_records.StreamRecord``), then the logic. The logic works the
whole batch at once (blocks hold readings of many records); Powertools'
``BatchProcessor`` then asks :meth:`BatchOutcome.settle` about each record and
builds the ``ReportBatchItemFailures`` response from the ones it raises for.
Settings are parsed at import, so a bad environment fails the cold start with
a message naming the variable.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.batch import EventType

from adapters.collector import tune_collector
from adapters.stream_events import StreamHandler, stream_handler
from ingest.kinesis_records import parse_records
from ingest.logic import Ingestor
from ingest.settings import IngestSettings


def create_handler(ingestor: Ingestor) -> StreamHandler:
    """The handler around ``ingestor``. Lambda's is made below from the environment; the local
    runtime makes its own around an Ingestor with a fault injector or its replayed clock."""
    return stream_handler(
        EventType.KinesisDataStreams,
        parse_records,
        lambda records, context: ingestor.ingest(records, context.get_remaining_time_in_millis()),
        "not a Kinesis stream event; nothing was ingested",
    )


SETTINGS = IngestSettings.from_env()
INGESTOR = Ingestor.from_settings(SETTINGS)
handler = create_handler(INGESTOR)
tune_collector()  # last: everything above is init
