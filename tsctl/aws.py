"""The AWS clients of the commands: the endpoint and region given, botocore's standard retries."""

from __future__ import annotations

from typing import Any

import boto3
from botocore.config import Config


def aws_client(service: str, endpoint_url: str | None, region: str | None) -> Any:
    return boto3.session.Session().client(
        service,
        endpoint_url=endpoint_url,
        region_name=region,
        config=Config(retries={"mode": "standard", "max_attempts": 5}),
    )
