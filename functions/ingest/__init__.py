"""The ingest Lambda: Kinesis batches in, readings written with BatchWriteItem, rejects to SQS.

Its own adapters live here, not in ``adapters/`` (which holds what two or more functions share):
``kinesis_records`` (a Kinesis event's records, KPL aggregates de-aggregated on ``protowire``),
``rejects`` (the rejects queue) and ``dense_marks`` (the write tier's dense marks).
"""
