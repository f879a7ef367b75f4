"""The embedded local runtime: the whole system on one machine, with no AWS account.

moto's server plays DynamoDB (with streams), Kinesis, SQS, SNS, S3, Secrets
Manager and CloudWatch on a loopback port; the six handlers run in process,
triggered the way Lambda triggers them: an event source mapping emulator polls
the Kinesis stream (ingest) and the tables' streams (hot keys), a REST API
emulator turns HTTP requests into API Gateway proxy events (query), and
schedules on their clocks run the rotator, the rollups and compaction. See docs/local.md.

* :mod:`.system`                 :class:`LocalSystem`: composes the parts below, starts and stops them
* :mod:`.resources`              the resources, provisioned from the stack's configuration
* :mod:`.moto_server`            the embedded moto server
* :mod:`.moto_speedups`          moto's table order and projection: same results, far faster
* :mod:`.environment`            the process environment (loopback only), clients for it
* :mod:`.app_functions`          the app's functions: environment, size, local parts via their factories
* :mod:`.functions`              a handler in process: imported with its environment, its context, its gate
* :mod:`.mappings`               the running event source mappings, and the rotator's Lambda API
* :mod:`.event_source_mapping`   batching, partial failures, bisect, retries, on-failure destination
* :mod:`.stream_sources`         Kinesis and DynamoDB stream shards as Lambda sees them
* :mod:`.scheduler`              schedules, the speed-up and replay clocks
* :mod:`.api_gateway`            the REST API on loopback
* :mod:`.faults`                 fault injectors, and ``--faults`` parsing
* :mod:`.function_logs`          the functions' stdout routed to a log file
* :mod:`.options`                :class:`LocalOptions`: how the system runs

The demo that plays the seed scenario on it is its own package, :mod:`demo`.
"""

from local_runtime.faults import LocalFaults
from local_runtime.functions import FunctionSpec, LocalFunction
from local_runtime.options import LocalOptions
from local_runtime.system import Endpoints, LocalSystem

__all__ = ["Endpoints", "FunctionSpec", "LocalFaults", "LocalFunction", "LocalOptions", "LocalSystem"]
