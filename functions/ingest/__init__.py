"""The ingest Lambda: Kinesis batches in, readings written with BatchWriteItem, rejects to SQS."""
