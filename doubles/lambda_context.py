"""The Lambda context object a handler receives, for tests and benchmarks that call a handler directly."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

ACCOUNT = "123456789012"


@dataclass
class FakeLambdaContext:
    """The attributes handlers and Powertools read; the remaining time is ``remaining_ms``, and each time a
    handler asks for it is recorded in ``calls``."""

    remaining_ms: int = 60_000
    function_name: str = "function"
    function_version: str = "$LATEST"
    memory_limit_in_mb: int = 1024
    region: str = "eu-west-1"
    aws_request_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    calls: list[int] = field(default_factory=list)

    @property
    def invoked_function_arn(self) -> str:
        return f"arn:aws:lambda:{self.region}:{ACCOUNT}:function:{self.function_name}"

    @property
    def log_group_name(self) -> str:
        return f"/aws/lambda/{self.function_name}"

    @property
    def log_stream_name(self) -> str:
        return f"2026/11/22/[$LATEST]{self.function_name}"

    def get_remaining_time_in_millis(self) -> int:
        self.calls.append(self.remaining_ms)
        return self.remaining_ms
