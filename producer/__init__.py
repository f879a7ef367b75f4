"""The producer: readings from files or a synthetic workload, packed into Kinesis records.

* :mod:`.sources`    JSON Lines and CSV input
* :mod:`.synthetic`  a synthetic workload (entities, rate, Zipf skew, hot entities)
* :mod:`.packing`    readings packed into records (JSON arrays), records into PutRecords batches
* :mod:`.formats`    readings written as Telegraf, the OpenTelemetry Collector or an IoT Core rule write them
* :mod:`.publisher`  PutRecords with retries of the failed records only, and a summary

``tsctl publish`` is the command line over this library.
"""
