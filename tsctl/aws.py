"""The AWS clients of the commands: the endpoint and region given, botocore's standard retries (unless a
command gives its own configuration: ``tsctl replay``'s Invoke)."""

from __future__ import annotations

from typing import Any

from botocore.config import Config

from adapters.clients import endpoint_client


def aws_client(service: str, endpoint_url: str | None, region: str | None, config: Config | None = None) -> Any:
    """A client with standard retries, or with ``config`` over them (its retries replace them whole)."""
    return endpoint_client(service, endpoint_url=endpoint_url, region=region, max_attempts=5, config=config)
