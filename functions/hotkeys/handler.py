"""Lambda entry point of the hot-key function (``hotkeys.handler.handler``).

Triggered by the readings table's DynamoDB stream. Thin on purpose: Powertools
decorators, then the logic. The logic works the whole batch at once (its load
is stored run by run, not record by record);
Powertools' ``BatchProcessor`` then asks :meth:`BatchOutcome.settle` about each
record and builds the ``ReportBatchItemFailures`` response from the ones whose
load could not be counted. Settings are parsed at import, so a bad environment
fails the cold start with a message naming the variable.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.batch import EventType

from adapters.collector import tune_collector
from adapters.stream_events import stream_handler, stream_records
from hotkeys.logic import HotKeyMonitor
from hotkeys.settings import HotKeySettings

SETTINGS = HotKeySettings.from_env()
MONITOR = HotKeyMonitor(SETTINGS)
handler = stream_handler(
    EventType.DynamoDBStreams,
    stream_records,
    lambda records, _context: MONITOR.process(records),
    "not a DynamoDB stream event; no load was counted",
)
tune_collector()  # last: everything above is init
