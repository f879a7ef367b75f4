"""The embedded local runtime: the whole system on one machine, with no AWS account.

moto's server plays DynamoDB (with streams), Kinesis, SQS and SNS on a loopback
port; the handlers run in process, triggered the way Lambda triggers them: an
event source mapping emulator polls the Kinesis stream and the tables' streams,
a REST API emulator turns HTTP requests into API Gateway proxy events, and a
scheduler with a speed-up clock runs the rotator. See docs/local.md.

* :mod:`.system`                 :class:`LocalSystem`, the runtime object
* :mod:`.moto_server`            the embedded moto server
* :mod:`.environment`            the process environment (loopback only)
* :mod:`.resources`              provisioning from the stack's configuration
* :mod:`.functions`              handlers in process, their context and gate
* :mod:`.stream_sources`         Kinesis and DynamoDB stream shards as Lambda sees them
* :mod:`.event_source_mapping`   batching, partial failures, bisect, retries, on-failure destination
* :mod:`.api_gateway`            the REST API on loopback
* :mod:`.scheduler`              schedules and the speed-up clock
* :mod:`.faults`                 ``--faults`` parsing
* :mod:`.demo`                   the demo driver
"""

from local_runtime.faults import LocalFaults
from local_runtime.functions import FunctionSpec, LocalFunction
from local_runtime.system import Endpoints, LocalOptions, LocalSystem

__all__ = ["Endpoints", "FunctionSpec", "LocalFaults", "LocalFunction", "LocalOptions", "LocalSystem"]
