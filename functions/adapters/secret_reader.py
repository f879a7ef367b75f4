"""Reading a secret from AWS Secrets Manager, through Powertools' parameters utility.

The client is the shared one (standard retries, region and endpoint from the
environment). Callers decide how long to keep the value; this module does not cache.
"""

from __future__ import annotations

from aws_lambda_powertools.utilities.parameters import SecretsProvider

from adapters.clients import client


def read_secret(secret_id: str) -> bytes:
    """The value of secret ``secret_id`` (a name or ARN) as bytes: the
    ``SecretString`` UTF-8 encoded, or the ``SecretBinary`` as stored."""
    provider = SecretsProvider(boto3_client=client("secretsmanager"))
    # max_age=0: no Powertools cache; the caller keeps the value for the container's life.
    value = provider.get(secret_id, max_age=0)
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    raise TypeError(f"secret {secret_id} is neither a string nor binary")
