"""The AWS clients of the commands: the endpoint and region given, botocore's standard retries (unless a
command gives its own configuration: ``tsctl replay``'s Invoke)."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config


def aws_client(service: str, endpoint_url: str | None, region: str | None, config: Config | None = None) -> Any:
    """A client with standard retries, or with ``config`` over them (its retries replace them whole)."""
    defaults = Config(retries={"mode": "standard", "max_attempts": 5})
    return boto3.session.Session().client(
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        config=defaults if config is None else defaults.merge(config),
    )
