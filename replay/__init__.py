"""Failed stream batches put through their function again (``tsctl replay``).

A stream mapping that gives up on a batch (retries or record age exhausted)
sends its on-failure destination a record naming the batch (the shard and the
sequence range), not the records. The records stay readable in the stream only
as long as it keeps them (Kinesis: ``kinesis_retention_hours``; a DynamoDB
stream: 24 hours). This package reads such a message (:mod:`replay.failures`),
reads the range back (:mod:`replay.sources`), invokes the function with the
records as the mapping would have, original sequence numbers and all
(:mod:`replay.invoker`), and deletes the message only once every record is
stored or rejected (:mod:`replay.runner`). docs/decisions.md says why the
records are not published again.
"""
