"""Test doubles that tests, benchmarks and the demo share (no test imports ``benchmarks`` for them):

* :mod:`.memory_dynamo`   the in-memory DynamoDB (the calls the functions make, with DynamoDB's item-size,
                          unit and paging rules, and its refusals) and a partition reader over it
* :mod:`.memory_sqs`      an in-memory SQS for the reject queue, with SQS's limits and refusals
* :mod:`.tier_items`      the write tier's items as ingest and compaction write them, from ``keydesign`` alone
* :mod:`.lambda_context`  the Lambda context object a handler receives
* :mod:`.clocks`          a clock that stands still until the test sets or advances it
"""
