"""The embedded local runtime: the whole system on one machine, with no AWS account.

moto's server plays DynamoDB (with streams), Kinesis, SQS, SNS, Secrets Manager
and CloudWatch on a loopback port; the four handlers run in process, triggered
the way Lambda triggers them: an event source mapping emulator polls the
Kinesis stream (ingest) and the tables' streams (hot keys), a REST API emulator
turns HTTP requests into API Gateway proxy events (query), and a scheduler with
a speed-up clock runs the rotator. See docs/local.md.

* :mod:`.system`                 :class:`LocalSystem`, the runtime object
* :mod:`.moto_server`            the embedded moto server
* :mod:`.moto_speedups`          moto's table order and projection: same results, far faster
* :mod:`.environment`            the process environment (loopback only)
* :mod:`.resources`              provisioning from the stack's configuration
* :mod:`.functions`              handlers in process, their context and gate
* :mod:`.stream_sources`         Kinesis and DynamoDB stream shards as Lambda sees them
* :mod:`.event_source_mapping`   batching, partial failures, bisect, retries, on-failure destination
* :mod:`.api_gateway`            the REST API on loopback
* :mod:`.scheduler`              schedules and the speed-up clock
* :mod:`.lambda_mappings`        the rotator's stream mappings, in process
* :mod:`.faults`                 fault injectors, and ``--faults`` parsing
* :mod:`.demo`                   the demo driver: options, the steps in order, the CLI
* :mod:`.demo_scenario`          the story's traffic, and the ledger of what was published
* :mod:`.demo_accounting`        the system read from outside
* :mod:`.demo_report`            the checks, from what was observed
* :mod:`.demo_presentation`      the summary and the pictures
* :mod:`.query_checks`           queries through HTTP compared with what was published
* :mod:`.load_chart`             the picture of partition load
"""

from local_runtime.faults import LocalFaults
from local_runtime.functions import FunctionSpec, LocalFunction
from local_runtime.system import Endpoints, LocalOptions, LocalSystem

__all__ = ["Endpoints", "FunctionSpec", "LocalFaults", "LocalFunction", "LocalOptions", "LocalSystem"]
