"""boto3 clients, created once per container with botocore's ``standard`` retry mode.

The region comes from the environment (``AWS_REGION`` in Lambda); the endpoint
too: boto3 honours ``AWS_ENDPOINT_URL`` (and ``AWS_ENDPOINT_URL_<SERVICE>``),
which is how the local runtime points every client at its moto server without
a line of special code here.
"""

from __future__ import annotations

import threading
from typing import Any

import boto3
from botocore.config import Config

_lock = threading.Lock()
_clients: dict[tuple[str, int], Any] = {}


def client_config(*, max_attempts: int = 3, pool: int = 32) -> Config:
    """botocore config: standard retries (with its own backoff for throttling), a
    connection pool sized for the parallel calls a handler makes, and timeouts
    well inside a Lambda's own."""
    return Config(
        retries={"mode": "standard", "max_attempts": max_attempts},
        max_pool_connections=pool,
        connect_timeout=5,
        read_timeout=20,
        tcp_keepalive=True,
    )


def client(service: str, *, max_attempts: int = 3, pool: int = 32) -> Any:
    """The process-wide client for ``service``; thread-safe, created on first use."""
    key = (service, max_attempts)
    found = _clients.get(key)
    if found is not None:
        return found
    with _lock:
        found = _clients.get(key)
        if found is None:
            found = boto3.session.Session().client(service, config=client_config(max_attempts=max_attempts, pool=pool))
            _clients[key] = found
        return found


def reset_clients() -> None:
    """Forget every cached client (tests that switch mocks or endpoints call this)."""
    with _lock:
        _clients.clear()
